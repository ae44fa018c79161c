//! The fenced changes of running tasks: heartbeats and marks, each a set-based statement
//! per chunk of leases, read back only when some lease turned out gone.

use std::collections::HashSet;

use backstop_core::driver::prelude::*;
use sqlx::{MySqlConnection, Row};

use crate::conn::{micros, safe};
use crate::driver::{bucket, padded, MySqlDriver, SET_CHUNK};

impl MySqlDriver {
    /// `heartbeat`: each chunk's leases refreshed in a transaction of its own; when some
    /// lease is not, the chunk's running leases read to tell which are held.
    ///
    /// A transaction per chunk, not one for the whole set: a refresh holds its rows'
    /// locks until it commits, and the marks of those rows wait for them (a mark never
    /// skips a row). An instance holding thousands of leases (tasks whose marks queue
    /// behind a backlog) refreshed them all in one transaction of seconds on a loaded
    /// MariaDB, its marks queued behind it, more tasks waited to be marked and the next
    /// refresh grew: the chaos suite's outage lane queued marks for over a minute and
    /// leases expired meanwhile. Each lease's refresh stands alone, so nothing needs the
    /// chunks to commit together.
    ///
    /// Where the server has `SKIP LOCKED`, a heartbeat never waits for another
    /// transaction's row lock (the trait's contract): the chunk's rows under their leases
    /// are locked passing over held ones, then refreshed; a held row is answered from the
    /// last committed version. Older servers refresh with one `UPDATE`, which waits.
    pub(crate) async fn refresh_leases(&self, leases: &[Lease]) -> Result<Vec<bool>> {
        let sql = &self.sql;
        let skip = self.skip_locked;
        self.on_conn(|mut conn| async move {
            let mut flags = Vec::with_capacity(leases.len());
            for chunk in leases.chunks(SET_CHUNK) {
                let mut tx = conn.begin(None).await?;
                let refreshed: HashSet<i64> = if skip {
                    let text = sql.lock_leases(bucket(chunk.len()));
                    let rows = bind_leases(sqlx::query(safe(&text)), chunk)
                        .fetch_all(&mut *tx)
                        .await?;
                    let locked = rows
                        .iter()
                        .map(|r| r.try_get::<i64, _>(0))
                        .collect::<std::result::Result<Vec<i64>, _>>()?;
                    if !locked.is_empty() {
                        let text = sql.touch_rows(bucket(locked.len()));
                        let mut q = sqlx::query(safe(&text));
                        for id in padded(&locked) {
                            q = q.bind(id);
                        }
                        q.execute(&mut *tx).await?;
                    }
                    locked.into_iter().collect()
                } else {
                    let text = sql.heartbeat_many(bucket(chunk.len()));
                    let q = bind_leases(sqlx::query(safe(&text)), chunk);
                    let done = q.execute(&mut *tx).await?;
                    // affected rows count matched rows: all refreshed, or read which
                    match done.rows_affected() == chunk.len() as u64 {
                        true => chunk.iter().map(|l| l.task_id).collect(),
                        false => HashSet::new(),
                    }
                };
                if refreshed.len() == chunk.len() {
                    tx.commit().await?;
                    conn.settled();
                    flags.extend(std::iter::repeat_n(true, chunk.len()));
                    continue;
                }
                // Some lease was not refreshed: those still held are the running rows
                // under the lease we named (a row another transaction holds, as last
                // committed; on an older server, the rows its update just refreshed).
                let text = sql.running_leases(bucket(chunk.len()));
                let mut q = sqlx::query_as::<_, (i64, i64)>(safe(&text));
                for l in padded(chunk) {
                    q = q.bind(l.task_id);
                }
                let held: HashSet<(i64, i64)> = q.fetch_all(&mut *tx).await?.into_iter().collect();
                tx.commit().await?;
                conn.settled();
                flags.extend(chunk.iter().map(|l| {
                    refreshed.contains(&l.task_id) || held.contains(&(l.task_id, l.token))
                }));
            }
            Ok(flags)
        })
        .await
    }

    /// `mark`: the marks applied round by round, in one transaction unless one statement
    /// does it all.
    pub(crate) async fn mark_all(&self, marks: &[Mark]) -> Result<Vec<bool>> {
        let rounds = mark_rounds(marks);
        let rounds = &rounds;
        // A lone mark, or successes that fit one statement, need no transaction.
        let one_statement = marks.len() == 1
            || (rounds.len() == 1
                && marks.len() <= SET_CHUNK
                && marks.iter().all(|m| m.action == MarkAction::Success));
        self.on_conn(|mut conn| async move {
            if one_statement {
                return self.apply_marks(&mut conn, marks, rounds).await;
            }
            let mut tx = conn.begin(None).await?;
            let flags = self.apply_marks(&mut tx, marks, rounds).await?;
            tx.commit().await?;
            conn.settled();
            Ok(flags)
        })
        .await
    }

    /// Apply marks round by round on `ex` (a transaction, or a connection when one
    /// statement does it all).
    pub(crate) async fn apply_marks(
        &self,
        ex: &mut MySqlConnection,
        marks: &[Mark],
        rounds: &[Vec<usize>],
    ) -> std::result::Result<Vec<bool>, sqlx::Error> {
        let sql = &self.sql;
        let mut flags = vec![false; marks.len()];
        for round in rounds {
            // Successes — the hot path — go in one set-based statement per chunk.
            let successes: Vec<usize> = round
                .iter()
                .copied()
                .filter(|&i| marks[i].action == MarkAction::Success)
                .collect();
            for chunk in successes.chunks(SET_CHUNK) {
                // a fresh token per statement: it tags exactly the rows it changed (a
                // succeeded row is never claimed again, so nothing overwrites the tag)
                let token = self.token();
                let text = sql.mark_success_many(bucket(chunk.len()));
                let mut q = sqlx::query(safe(&text)).bind(token);
                for &i in padded(chunk) {
                    q = q.bind(marks[i].lease.task_id);
                }
                for &i in padded(chunk) {
                    q = q.bind(marks[i].lease.task_id).bind(marks[i].lease.token);
                }
                let done = q.execute(&mut *ex).await?;
                if done.rows_affected() == chunk.len() as u64 {
                    for &i in chunk {
                        flags[i] = true;
                    }
                    continue;
                }
                let text = sql.ids_with_token(bucket(chunk.len()));
                let mut q = sqlx::query_scalar::<_, i64>(safe(&text)).bind(token);
                for &i in padded(chunk) {
                    q = q.bind(marks[i].lease.task_id);
                }
                let applied: HashSet<i64> = q.fetch_all(&mut *ex).await?.into_iter().collect();
                for &i in chunk {
                    flags[i] = applied.contains(&marks[i].lease.task_id);
                }
            }
            for &i in round {
                let m = &marks[i];
                let Lease { task_id, token } = m.lease;
                let q = match &m.action {
                    MarkAction::Success => continue,
                    MarkAction::Retry { delay, error } => sqlx::query(safe(&sql.mark_retry))
                        .bind(micros(*delay))
                        .bind(error.as_str()),
                    MarkAction::Fail { error } => {
                        sqlx::query(safe(&sql.mark_fail)).bind(error.as_str())
                    }
                    MarkAction::Release => sqlx::query(safe(&sql.release)),
                    MarkAction::Cancel { reason } => {
                        sqlx::query(safe(&sql.mark_cancel)).bind(reason.as_str())
                    }
                    MarkAction::Snooze { delay, max, error } => sqlx::query(safe(&sql.mark_snooze))
                        .bind(i64::from(*max))
                        .bind(micros(*delay))
                        .bind(i64::from(*max))
                        .bind(i64::from(*max))
                        .bind(error.as_str())
                        .bind(i64::from(*max))
                        .bind(i64::from(*max)),
                };
                let done = q.bind(task_id).bind(token).execute(&mut *ex).await?;
                flags[i] = done.rows_affected() == 1;
            }
        }
        Ok(flags)
    }
}

/// A statement's parameters for a chunk of leases: its ids, then its (id, lease) pairs,
/// padded to its bucket (`heartbeat_many`, `lock_leases`).
fn bind_leases<'q>(
    mut q: sqlx::query::Query<'q, sqlx::MySql, sqlx::mysql::MySqlArguments>,
    chunk: &[Lease],
) -> sqlx::query::Query<'q, sqlx::MySql, sqlx::mysql::MySqlArguments> {
    for l in padded(chunk) {
        q = q.bind(l.task_id);
    }
    for l in padded(chunk) {
        q = q.bind(l.task_id).bind(l.token);
    }
    q
}
