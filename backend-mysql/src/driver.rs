//! The MySQL driver: the statement shapes of the store contract, on pooled connections.

use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use crate::operators::{audit_entry, changed};
use backstop_core::driver::prelude::*;
#[cfg(doc)]
use backstop_core::TaskStore;
use chrono::{DateTime, NaiveDateTime, Utc};
use sqlx::{MySqlConnection, MySqlPool, Row};

use crate::claim::{pick, ClaimStrategy, QUEUE_PAUSE, QUEUE_WAIT_S};
use crate::conn::{micros, safe, Held, MySqlOwnConnection};
use crate::connect::{error_number, my_err};
use crate::options::MySqlOptions;
use crate::rows::{raw_task, Cols};
use crate::sql::{LockWait, Sql};

/// Most rows one set-based statement names (keeps statements and their plans small).
pub(crate) const SET_CHUNK: usize = 128;

/// The statement size for `n` rows: the next power of two. Statements whose text varies
/// with every batch size would churn the driver's prepared-statement cache (each eviction
/// is a `COM_STMT_CLOSE` round trip); a handful of sizes stay cached.
pub(crate) fn bucket(n: usize) -> usize {
    n.max(1).next_power_of_two()
}

/// `items`, then its last item repeated up to [`bucket`]`(items.len())`. Repeating a row in
/// an `IN (…)` list or a `CASE id WHEN …` changes nothing.
pub(crate) fn padded<T>(items: &[T]) -> impl Iterator<Item = &T> {
    let extra = bucket(items.len()) - items.len();
    items
        .iter()
        .chain(items.last().into_iter().cycle().take(extra))
}

/// The MySQL driver under a [`MySqlStore`](crate::MySqlStore): its pool, its SQL, the
/// claim strategy the server supports and the claims' tokens.
pub(crate) struct MySqlDriver {
    pub(crate) pool: MySqlPool,
    pub(crate) sql: Sql,
    pub(crate) options: MySqlOptions,
    /// The strategy in force (never `Auto`).
    pub(crate) strategy: ClaimStrategy,
    pub(crate) server_version: String,
    /// Whether inserts can return their rows (`INSERT … RETURNING`: MariaDB ≥ 10.5), so
    /// a batch enqueue goes in multi-row inserts.
    pub(crate) returning: bool,
    /// Claim tokens: a random start, then +1 per claim (unique per store).
    pub(crate) next_token: AtomicU64,
    /// [`ClaimStrategy::QueueThenSkip`]: until when (ms after `opened`) claims skip
    /// locked rows without queueing first, because a queued claim of this store timed out
    /// (see [`QUEUE_PAUSE`]); 0 when they queue.
    pub(crate) skip_until_ms: AtomicU64,
    /// When the store was made: the origin of `skip_until_ms`.
    pub(crate) opened: std::time::Instant,
    /// The servers of the store's URL, whose pool this turns over them (`None` on a pool
    /// of the application's own).
    pub(crate) ring: Option<std::sync::Arc<crate::hosts::Ring>>,
    /// The server is a Galera cluster's node (`wsrep_on`): row locks and `GET_LOCK` hold
    /// on that node only, and conflicts between nodes fail a transaction at `COMMIT`.
    pub(crate) galera: bool,
    /// The server has `SKIP LOCKED` (MySQL ≥ 8.0.1, MariaDB ≥ 10.6): heartbeats pass
    /// over rows another transaction holds.
    pub(crate) skip_locked: bool,
}

impl Drop for MySqlDriver {
    fn drop(&mut self) {
        if let Some(ring) = &self.ring {
            ring.detach();
        }
    }
}

impl MySqlDriver {
    /// Whether a queued claim timed out less than [`QUEUE_PAUSE`] ago, so claims skip.
    pub(crate) fn queue_paused(&self) -> bool {
        let now = self.opened.elapsed().as_millis() as u64;
        now < self.skip_until_ms.load(Ordering::Relaxed)
    }

    /// A queued claim timed out: skip locked rows for [`QUEUE_PAUSE`].
    pub(crate) fn pause_queueing(&self) {
        let until = (self.opened.elapsed() + QUEUE_PAUSE).as_millis() as u64;
        self.skip_until_ms.fetch_max(until, Ordering::Relaxed);
        tracing::debug!(
            pause_ms = QUEUE_PAUSE.as_millis() as u64,
            "a queued claim waited out its lock wait: claims skip locked rows for a while"
        );
    }

    /// A fresh claim token: tags the rows one statement changes.
    pub(crate) fn token(&self) -> i64 {
        (self.next_token.fetch_add(1, Ordering::Relaxed) & (i64::MAX as u64)) as i64
    }

    /// Run `f` on a pooled connection ([`Held`]: one dropped mid-transaction is closed).
    pub(crate) async fn on_conn<T, F, Fut>(&self, f: F) -> Result<T>
    where
        F: FnOnce(Held) -> Fut,
        Fut: Future<Output = std::result::Result<T, sqlx::Error>>,
    {
        let at = self.ring.as_ref().and_then(|r| r.at());
        match f(self.conn().await?).await {
            Ok(done) => Ok(done),
            Err(e) => {
                // a Galera node that left the primary component after the connection
                // opened refuses every statement (1047); a broken connection (I/O) may
                // be a node that died: either way an election tells where to write
                let node_failed = matches!(e, sqlx::Error::Io(_)) || error_number(&e) == Some(1047);
                if let (Some(ring), true) = (&self.ring, node_failed) {
                    ring.failed(at).await;
                }
                Err(my_err(e))
            }
        }
    }

    /// A pooled connection ([`Held`]: one dropped mid-transaction is closed).
    pub(crate) async fn conn(&self) -> Result<Held> {
        let at = self.ring.as_ref().and_then(|r| r.at());
        match self.pool.acquire().await {
            Ok(conn) => Ok(Held::new(conn)),
            Err(e) => {
                // no connection (refused, closed, or none within the acquire timeout):
                // the node the pool was connecting to may be down, so its next attempt
                // goes to the next one
                if let Some(ring) = &self.ring {
                    ring.failed(at).await;
                }
                Err(my_err(e))
            }
        }
    }

    /// Claim the rows [`pick`] locked (`at`: its read's `NOW(3)`): one update, and the
    /// rows as it left them, without reading them back. The claim's locks keep every
    /// picked row pending until commit, so the update applies to all of them; if it ever
    /// did not, the rows are read back by this claim's token.
    pub(crate) async fn claim_picked(
        &self,
        tx: &mut MySqlConnection,
        owner: &Owner,
        mut rows: Vec<RawTask>,
        at: NaiveDateTime,
    ) -> std::result::Result<Vec<RawTask>, sqlx::Error> {
        let sql = &self.sql;
        let token = self.token();
        let ids: Vec<i64> = rows.iter().map(|r| r.id).collect();
        let text = sql.claim_ids(bucket(ids.len()));
        let mut q = sqlx::query(safe(&text))
            .bind(owner.as_str())
            .bind(token)
            .bind(at);
        for id in padded(&ids) {
            q = q.bind(id);
        }
        let done = q.execute(&mut *tx).await?;
        if done.rows_affected() == ids.len() as u64 {
            for r in &mut rows {
                r.status = i64::from(Status::Running.code());
                r.owner = Some(owner.as_str().to_owned());
                r.attempts += 1;
                r.lease += 1;
                r.updated_at = at.and_utc();
            }
            return Ok(rows);
        }
        // Exactly the rows this call claimed: tagged with its token (inside the claim's
        // transaction, so no other claim can have re-tagged them).
        let text = sql.rows_with_token(bucket(ids.len()));
        let mut q = sqlx::query(safe(&text)).bind(token);
        for id in padded(&ids) {
            q = q.bind(id);
        }
        let rows = q.fetch_all(&mut *tx).await?;
        rows.iter().map(raw_task).collect()
    }
}

#[async_trait]
impl Driver for MySqlDriver {
    fn config(&self) -> &StoreConfig {
        &self.options.config
    }

    async fn migrate(&self, target: u32) -> Result<()> {
        let mut conn = self.pool.acquire().await.map_err(my_err)?;
        if self.galera {
            // `GET_LOCK` holds on one node only, and a lock BF-aborted by replicated DDL
            // was seen in the hours before a node grew without bound: on Galera no lock;
            // every migration is safe to run twice (see `migrate_locked`)
            return self.migrate_locked(&mut conn, target).await;
        }
        // Serialize concurrent migrations across instances.
        let got: Option<i64> = sqlx::query_scalar("SELECT GET_LOCK(?, 60)")
            .bind(&self.sql.lock_name)
            .fetch_one(&mut *conn)
            .await
            .map_err(my_err)?;
        if got != Some(1) {
            return Err(Error::new(
                ErrorKind::Unavailable,
                "migrate",
                "another instance held the migration lock for 60 s",
            ));
        }
        let result = self.migrate_locked(&mut conn, target).await;
        let _ = sqlx::query("SELECT RELEASE_LOCK(?)")
            .bind(&self.sql.lock_name)
            .execute(&mut *conn)
            .await;
        result
    }

    fn tasks_table(&self) -> (&str, &ListDialect) {
        (&self.sql.tasks, &crate::sql::LIST)
    }

    async fn run(&self, statement: &Statement<'_>) -> Result<Answer> {
        let mut conn = self.pool.acquire().await.map_err(my_err)?;
        conn.run(statement).await
    }

    fn enqueue_sql(&self) -> &dyn EnqueueSql {
        self
    }

    async fn enqueue(&self, task: Checked<&NewTask>) -> Result<Inserted> {
        let mut conn = self.conn().await?;
        if task.order().is_none() {
            return EnqueuePlan::new(self, task).run(&mut *conn).await;
        }
        // a task with an order key in a transaction, so its key's lock is held throughout
        let mut tx = conn.begin(None).await.map_err(my_err)?;
        let inserted = EnqueuePlan::new(self, task).run(&mut *tx).await?;
        tx.commit().await.map_err(my_err)?;
        conn.settled();
        Ok(inserted)
    }

    async fn enqueue_many(&self, tasks: Checked<&[NewTask]>) -> Result<Vec<Inserted>> {
        let mut conn = self.conn().await?;
        let mut tx = conn.begin(None).await.map_err(my_err)?;
        let inserted = EnqueueBatch::new(self, tasks).run(&mut *tx).await?;
        tx.commit().await.map_err(my_err)?;
        conn.settled();
        Ok(inserted)
    }

    async fn claim_by_id(&self, id: TaskId, owner: &Owner) -> Result<Option<RawTask>> {
        let sql = &self.sql;
        let row = self
            .on_conn(|mut conn| async move {
                let done = sqlx::query(safe(&sql.claim_by_id))
                    .bind(owner.as_str())
                    .bind(id)
                    .execute(&mut *conn)
                    .await?;
                if done.rows_affected() == 0 {
                    return Ok(None);
                }
                // The row is ours: read it back on the same connection.
                sqlx::query(safe(&sql.get))
                    .bind(id)
                    .fetch_optional(&mut *conn)
                    .await
            })
            .await?;
        row.as_ref().map(raw_task).transpose().map_err(my_err)
    }

    async fn claim_batch(&self, claim: Checked<Claim<'_>>) -> Result<Vec<RawTask>> {
        let sql = &self.sql;
        let Claim {
            owner,
            event_types: types,
            limit,
        } = *claim;
        let first = match self.strategy {
            ClaimStrategy::SkipLocked => LockWait::Skip,
            ClaimStrategy::QueueThenSkip if self.queue_paused() => LockWait::Skip,
            ClaimStrategy::QueueThenSkip => LockWait::UpTo(QUEUE_WAIT_S),
            _ => LockWait::Queue,
        };
        let Some(begin) = sql.claim_begin(types) else {
            return Err(Error::invalid_input(
                "claim",
                "an event type has a character outside letters, digits, '_', '.', ':' and '-'",
            ));
        };
        let begin = begin.as_str();
        let (claimed, limited) = self
            .on_conn(|mut conn| async move {
                let mut tx = conn.begin(Some(begin)).await?;
                let picked = match pick(sql, &mut tx, first, types, limit).await {
                    // Held past the wait: a stalled claimer, or an open transaction's
                    // uncommitted insert. Start over, passing it, and pass for a while.
                    Err(e)
                        if matches!(first, LockWait::UpTo(_)) && error_number(&e) == Some(1205) =>
                    {
                        self.pause_queueing();
                        tx.rollback().await?;
                        conn.settled();
                        tx = conn.begin(Some(begin)).await?;
                        pick(sql, &mut tx, LockWait::Skip, types, limit).await?
                    }
                    picked => picked?,
                };
                let rows = match picked.at {
                    Some(at) if !picked.due.is_empty() => {
                        self.claim_picked(&mut tx, owner, picked.due, at).await?
                    }
                    _ => Vec::new(),
                };
                tx.commit().await?;
                conn.settled();
                Ok((rows, picked.limited))
            })
            .await?;
        claim_limited_types(claimed, Ok(limited), limit, |event_type, left| async move {
            self.claim_limited(owner, &event_type, left).await
        })
        .await
    }

    async fn recycle_dead(&self, batch: Checked<AgedBatch>) -> Result<Recycled> {
        let sql = &self.sql;
        let (age, limit) = (micros(batch.older_than), batch.limit as i64);
        let wait = if self.strategy == ClaimStrategy::OrderedUpdate {
            LockWait::Queue
        } else {
            LockWait::Skip
        };
        self.on_conn(|mut conn| async move {
            // Look before locking. The locking read below waits on any running row a
            // concurrent mark or claim is changing, and the recycler with it, though there
            // is almost never a dead task to find. The look takes no locks; a task that
            // dies right after it is found on the next sweep. What it sees and the locking
            // read (skipping locked rows) does not take was passed over.
            let seen: i64 = sqlx::query_scalar(safe(&sql.seen_dead))
                .bind(age)
                .bind(limit)
                .fetch_one(&mut *conn)
                .await?;
            if seen <= 0 {
                return Ok(Recycled::default());
            }
            let mut tx = conn.begin(None).await?;
            // The oldest dead rows, locked until commit, each with whether it has attempts
            // left; then one update per outcome, whose affected rows are the counts.
            let dead: Vec<(i64, bool)> = sqlx::query_as(safe(&sql.pick_dead(wait)))
                .bind(age)
                .bind(limit)
                .fetch_all(&mut *tx)
                .await?;
            let mut recycled = Recycled::default();
            for (to_pending, count) in [
                (true, &mut recycled.to_pending),
                (false, &mut recycled.to_failed),
            ] {
                let ids: Vec<i64> = dead
                    .iter()
                    .filter(|(_, left)| *left == to_pending)
                    .map(|(id, _)| *id)
                    .collect();
                for chunk in ids.chunks(SET_CHUNK) {
                    let text = sql.recycle(to_pending, bucket(chunk.len()));
                    let mut q = sqlx::query(safe(&text)).bind(age);
                    for id in padded(chunk) {
                        q = q.bind(id);
                    }
                    *count += q.execute(&mut *tx).await?.rows_affected();
                }
            }
            tx.commit().await?;
            conn.settled();
            recycled.passed_over = (seen as u64).saturating_sub(dead.len() as u64);
            Ok(recycled)
        })
        .await
    }

    async fn heartbeat(&self, leases: Checked<&[Lease]>) -> Result<Vec<bool>> {
        self.refresh_leases(&leases).await
    }

    async fn set_output(&self, lease: Lease, output: Checked<&str>) -> Result<bool> {
        let done = sqlx::query(safe(&self.sql.set_output))
            .bind(*output)
            .bind(lease.task_id)
            .bind(lease.token)
            .execute(&self.pool)
            .await
            .map_err(my_err)?;
        Ok(done.rows_affected() == 1)
    }

    async fn mark(&self, marks: Checked<&[Mark]>) -> Result<Vec<bool>> {
        self.mark_all(&marks).await
    }

    async fn mark_and_claim(
        &self,
        marks: Checked<&[Mark]>,
        claim: Checked<Claim<'_>>,
    ) -> Result<(Vec<bool>, Option<Vec<RawTask>>)> {
        let event_type = claim.only_type()?;
        let (owner, limit) = (claim.owner, claim.limit);
        let (marks, rounds) = (*marks, mark_rounds(&marks));
        let rounds = &rounds;
        self.on_conn(|mut conn| async move {
            let mut tx = conn.begin(Some(crate::claim::LIMITED_BEGIN)).await?;
            let read = self.gate(&mut tx, &self.sql.gate_read, event_type).await?;
            let (flags, rows) = match read {
                // never raising the running count: no turn on the row (a limit changed
                // since the read is the next claim's to meet)
                Some(gate) if gate.hands_over_unlocked() => {
                    let flags = self.apply_marks(&mut tx, marks, rounds).await?;
                    let applied = applied_ids(marks, &flags);
                    let rows = self
                        .hand_over(&mut tx, owner, event_type, gate, &applied, limit)
                        .await?;
                    (flags, Some(rows))
                }
                Some(_) => {
                    // the queue row first, as every claim of the type locks it
                    let gate = self.lock_gate(&mut tx, event_type).await?;
                    let flags = self.apply_marks(&mut tx, marks, rounds).await?;
                    let rows = match gate {
                        Some(gate) => Some(
                            self.claim_gated(&mut tx, owner, event_type, gate, limit)
                                .await?,
                        ),
                        None => None,
                    };
                    (flags, rows)
                }
                None => (self.apply_marks(&mut tx, marks, rounds).await?, None),
            };
            tx.commit().await?;
            conn.settled();
            Ok((flags, rows))
        })
        .await
    }

    async fn manual_reset(&self, id: TaskId, stuck_after: Checked<Duration>) -> Result<Change> {
        let sql = &self.sql;
        let stuck_after = micros(*stuck_after);
        // The reset row is read back inside the reset's transaction: our row lock keeps a
        // claimer (a poller sees the task due at once) out until commit, so the task
        // returned is the task as reset, never as already claimed again.
        let (row, status) = self
            .on_conn(|mut conn| async move {
                let mut tx = conn.begin(None).await?;
                let done = sqlx::query(safe(&sql.manual_reset))
                    .bind(id)
                    .bind(stuck_after)
                    .execute(&mut *tx)
                    .await?;
                let found = if done.rows_affected() == 1 {
                    let row = sqlx::query(safe(&sql.get))
                        .bind(id)
                        .fetch_optional(&mut *tx)
                        .await?;
                    (row, None)
                } else {
                    let status: Option<i8> = sqlx::query_scalar(safe(&sql.status_of))
                        .bind(id)
                        .fetch_optional(&mut *tx)
                        .await?;
                    (None, status)
                };
                tx.commit().await?;
                conn.settled();
                Ok(found)
            })
            .await?;
        changed(row, status)
    }

    async fn cancel(&self, id: TaskId, audit: Checked<&Audit>) -> Result<Change> {
        self.audited_update(id, "cancel", *audit, |sql| {
            sqlx::query(safe(&sql.cancel)).bind(id)
        })
        .await
    }

    async fn edit(
        &self,
        id: TaskId,
        edit: Checked<&TaskEdit>,
        audit: Checked<&Audit>,
    ) -> Result<Change> {
        let edit = *edit;
        let (delay, at) = edit.due_parts();
        let at = at.map(|t| t.naive_utc());
        self.audited_update(id, edit.action(), *audit, move |sql| {
            sqlx::query(safe(&sql.edit))
                .bind(delay)
                .bind(delay)
                .bind(at)
                .bind(at)
                .bind(edit.payload.as_deref())
                .bind(id)
        })
        .await
    }

    async fn reset(&self, id: TaskId, from: [i16; 2], audit: Checked<&Audit>) -> Result<Change> {
        self.audited_update(id, "reset", *audit, |sql| {
            sqlx::query(safe(&sql.retry))
                .bind(id)
                .bind(from[0])
                .bind(from[1])
        })
        .await
    }

    async fn delete(&self, id: TaskId, audit: Checked<&Audit>) -> Result<Change> {
        let sql = &self.sql;
        let audit = *audit;
        let (row, status) = self
            .on_conn(|mut conn| async move {
                let mut tx = conn.begin(None).await?;
                let Some(row) = sqlx::query(safe(&sql.get_for_update))
                    .bind(id)
                    .fetch_optional(&mut *tx)
                    .await?
                else {
                    return Ok((None, None));
                };
                let status: i8 = row.try_get("status")?;
                if status == Status::Running.code() as i8 {
                    return Ok((None, Some(status)));
                }
                sqlx::query(safe(&sql.delete))
                    .bind(id)
                    .execute(&mut *tx)
                    .await?;
                audit_entry(sql, &mut tx, id, "delete", audit).await?;
                tx.commit().await?;
                conn.settled();
                Ok((Some(row), None))
            })
            .await?;
        changed(row, status)
    }

    async fn audit_log(&self, id: TaskId) -> Result<Vec<RawAudit>> {
        sqlx::query(safe(&self.sql.audit_log))
            .bind(id)
            .fetch_all(&self.pool)
            .await
            .map_err(my_err)?
            .iter()
            .map(|r| RawAudit::read(&Cols(r)).map_err(my_err))
            .collect()
    }

    async fn get(&self, id: TaskId) -> Result<Option<RawTask>> {
        let row = sqlx::query(safe(&self.sql.get))
            .bind(id)
            .fetch_optional(&self.pool)
            .await
            .map_err(my_err)?;
        row.as_ref().map(raw_task).transpose().map_err(my_err)
    }

    async fn list(&self, filter: Checked<&TaskFilter>) -> Result<Vec<RawTask>> {
        let (sql, args) = list_sql(&self.sql.list_select, &crate::sql::LIST, &filter);
        let mut query = sqlx::query(sqlx::AssertSqlSafe(sql));
        for a in args {
            query = match a {
                ListArg::Status(s) => query.bind(s),
                ListArg::Text(t) => query.bind(t),
                ListArg::Age(d) => query.bind(micros(d)),
                ListArg::Int(i) => query.bind(i),
            };
        }
        let rows = query.fetch_all(&self.pool).await.map_err(my_err)?;
        rows.iter()
            .map(raw_task)
            .collect::<std::result::Result<_, _>>()
            .map_err(my_err)
    }

    async fn stats(&self, backlog_only: bool) -> Result<RawStats> {
        let counts_sql = if backlog_only {
            &self.sql.backlog_counts
        } else {
            &self.sql.stats_counts
        };
        let counts = sqlx::query_as::<_, (String, i8, i64)>(safe(counts_sql))
            .fetch_all(&self.pool)
            .await
            .map_err(my_err)?
            .into_iter()
            .map(|(event_type, status, count)| (event_type, status.into(), count))
            .collect();
        let oldest_due_pending_ms = sqlx::query_scalar(safe(&self.sql.stats_oldest_due))
            .fetch_one(&self.pool)
            .await
            .map_err(my_err)?;
        Ok(RawStats {
            counts,
            oldest_due_pending_ms,
        })
    }

    async fn saga_backlog(&self) -> Result<Vec<(String, i64, i64, i64)>> {
        Ok(
            sqlx::query_as::<_, (String, i16, i64, i64)>(safe(&self.sql.saga_backlog))
                .fetch_all(&self.pool)
                .await
                .map_err(my_err)?
                .into_iter()
                .map(|(name, status, count, ms)| (name, status.into(), count, ms))
                .collect(),
        )
    }

    async fn throughput(&self, b: Checked<Buckets>) -> Result<Vec<(String, i64, i64, i64)>> {
        Ok(
            sqlx::query_as::<_, (String, i8, i64, i64)>(safe(&self.sql.throughput))
                .bind(millis(b.bucket))
                .bind(micros(b.window))
                .bind(b.cap as i64)
                .bind(micros(b.window))
                .bind(b.cap as i64)
                .fetch_all(&self.pool)
                .await
                .map_err(my_err)?
                .into_iter()
                .map(|(event_type, status, bucket, count)| {
                    (event_type, status.into(), bucket, count)
                })
                .collect(),
        )
    }

    async fn purge_finished(&self, status: Checked<i16>, batch: Checked<AgedBatch>) -> Result<u64> {
        self.purge_where(&self.sql.purge_finished, Some(*status), batch)
            .await
    }

    async fn purge_audit(&self, batch: Checked<AgedBatch>) -> Result<u64> {
        let mut total = 0;
        for sql in &self.sql.purge_audit {
            total += self.purge(sql, batch).await?;
        }
        Ok(total)
    }

    async fn purge_event_types(&self, batch: Checked<AgedBatch>) -> Result<u64> {
        self.purge(&self.sql.purge_event_types, batch).await
    }

    async fn purge_barrier(&self, batch: Checked<AgedBatch>) -> Result<u64> {
        self.purge(&self.sql.purge_barrier, batch).await
    }

    async fn barrier_records(&self, gid: Checked<&str>) -> Result<Vec<RawBarrier>> {
        sqlx::query(safe(&self.sql.barrier_records))
            .bind(*gid)
            .fetch_all(&self.pool)
            .await
            .map_err(my_err)?
            .iter()
            .map(|r| RawBarrier::read(&Cols(r)).map_err(my_err))
            .collect()
    }

    async fn start_saga(&self, start: Checked<&SagaStart>) -> Result<SagaStarted> {
        let mut conn = self.conn().await?;
        let mut tx = conn.begin(None).await.map_err(my_err)?;
        let started = SagaStartPlan::new(self, start).run(&mut *tx).await?;
        tx.commit().await.map_err(my_err)?;
        conn.settled();
        Ok(started)
    }

    async fn saga(&self, name: Checked<&str>, key: Checked<&str>) -> Result<Option<RawSaga>> {
        sqlx::query(safe(&self.sql.saga_get))
            .bind(*name)
            .bind(*key)
            .fetch_optional(&self.pool)
            .await
            .map_err(my_err)?
            .map(|r| RawSaga::read(&Cols(&r)).map_err(my_err))
            .transpose()
    }

    async fn saga_write(&self, write: Checked<&SagaWrite>) -> Result<SagaWritten> {
        let mut conn = self.conn().await?;
        let mut tx = conn.begin(None).await.map_err(my_err)?;
        let written = saga_write_on(self, self.config(), &mut *tx, write).await?;
        tx.commit().await.map_err(my_err)?;
        conn.settled();
        Ok(written)
    }

    async fn saga_by_id(&self, id: SagaId) -> Result<Option<RawSaga>> {
        sqlx::query(safe(&self.sql.saga_by_id))
            .bind(id)
            .fetch_optional(&self.pool)
            .await
            .map_err(my_err)?
            .map(|r| RawSaga::read(&Cols(&r)).map_err(my_err))
            .transpose()
    }

    async fn sagas(&self, filter: Checked<&SagaFilter>) -> Result<Vec<RawSaga>> {
        let status = filter.status.map(|s| s.code());
        let older = filter.older_than.map(micros);
        let started = filter.started_older_than.map(micros);
        sqlx::query(safe(&self.sql.sagas))
            .bind(filter.after_id)
            .bind(filter.name.as_deref())
            .bind(filter.name.as_deref())
            .bind(status)
            .bind(status)
            .bind(older)
            .bind(older)
            .bind(started)
            .bind(started)
            .bind(filter.limit as i64)
            .fetch_all(&self.pool)
            .await
            .map_err(my_err)?
            .iter()
            .map(|r| RawSaga::read(&Cols(r)).map_err(my_err))
            .collect()
    }

    async fn saga_log(&self, id: SagaId) -> Result<Vec<RawAudit>> {
        sqlx::query(safe(&self.sql.saga_log))
            .bind(id)
            .fetch_all(&self.pool)
            .await
            .map_err(my_err)?
            .iter()
            .map(|r| RawAudit::read(&Cols(r)).map_err(my_err))
            .collect()
    }

    async fn saga_steps(&self, id: SagaId) -> Result<Vec<RawSagaStep>> {
        sqlx::query(safe(&self.sql.saga_steps))
            .bind(id)
            .fetch_all(&self.pool)
            .await
            .map_err(my_err)?
            .iter()
            .map(|r| RawSagaStep::read(&Cols(r)).map_err(my_err))
            .collect()
    }

    async fn delete_finished(&self, status: Checked<i16>, ids: Checked<&[TaskId]>) -> Result<u64> {
        let text = self.sql.delete_finished(bucket(ids.len()));
        let mut q = sqlx::query(safe(&text)).bind(*status);
        for id in padded(*ids) {
            q = q.bind(id);
        }
        q.execute(&self.pool)
            .await
            .map(|d| d.rows_affected())
            .map_err(my_err)
    }

    async fn release_order_keys(&self, keys: Checked<&[String]>) -> Result<Vec<TaskId>> {
        let pool = self.pool.clone();
        let mut conn = MySqlOwnConnection { pool, conn: None };
        release_order_keys(self, &mut conn, &keys).await
    }

    async fn register_event_types(&self, event_types: Checked<&[String]>) -> Result<()> {
        let mut conn = self.pool.acquire().await.map_err(my_err)?;
        for t in event_types.iter() {
            sqlx::query(safe(&self.sql.types_register))
                .bind(t)
                .execute(&mut *conn)
                .await
                .map_err(my_err)?;
        }
        Ok(())
    }

    fn announce_when_visible(&self, event_type: &str, written: Written) {
        let Some(a) = &self.options.config.announcer else {
            return;
        };
        let (query, id) = match written {
            Written::Task(id) | Written::Alone(id) => (self.sql.status_of.clone(), id),
            Written::Saga(id) => (self.sql.saga_by_id.clone(), id),
            _ => return,
        };
        let pool = self.pool.clone();
        a.when_visible(event_type, written, move || {
            let (pool, query) = (pool.clone(), query.clone());
            async move {
                sqlx::query(safe(&query))
                    .bind(id)
                    .fetch_optional(&pool)
                    .await
                    .map(|row| row.is_some())
                    .map_err(my_err)
            }
        });
    }

    async fn event_types(&self) -> Result<Vec<(String, DateTime<Utc>, DateTime<Utc>)>> {
        let mut conn = self.pool.acquire().await.map_err(my_err)?;
        let rows: Vec<(String, NaiveDateTime, NaiveDateTime)> =
            sqlx::query_as(safe(&self.sql.types_list))
                .fetch_all(&mut *conn)
                .await
                .map_err(my_err)?;
        Ok(rows
            .into_iter()
            .map(|(t, f, l)| (t, f.and_utc(), l.and_utc()))
            .collect())
    }

    async fn set_queue(
        &self,
        event_type: Checked<&str>,
        change: QueueChange,
        audit: Checked<&Audit>,
    ) -> Result<Queue> {
        self.queue_change(*event_type, change, *audit).await
    }

    async fn queues(&self) -> Result<Vec<Queue>> {
        self.queue_rows().await
    }

    async fn queue_log(&self, event_type: Checked<&str>) -> Result<Vec<QueueLogEntry>> {
        self.queue_entries(*event_type).await
    }

    async fn order_keys(&self, after: Option<&str>, limit: Checked<usize>) -> Result<Vec<String>> {
        let mut conn = self.pool.acquire().await.map_err(my_err)?;
        sqlx::query_scalar(safe(&self.sql.keys_page))
            .bind(after.unwrap_or(""))
            .bind(i64::try_from(*limit).unwrap_or(i64::MAX))
            .fetch_all(&mut *conn)
            .await
            .map_err(my_err)
    }
}
