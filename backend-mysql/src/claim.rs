//! How a batch is claimed ([`ClaimStrategy`]), chosen by the server's version, and the
//! claim's locking read.

use std::time::Duration;

use backstop_core::driver::prelude::*;
#[cfg(doc)]
use backstop_core::TaskStore;
use chrono::NaiveDateTime;
use sqlx::{MySqlConnection, Row};

use crate::conn::safe;
use crate::driver::{bucket, padded, MySqlDriver, SET_CHUNK};
use crate::rows::raw_task;
use crate::sql::{LockWait, Sql, ALL_LEVELS, PRIORITY_LEVELS};

/// How a batch of tasks is claimed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum ClaimStrategy {
    /// Queue-then-skip on MariaDB ≥ 10.6, skip locked on MySQL ≥ 8.0.1 (which has no
    /// `WAIT n`), else ordered update; skip locked on a Galera cluster, the one strategy
    /// a store on Galera takes (see the guide's Scale-out chapter). The default.
    #[default]
    Auto,
    /// `SELECT … ORDER BY next_run_at, id LIMIT n FOR UPDATE` + `UPDATE … WHERE id IN
    /// (…)` in one transaction: an ordered update, in two statements. Works on every
    /// version of one server (a store on Galera refuses it: `Config`); concurrent
    /// claimers queue behind each other's row locks, and behind an application's
    /// transaction that has enqueued a task and not committed yet (InnoDB's locking read
    /// waits on an uncommitted insert it meets near the head of the queue:
    /// keep such transactions short, or claims wait up to `innodb_lock_wait_timeout`).
    /// (A single
    /// `UPDATE … ORDER BY … LIMIT` changes a column of the index it scans, so the server
    /// collects every due row before applying the limit: a claim's cost would grow with
    /// the backlog.)
    OrderedUpdate,
    /// `SELECT … FOR UPDATE SKIP LOCKED` + `UPDATE … WHERE id IN (…)` in one transaction:
    /// concurrent claimers pass each other.
    SkipLocked,
    /// Claimers take turns at the head of the queue and pass only a stalled one: the
    /// ordered claim's locking read waits up to 1 s for another claim's row locks
    /// (`FOR UPDATE WAIT 1`); past that, the claim starts over with `SKIP LOCKED`.
    ///
    /// Under contention claims queue instead of running side by side over the same
    /// index head, which keeps several instances at least as fast as one (where skip
    /// locked slows down as instances are added; see the guide's Benchmarks), while a
    /// claimer that stalls mid-claim (a paused VM, a partitioned host) holds the others
    /// up by a second, not `innodb_lock_wait_timeout`. Once a claim has waited out that
    /// second, the store's claims skip locked rows at once for the next 10 s, then queue
    /// again: a holder that does not let go — a stalled claimer, or an application's
    /// transaction that enqueued a task and has not committed (InnoDB's locking read
    /// waits on an uncommitted insert near the head of the queue, due or not) — costs
    /// one claim a second every 10 s, not every claim. Needs MariaDB ≥ 10.6 (`WAIT n`
    /// and `SKIP LOCKED`); the default there, but not on a Galera cluster, where a store
    /// refuses it (`Config`): row locks queue the claimers of one node only.
    QueueThenSkip,
}

impl ClaimStrategy {
    /// What [`Auto`](Self::Auto) resolves to on a server reporting `version`
    /// (`SELECT VERSION()`).
    ///
    /// ```
    /// use backstop_mysql::ClaimStrategy;
    /// assert_eq!(ClaimStrategy::auto_for("10.11.14-MariaDB"), ClaimStrategy::QueueThenSkip);
    /// assert_eq!(ClaimStrategy::auto_for("8.0.36"), ClaimStrategy::SkipLocked);
    /// assert_eq!(ClaimStrategy::auto_for("10.5.23-MariaDB"), ClaimStrategy::OrderedUpdate);
    /// assert_eq!(ClaimStrategy::auto_for("5.7.44-log"), ClaimStrategy::OrderedUpdate);
    /// ```
    pub fn auto_for(version: &str) -> ClaimStrategy {
        if supports_queue_then_skip(version) {
            ClaimStrategy::QueueThenSkip
        } else if supports_skip_locked(version) {
            ClaimStrategy::SkipLocked
        } else {
            ClaimStrategy::OrderedUpdate
        }
    }
}

/// Whether a server version string supports `INSERT … RETURNING` (MariaDB ≥ 10.5).
pub(crate) fn supports_returning(version: &str) -> bool {
    matches!(parse_version(version), (true, v) if v >= (10, 5, 0))
}

/// Whether a server version string supports `SKIP LOCKED`.
pub(crate) fn supports_skip_locked(version: &str) -> bool {
    match parse_version(version) {
        (true, v) => v >= (10, 6, 0),
        (false, v) => v >= (8, 0, 1),
    }
}

/// Whether the server runs [`ClaimStrategy::QueueThenSkip`]: MariaDB ≥ 10.6 (MySQL has
/// no `SELECT … FOR UPDATE WAIT n`).
pub(crate) fn supports_queue_then_skip(version: &str) -> bool {
    matches!(parse_version(version), (true, v) if v >= (10, 6, 0))
}

/// (is MariaDB, (major, minor, patch)) of a `VERSION()` string.
pub(crate) fn parse_version(version: &str) -> (bool, (u32, u32, u32)) {
    let nums: Vec<u32> = version
        .split(|c: char| !c.is_ascii_digit())
        .take(3)
        .map(|p| p.parse().unwrap_or(0))
        .collect();
    let v = (
        nums.first().copied().unwrap_or(0),
        nums.get(1).copied().unwrap_or(0),
        nums.get(2).copied().unwrap_or(0),
    );
    (version.to_ascii_lowercase().contains("mariadb"), v)
}

/// How long a [`ClaimStrategy::QueueThenSkip`] claim queues behind another (seconds).
pub(crate) const QUEUE_WAIT_S: u32 = 1;

/// How long a [`ClaimStrategy::QueueThenSkip`] store's claims skip locked rows without
/// queueing first, after one of its queued claims timed out.
///
/// Claims hold their rows for milliseconds, so a queued claim that waits out
/// [`QUEUE_WAIT_S`] met a holder that does not let go: a stalled claimer, or an
/// application's transaction that enqueued a task and has not committed yet. InnoDB's
/// locking read meets an uncommitted insert near the head of the queue (a due task of
/// the type, a delayed one, or one of the next type in the index) and waits on it; the
/// holder may keep it for as long as its transaction lasts. Without the pause every
/// claim would wait a second again while it does; with it, one claim per pause does.
pub(crate) const QUEUE_PAUSE: Duration = Duration::from_secs(10);

/// The claim's locking read of due tasks, in claim order `(priority, next_run_at, id)`,
/// whole (the claim's update then needs no read back), with the read's `NOW(3)`: for
/// each event type, one ordered walk of the `(status, event_type, priority, next_run_at,
/// id)` index per level the transaction's opening found due (see [`Sql::pick`]), each
/// stopping at `limit`, merged. The rows of a walk beyond the merged limit stay locked
/// (unclaimed) until the claim's transaction ends. Also the types with a concurrency
/// limit and a due task, which the walks pass by, for [`pick_limited`].
pub(crate) async fn pick(
    sql: &Sql,
    conn: &mut MySqlConnection,
    wait: LockWait,
    event_types: &[String],
    limit: usize,
) -> std::result::Result<Picked, sqlx::Error> {
    let mut picked = Picked::default();
    // Of several types, only those the opening probe found due are read: one statement
    // for the probe's answers instead of a locking read per type (an idle engine's poll
    // of many types costs a few statements, not one per type).
    let mut wanted = vec![true; event_types.len()];
    if event_types.len() > 1 {
        let row = sqlx::query(safe(&sql.due_types(event_types.len())))
            .fetch_one(&mut *conn)
            .await?;
        for (i, w) in wanted.iter_mut().enumerate() {
            *w = row.try_get::<i64, _>(i)? != 0;
        }
    }
    for (i, t) in event_types.iter().enumerate() {
        if !wanted[i] {
            continue;
        }
        let text = sql.pick(wait, i);
        let mut q = sqlx::query(safe(&text));
        for _ in 0..PRIORITY_LEVELS {
            q = q.bind(t).bind(limit as i64);
        }
        for row in q.fetch_all(&mut *conn).await? {
            if row.try_get::<i64, _>(COLUMN_COUNT + 1)? != 0 {
                picked.limited.push(t.clone());
                continue;
            }
            picked.due.push(raw_task(&row)?);
            // the last read's time: no earlier than any picked row's due time
            picked.at = Some(row.try_get::<NaiveDateTime, _>(COLUMN_COUNT)?);
        }
    }
    picked
        .due
        .sort_unstable_by_key(|r| (r.priority, r.next_run_at, r.id));
    picked.due.truncate(limit);
    Ok(picked)
}

/// What [`pick`] read.
#[derive(Default)]
pub(crate) struct Picked {
    /// The due rows, in claim order, locked.
    pub due: Vec<RawTask>,
    /// The time of the last read.
    pub at: Option<NaiveDateTime>,
    /// The types with a concurrency limit and a due task, passed by.
    pub limited: Vec<String>,
}

/// The locking read of a limited type's due tasks, on a transaction that holds the
/// type's queue row ([`Sql::limit_lock`]) or hands its room over: at most `room`, in
/// claim order, unguarded walks of the priority levels in `levels` (see
/// [`Sql::walks`]; none: nothing read).
pub(crate) async fn pick_limited(
    sql: &Sql,
    conn: &mut MySqlConnection,
    wait: LockWait,
    event_type: &str,
    room: usize,
    levels: u32,
) -> std::result::Result<Picked, sqlx::Error> {
    let mut picked = Picked::default();
    if levels & ALL_LEVELS == 0 {
        return Ok(picked);
    }
    let text = sql.walks(wait, None, levels);
    let mut q = sqlx::query(safe(&text));
    for _ in 0..(levels & ALL_LEVELS).count_ones() {
        q = q.bind(event_type).bind(room as i64);
    }
    for row in q.fetch_all(&mut *conn).await? {
        picked.due.push(raw_task(&row)?);
        picked.at = Some(row.try_get::<NaiveDateTime, _>(COLUMN_COUNT)?);
    }
    picked
        .due
        .sort_unstable_by_key(|r| (r.priority, r.next_run_at, r.id));
    picked.due.truncate(room);
    Ok(picked)
}

/// A limited claim's transaction: READ COMMITTED, so each read sees every claim
/// committed before the queue row's lock was granted.
pub(crate) const LIMITED_BEGIN: &str =
    "SET TRANSACTION ISOLATION LEVEL READ COMMITTED; START TRANSACTION";

impl MySqlDriver {
    /// Claim up to `limit` due tasks of `event_type`, a type with a concurrency limit,
    /// in a transaction of its own at READ COMMITTED ([`lock_gate`](Self::lock_gate),
    /// then [`claim_gated`](Self::claim_gated)).
    pub(crate) async fn claim_limited(
        &self,
        owner: &Owner,
        event_type: &str,
        limit: usize,
    ) -> Result<Vec<RawTask>> {
        self.on_conn(|mut conn| async move {
            let mut tx = conn.begin(Some(LIMITED_BEGIN)).await?;
            let mut rows = Vec::new();
            if let Some(gate) = self.lock_gate(&mut tx, event_type).await? {
                rows = self
                    .claim_gated(&mut tx, owner, event_type, gate, limit)
                    .await?;
            }
            tx.commit().await?;
            conn.settled();
            Ok(rows)
        })
        .await
    }

    /// Lock `event_type`'s queue row (`limit_lock`: claims of the type on every instance
    /// take turns on it) and read its limits: `None` when it has none, or is paused. On
    /// a Galera cluster the row is written first (`limit_turn`): a lock holds on its own
    /// node only, and a write makes a claim on another node fail at commit (error 1213,
    /// run again) instead of counting the same free room.
    pub(crate) async fn lock_gate(
        &self,
        tx: &mut MySqlConnection,
        event_type: &str,
    ) -> std::result::Result<Option<Gate>, sqlx::Error> {
        if self.galera {
            sqlx::query(safe(&self.sql.limit_turn))
                .bind(event_type)
                .execute(&mut *tx)
                .await?;
        }
        self.gate(tx, &self.sql.limit_lock, event_type).await
    }

    /// `event_type`'s limits as `text` (`limit_lock` or `gate_read`) reads them.
    pub(crate) async fn gate(
        &self,
        tx: &mut MySqlConnection,
        text: &str,
        event_type: &str,
    ) -> std::result::Result<Option<Gate>, sqlx::Error> {
        let gate: Option<(i64, i64, i64, i64)> = sqlx::query_as(safe(text))
            .bind(event_type)
            .fetch_optional(&mut *tx)
            .await?;
        Ok(gate.map(
            |(concurrency, rate_limit, rate_window_ms, partitioned)| Gate {
                concurrency,
                rate_limit,
                rate_window_ms,
                partitioned: partitioned != 0,
            },
        ))
    }

    /// The claim of a limited type under its queue row's lock, on `tx` (READ
    /// COMMITTED): its running tasks counted by a read that sees every claim committed
    /// before the lock was granted, then at most the room left picked and claimed, and
    /// a rate-limited type's starts recorded in the ledger.
    pub(crate) async fn claim_gated(
        &self,
        tx: &mut MySqlConnection,
        owner: &Owner,
        event_type: &str,
        gate: Gate,
        limit: usize,
    ) -> std::result::Result<Vec<RawTask>, sqlx::Error> {
        let sql = &self.sql;
        let wait = self.limited_wait();
        let window = crate::conn::micros(gate.window());
        let picked = if gate.partitioned {
            let p = &sql.partitions;
            p.pick(tx, wait, event_type, gate, window, limit).await?
        } else {
            let mut running = 0;
            if gate.counts_running() {
                running = sqlx::query_scalar(safe(&sql.running_count))
                    .bind(event_type)
                    .fetch_one(&mut *tx)
                    .await?;
            }
            let mut started = 0;
            if gate.counts_starts() {
                started = sqlx::query_scalar(safe(&sql.rate_used))
                    .bind(event_type)
                    .bind(window)
                    .fetch_one(&mut *tx)
                    .await?;
            }
            match gate.room(limit, running, started) {
                0 => Picked::default(),
                room => pick_limited(sql, tx, wait, event_type, room, ALL_LEVELS).await?,
            }
        };
        let mut rows = Vec::new();
        if let Some(at) = picked.at {
            rows = self.claim_picked(tx, owner, picked.due, at).await?;
        }
        if gate.counts_starts() && !rows.is_empty() {
            for (key, n) in starts_per_key(&rows) {
                sqlx::query(safe(&sql.rate_record))
                    .bind(event_type)
                    .bind(n)
                    .bind(key)
                    .execute(&mut *tx)
                    .await?;
            }
            sqlx::query(safe(&sql.rate_trim))
                .bind(event_type)
                .bind(window)
                .execute(&mut *tx)
                .await?;
        }
        Ok(rows)
    }

    /// How a limited claim's walks meet a row another claim holds.
    fn limited_wait(&self) -> LockWait {
        if self.strategy == ClaimStrategy::OrderedUpdate {
            LockWait::Queue
        } else {
            LockWait::Skip
        }
    }

    /// The hand-over of a type whose only limit is its concurrency, on `tx` after its
    /// marks (core's `Gate::hands_over_unlocked`), without the queue row's lock: at most
    /// as many tasks as the marks' `applied` tasks of the type, and the room the
    /// running count (which no longer counts them) leaves.
    pub(crate) async fn hand_over(
        &self,
        tx: &mut MySqlConnection,
        owner: &Owner,
        event_type: &str,
        gate: Gate,
        applied: &[i64],
        limit: usize,
    ) -> std::result::Result<Vec<RawTask>, sqlx::Error> {
        let sql = &self.sql;
        let (mut freed, mut running, mut levels) = (0, 0, 0);
        // the running count and the due levels read with the last chunk's, after every
        // mark (a retried task's level is due only when its retry is)
        for chunk in applied.chunks(SET_CHUNK) {
            let text = sql.of_type(bucket(chunk.len()));
            let mut q = sqlx::query_as::<_, (i64, i64, i64)>(safe(&text)).bind(event_type);
            for id in padded(chunk) {
                q = q.bind(id);
            }
            let (of_type, now_running, due_levels) = q
                .bind(event_type)
                .bind(event_type)
                .fetch_one(&mut *tx)
                .await?;
            freed += usize::try_from(of_type).unwrap_or(0);
            running = now_running;
            levels = u32::try_from(due_levels).unwrap_or(ALL_LEVELS);
        }
        if freed == 0 {
            return Ok(Vec::new());
        }
        let wait = self.limited_wait();
        let picked = match gate.handover_room(limit, freed, running) {
            0 => return Ok(Vec::new()),
            room => pick_limited(sql, tx, wait, event_type, room, levels).await?,
        };
        match picked.at {
            Some(at) => self.claim_picked(tx, owner, picked.due, at).await,
            None => Ok(Vec::new()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A batch goes in multi-row inserts only where an insert can return its rows.
    #[test]
    pub(crate) fn multi_row_inserts_need_mariadb_returning() {
        assert!(supports_returning("10.11.14-MariaDB-0+deb12u1"));
        assert!(supports_returning("10.5.0-MariaDB"));
        assert!(!supports_returning("10.4.32-MariaDB"));
        assert!(!supports_returning("8.0.36"));
        assert!(!supports_returning("8.4.0-log"));
    }
}
