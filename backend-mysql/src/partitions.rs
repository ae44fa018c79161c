//! The claim of a partitioned limited type (core's `Gate` and `Partitions`), in the
//! limited claim's transaction (its queue row locked): each partition key's room from
//! its running tasks and its starts in the window, then core's `KeyWalk`: its due tasks
//! walked in claim order up to that room, key by key from where the last claim stopped,
//! the walks taken in turns.

use backstop_core::driver::prelude::*;
use chrono::NaiveDateTime;
use sqlx::{MySqlConnection, Row};

use crate::claim::Picked;
use crate::conn::safe;
use crate::rows::raw_task;
use crate::sql::LockWait;

/// The statements of a partitioned claim, and where the next claim of each type starts.
#[derive(Debug)]
pub(crate) struct PartitionSql {
    t: String,
    cursors: KeyCursors,
    /// ? event type: its running tasks per key.
    running: String,
    /// ? event type, ? the window (µs): its starts per key.
    started: String,
    /// ? event type, ? a key: the next key after it with a due task.
    next_key: String,
}

/// The index of keyed pending tasks (`partition_status` is NULL for a task without a
/// key: see migration 20).
const KEYED: &str = "FORCE INDEX (ix_partition) WHERE partition_status = 0";

/// The claim index, of the tasks without a key.
const UNKEYED: &str = "FORCE INDEX (ix_claim_type) WHERE status = 0";

impl PartitionSql {
    /// The statements on task table `t` and ledger `tr` (both quoted).
    pub(crate) fn new(t: &str, tr: &str) -> Self {
        PartitionSql {
            t: t.to_owned(),
            cursors: KeyCursors::default(),
            running: format!(
                "SELECT partition_key, CAST(COUNT(*) AS SIGNED) FROM {t} FORCE INDEX (ix_claim_type)
                 WHERE status = 3 AND event_type = ? GROUP BY partition_key"
            ),
            started: format!(
                "SELECT partition_key, CAST(SUM(starts) AS SIGNED) FROM {tr}
                 WHERE event_type = ? AND at > NOW(3) - INTERVAL ? MICROSECOND
                 GROUP BY partition_key"
            ),
            next_key: format!(
                "SELECT partition_key FROM {t} {KEYED} AND event_type = ? AND partition_key > ?
                   AND next_run_at <= NOW(3)
                 ORDER BY partition_key LIMIT 1"
            ),
        }
    }

    /// ? event type, ? key, ? most: the key's due tasks in claim order, locked as `wait`
    /// says, with the read's `NOW(3)`; of the tasks without a key when `key` is empty.
    fn walk(&self, wait: LockWait, key: &str) -> String {
        format!(
            "SELECT {COLUMNS}, NOW(3) FROM {t} {index} AND event_type = ? AND partition_key = ?
               AND next_run_at <= NOW(3)
             ORDER BY priority, next_run_at, id LIMIT ? FOR UPDATE{clause}",
            t = self.t,
            index = if key.is_empty() { UNKEYED } else { KEYED },
            clause = wait.clause(),
        )
    }

    /// The tasks a claim of at most `limit` of `event_type`, partitioned under `gate`,
    /// takes: locked, in turns. `window` is the rate's window in microseconds.
    pub(crate) async fn pick(
        &self,
        conn: &mut MySqlConnection,
        wait: LockWait,
        event_type: &str,
        gate: Gate,
        window: i64,
        limit: usize,
    ) -> std::result::Result<Picked, sqlx::Error> {
        let mut used = Partitions::new(gate);
        if gate.counts_running() {
            for r in sqlx::query(safe(&self.running))
                .bind(event_type)
                .fetch_all(&mut *conn)
                .await?
            {
                used.running(&r.try_get::<String, _>(0)?, r.try_get(1)?);
            }
        }
        if gate.counts_starts() {
            for r in sqlx::query(safe(&self.started))
                .bind(event_type)
                .bind(window)
                .fetch_all(&mut *conn)
                .await?
            {
                used.started(&r.try_get::<String, _>(0)?, r.try_get(1)?);
            }
        }
        let mut picked = Picked::default();
        let mut walk = KeyWalk::new(used, limit, self.cursors.start(event_type));
        loop {
            match walk.step() {
                KeyStep::Walk { key, room } => {
                    let mut rows = Vec::new();
                    for row in sqlx::query(safe(&self.walk(wait, key)))
                        .bind(event_type)
                        .bind(key)
                        .bind(room as i64)
                        .fetch_all(&mut *conn)
                        .await?
                    {
                        rows.push(raw_task(&row)?);
                        let at = row.try_get::<NaiveDateTime, _>(COLUMN_COUNT)?;
                        picked.at = picked.at.max(Some(at));
                    }
                    walk.walked(rows);
                }
                KeyStep::NextKey { after } => {
                    let next = sqlx::query_scalar::<_, String>(safe(&self.next_key))
                        .bind(event_type)
                        .bind(after)
                        .fetch_optional(&mut *conn)
                        .await?;
                    walk.next_key(next);
                }
                KeyStep::Done => break,
            }
        }
        let (due, cursor) = walk.finish();
        self.cursors.set(event_type, cursor);
        picked.due = due;
        picked
            .due
            .sort_unstable_by_key(|r| (r.priority, r.next_run_at, r.id));
        Ok(picked)
    }
}
