//! The claim of a partitioned limited type (core's `Gate` and `Partitions`): each
//! partition key's room from its running tasks and its starts in the window, then
//! core's `KeyWalk`: its due tasks walked in claim order up to that room, key by key
//! from where the last claim stopped, the walks taken in turns; all in the claim's write
//! transaction.

use backstop_core::driver::prelude::*;
use rusqlite::{params, Connection, OptionalExtension};

use crate::rows::{raw_task, tasks};

/// The statements of a partitioned claim, and where the next claim of each type starts.
#[derive(Debug)]
pub(crate) struct PartitionSql {
    cursors: KeyCursors,
    /// ?1 event type: its running tasks per key.
    running: String,
    /// ?1 event type, ?2 the window's start: its starts per key.
    started: String,
    /// ?1 event type, ?2 a key, ?3 now: the next key after it with a due task, on the
    /// partition index (whose rows have a key).
    next_key: String,
    /// ?1 event type, ?2 a key, ?3 now, ?4 most: the key's due tasks in claim order.
    walk_keyed: String,
    /// As `walk_keyed`, of the tasks without a key (?2 `''`), on the claim index.
    walk_unkeyed: String,
    /// ?1 owner, ?2 now, ?3 the ids (a JSON array): the claim of the picked tasks.
    claim_ids: String,
}

impl PartitionSql {
    /// The statements on task table `t` (quoted), ledger `tr` (quoted), and the
    /// partition index of table `table`.
    pub(crate) fn new(t: &str, tr: &str, table: &str) -> Self {
        let ix = format!("\"{table}_partition_ix\"");
        let walk = |from: &str, keyed: &str| {
            format!(
                "SELECT {COLUMNS} FROM {from}
                 WHERE status = 0 AND event_type = ?1 AND partition_key = ?2 {keyed}
                   AND next_run_at <= ?3
                 ORDER BY priority, next_run_at, id LIMIT CAST(?4 AS INTEGER)"
            )
        };
        PartitionSql {
            cursors: KeyCursors::default(),
            running: format!(
                "SELECT partition_key, count(*) FROM {t}
                 WHERE status = 3 AND event_type = ?1 GROUP BY partition_key"
            ),
            started: format!(
                "SELECT partition_key, SUM(starts) FROM {tr}
                 WHERE event_type = ?1 AND at > ?2 GROUP BY partition_key"
            ),
            next_key: format!(
                "SELECT partition_key FROM {t} INDEXED BY {ix}
                 WHERE status = 0 AND event_type = ?1 AND partition_key > ?2
                   AND partition_key <> '' AND next_run_at <= ?3
                 ORDER BY partition_key LIMIT 1"
            ),
            walk_keyed: walk(&format!("{t} INDEXED BY {ix}"), "AND partition_key <> ''"),
            walk_unkeyed: walk(t, ""),
            claim_ids: format!(
                "UPDATE {t} SET status = 3, owner = ?1, attempts = attempts + 1,
                    lease = lease + 1, updated_at = ?2
                 WHERE id IN (SELECT value FROM json_each(?3)) AND status = 0
                 RETURNING {COLUMNS}"
            ),
        }
    }

    /// Claim up to `limit` due tasks of `event_type`, partitioned under `gate`, at `now`
    /// (Unix ms) for `owner`; the ledger rows (one per key claimed, `rate_record`) are
    /// the caller's.
    pub(crate) fn claim(
        &self,
        tx: &Connection,
        owner: &str,
        now: i64,
        event_type: &str,
        gate: Gate,
        limit: usize,
    ) -> rusqlite::Result<Vec<RawTask>> {
        let mut used = Partitions::new(gate);
        if gate.counts_running() {
            let mut stmt = tx.prepare_cached(&self.running)?;
            let mut rows = stmt.query(params![event_type])?;
            while let Some(r) = rows.next()? {
                used.running(&r.get::<_, String>(0)?, r.get(1)?);
            }
        }
        if gate.counts_starts() {
            let mut stmt = tx.prepare_cached(&self.started)?;
            let mut rows = stmt.query(params![event_type, now - gate.rate_window_ms])?;
            while let Some(r) = rows.next()? {
                used.started(&r.get::<_, String>(0)?, r.get(1)?);
            }
        }
        let mut walk = KeyWalk::new(used, limit, self.cursors.start(event_type));
        loop {
            match walk.step() {
                KeyStep::Walk { key, room } => {
                    let text = match key {
                        "" => &self.walk_unkeyed,
                        _ => &self.walk_keyed,
                    };
                    let mut stmt = tx.prepare_cached(text)?;
                    let rows = tasks(&mut stmt, params![event_type, key, now, room as i64])?;
                    walk.walked(rows);
                }
                KeyStep::NextKey { after } => {
                    let next = tx
                        .prepare_cached(&self.next_key)?
                        .query_row(params![event_type, after, now], |r| r.get(0))
                        .optional()?;
                    walk.next_key(next);
                }
                KeyStep::Done => break,
            }
        }
        let (picked, cursor) = walk.finish();
        self.cursors.set(event_type, cursor);
        if picked.is_empty() {
            return Ok(picked);
        }
        let ids: Vec<String> = picked.iter().map(|t| t.id.to_string()).collect();
        let ids = format!("[{}]", ids.join(","));
        let mut stmt = tx.prepare_cached(&self.claim_ids)?;
        let mut claimed = stmt
            .query_map(params![owner, now, ids], raw_task)?
            .collect::<rusqlite::Result<Vec<_>>>()?;
        claimed.sort_unstable_by_key(|t| (t.priority, t.next_run_at, t.id));
        Ok(claimed)
    }
}
