//! The SQLite driver: the statement shapes of the store contract, its writes on the
//! file's writer thread.

use std::sync::Arc;
use std::time::Duration;

use backstop_core::driver::prelude::*;
#[cfg(doc)]
use backstop_core::TaskStore;
use chrono::{DateTime, Utc};
use rusqlite::{params, Connection, OptionalExtension};

use crate::claim::{claim_in, gate, mark_in};
use crate::conn::{audited, changed, db_err, OnConn, OwnedStatement};
use crate::pool::{Pool, Settings};
use crate::rows::{raw_task, tasks, Cols};
use crate::sql::now_ms;
use crate::sql::Sql;
use crate::writer::Writer;

/// The SQLite driver under a [`SqliteStore`](crate::SqliteStore): its pool of readers,
/// the file's writer thread and its SQL.
pub(crate) struct SqliteDriver {
    pub(crate) pool: Arc<Pool>,
    pub(crate) sql: Arc<Sql>,
    pub(crate) config: StoreConfig,
    pub(crate) settings: Settings,
    /// Runs every write of this store (see [`SqliteOptions::queue_writers`]); `None`:
    /// writes run on the pool and meet on SQLite's lock.
    pub(crate) writer: Option<Arc<Writer>>,
}

impl SqliteDriver {
    /// Run the store's write `f` in a `BEGIN IMMEDIATE` transaction: on the file's writer
    /// thread, where it may share its transaction with the writes queued next to it (group
    /// commit, see the `writer` module), or on a pooled connection when writes are not
    /// queued. `f` reads the clock (`now`) after the write lock is held, so it is never
    /// stale; its result comes back once its changes are committed.
    /// Run a purge statement of `sql` (`?1` the cutoff in ms, `?2` the limit) on the
    /// batch; how many rows it deleted.
    pub(crate) async fn purge(
        &self,
        op: &'static str,
        statement: fn(&Sql) -> &String,
        batch: Checked<AgedBatch>,
    ) -> Result<u64> {
        let (older_than, limit) = (batch.older_than, batch.limit as i64);
        self.write(op, move |sql, tx, now| {
            let cutoff = now.saturating_sub(millis(older_than));
            let n = tx
                .prepare_cached(statement(sql))?
                .execute(params![cutoff, limit])?;
            Ok(n as u64)
        })
        .await
    }

    pub(crate) async fn write<T, F>(&self, op: &'static str, f: F) -> Result<T>
    where
        T: Send + 'static,
        F: FnOnce(&Sql, &Connection, i64) -> rusqlite::Result<T> + Send + 'static,
    {
        self.write_plan(op, move |sql, conn| {
            f(sql, conn, now_ms()).map_err(|e| db_err(op, e))
        })
        .await
    }

    /// [`write`](Self::write) for a protocol of core's that answers with a backstop
    /// error (a plan run on [`OnConn`]): when `f` fails, its writes are rolled back,
    /// never committed half done.
    pub(crate) async fn write_plan<T, F>(&self, op: &'static str, f: F) -> Result<T>
    where
        T: Send + 'static,
        F: FnOnce(&Sql, &Connection) -> Result<T> + Send + 'static,
    {
        let sql = Arc::clone(&self.sql);
        match &self.writer {
            Some(w) => w.write(op, self.settings, move |conn| f(&sql, conn)).await,
            None => {
                self.pool
                    .run(op, move |conn| {
                        let tx = conn
                            .transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)
                            .map_err(|e| db_err(op, e))?;
                        // dropped on an error: rolled back
                        let out = f(&sql, &tx)?;
                        tx.commit().map_err(|e| db_err(op, e))?;
                        Ok(out)
                    })
                    .await
            }
        }
    }

    /// Run `f` where this store's writes run: on the file's writer thread (after the
    /// writes queued before it), or on the pool when writers are not queued.
    pub(crate) async fn on_writer<T, F>(&self, op: &'static str, f: F) -> Result<T>
    where
        T: Send + 'static,
        F: FnOnce(&mut Connection) -> Result<T> + Send + 'static,
    {
        match &self.writer {
            Some(w) => w.run(op, self.settings, f).await,
            None => self.pool.run(op, f).await,
        }
    }

    /// Run the read `f` on a pooled connection.
    pub(crate) async fn read<T, F>(&self, op: &'static str, f: F) -> Result<T>
    where
        T: Send + 'static,
        F: FnOnce(&Sql, &Connection, i64) -> rusqlite::Result<T> + Send + 'static,
    {
        let sql = Arc::clone(&self.sql);
        self.pool
            .run(op, move |conn| {
                f(&sql, conn, now_ms()).map_err(|e| db_err(op, e))
            })
            .await
    }
}

#[async_trait]
impl Driver for SqliteDriver {
    fn config(&self) -> &StoreConfig {
        &self.config
    }

    async fn migrate(&self, target: u32) -> Result<()> {
        let table = self.config.table.clone();
        // One transaction under the write lock: SQLite's DDL is transactional, so the
        // schema moves from one version to the target or not at all.
        self.write("migrate", move |sql, tx, now| {
            tx.execute_batch(&sql.schema.setup)?;
            let applied = tx
                .prepare(&sql.schema.read)?
                .query_map([], |r| r.get::<_, i64>(0))?
                .collect::<rusqlite::Result<Vec<i64>>>()?;
            let migrations = match sql.schema.migrations() {
                Ok(migrations) => migrations,
                Err(e) => return Ok(Err(e)),
            };
            let todo = match schema::pending(&table, &applied, &migrations, target) {
                Ok(todo) => todo,
                Err(e) => return Ok(Err(e)),
            };
            for m in todo {
                for statement in &m.statements {
                    tx.execute_batch(statement)?;
                }
                tx.execute(
                    &sql.schema.record,
                    rusqlite::params![m.version, m.name, now],
                )?;
                schema::log_applied(&table, m);
            }
            Ok(Ok(()))
        })
        .await?
    }

    fn tasks_table(&self) -> (&str, &ListDialect) {
        (&self.sql.tasks, &crate::sql::LIST)
    }

    async fn run(&self, statement: &Statement<'_>) -> Result<Answer> {
        let statement = OwnedStatement::of(statement)?;
        self.read("run", move |_, conn, _| statement.run(conn))
            .await
    }

    fn enqueue_sql(&self) -> &dyn EnqueueSql {
        &*self.sql
    }

    async fn enqueue(&self, task: Checked<&NewTask>) -> Result<Inserted> {
        let task = task.cloned();
        self.write_plan("enqueue", move |sql, tx| {
            EnqueuePlan::new(sql, task.as_ref()).run_blocking(&mut OnConn(tx))
        })
        .await
    }

    async fn enqueue_many(&self, tasks: Checked<&[NewTask]>) -> Result<Vec<Inserted>> {
        let tasks = tasks.cloned_vec();
        self.write_plan("enqueue_many", move |sql, tx| {
            EnqueueBatch::new(sql, tasks.as_slice()).run_blocking(&mut OnConn(tx))
        })
        .await
    }

    async fn claim_by_id(&self, id: TaskId, owner: &Owner) -> Result<Option<RawTask>> {
        let owner = owner.as_str().to_owned();
        self.write("claim_by_id", move |sql, tx, now| {
            tx.prepare_cached(&sql.claim_by_id)?
                .query_row(params![owner, now, id], raw_task)
                .optional()
        })
        .await
    }

    async fn claim_batch(&self, claim: Checked<Claim<'_>>) -> Result<Vec<RawTask>> {
        let owner = claim.owner.as_str().to_owned();
        let types = claim.event_types.to_vec();
        let limit = claim.limit as i64;
        self.write("claim_batch", move |sql, tx, now| {
            claim_in(sql, tx, now, &owner, &types, limit)
        })
        .await
    }

    async fn recycle_dead(&self, batch: Checked<AgedBatch>) -> Result<Recycled> {
        let (older_than, limit) = (batch.older_than, batch.limit as i64);
        self.write("recycle_dead", move |sql, tx, now| {
            let cutoff = now.saturating_sub(millis(older_than));
            let mut stmt = tx.prepare_cached(&sql.recycle_dead)?;
            let statuses = stmt
                .query_map(params![now, cutoff, limit], |r| r.get::<_, i64>(0))?
                .collect::<rusqlite::Result<Vec<_>>>()?;
            let to_pending = statuses
                .iter()
                .filter(|s| **s == i64::from(Status::Pending.code()))
                .count() as u64;
            Ok(Recycled {
                to_pending,
                to_failed: statuses.len() as u64 - to_pending,
                // one writer at a time: no row is ever held by another transaction
                passed_over: 0,
            })
        })
        .await
    }

    async fn heartbeat(&self, leases: Checked<&[Lease]>) -> Result<Vec<bool>> {
        let leases = leases.to_vec();
        self.write("heartbeat", move |sql, tx, now| {
            let mut stmt = tx.prepare_cached(&sql.heartbeat)?;
            leases
                .iter()
                .map(|l| Ok(stmt.execute(params![now, l.task_id, l.token])? == 1))
                .collect()
        })
        .await
    }

    async fn set_output(&self, lease: Lease, output: Checked<&str>) -> Result<bool> {
        let output = (*output).to_owned();
        self.write("set_output", move |sql, tx, _| {
            let n = tx.prepare_cached(&sql.set_output)?.execute(params![
                output,
                lease.task_id,
                lease.token
            ])?;
            Ok(n == 1)
        })
        .await
    }

    async fn mark(&self, marks: Checked<&[Mark]>) -> Result<Vec<bool>> {
        let marks = marks.to_vec();
        self.write("mark", move |sql, tx, now| mark_in(sql, tx, now, &marks))
            .await
    }

    async fn mark_and_claim(
        &self,
        marks: Checked<&[Mark]>,
        claim: Checked<Claim<'_>>,
    ) -> Result<(Vec<bool>, Option<Vec<RawTask>>)> {
        // one writer at a time holds the file: the marks and the claim, limited or not,
        // are one write transaction
        let marks = marks.to_vec();
        let owner = claim.owner.as_str().to_owned();
        let types = claim.event_types.to_vec();
        let limit = claim.limit as i64;
        self.write("mark_and_claim", move |sql, tx, now| {
            let flags = mark_in(sql, tx, now, &marks)?;
            // a type whose only limit is its concurrency: at most what the marks freed,
            // as on every backend (core's `Gate::handover_room`; the claim adds the room)
            let limit = match gate(sql, tx, &types[0])? {
                Some(gate) if gate.hands_over_unlocked() => {
                    let applied: Vec<String> = applied_ids(&marks, &flags)
                        .iter()
                        .map(|id| id.to_string())
                        .collect();
                    let ids = format!("[{}]", applied.join(","));
                    let freed: i64 = tx
                        .prepare_cached(&sql.of_type)?
                        .query_row(params![types[0], ids], |r| r.get(0))?;
                    limit.min(freed)
                }
                _ => limit,
            };
            let claimed = match limit {
                0 => Vec::new(),
                _ => claim_in(sql, tx, now, &owner, &types, limit)?,
            };
            Ok((flags, Some(claimed)))
        })
        .await
    }

    async fn manual_reset(&self, id: TaskId, stuck_after: Checked<Duration>) -> Result<Change> {
        let stuck_after = *stuck_after;
        self.write("manual_reset", move |sql, tx, now| {
            let cutoff = now.saturating_sub(millis(stuck_after));
            let reset = tx
                .prepare_cached(&sql.manual_reset)?
                .query_row(params![now, id, cutoff], raw_task)
                .optional()?;
            changed(sql, tx, id, reset)
        })
        .await
    }

    async fn cancel(&self, id: TaskId, audit: Checked<&Audit>) -> Result<Change> {
        let audit = audit.cloned();
        self.write("cancel", move |sql, tx, now| {
            let row = tx
                .prepare_cached(&sql.cancel)?
                .query_row(params![now, id], raw_task)
                .optional()?;
            audited(sql, tx, id, "cancel", &audit.as_ref(), now, row)
        })
        .await
    }

    async fn edit(
        &self,
        id: TaskId,
        edit: Checked<&TaskEdit>,
        audit: Checked<&Audit>,
    ) -> Result<Change> {
        let edit: TaskEdit = (*edit).clone();
        let audit: Audit = (*audit).clone();
        let (delay, at) = edit.due_parts();
        let at = at.map(|t| t.timestamp_millis());
        self.write("edit", move |sql, tx, now| {
            let row = tx
                .prepare_cached(&sql.edit)?
                .query_row(params![now, delay, at, edit.payload, id], raw_task)
                .optional()?;
            audited(sql, tx, id, edit.action(), &audit, now, row)
        })
        .await
    }

    async fn reset(&self, id: TaskId, from: [i16; 2], audit: Checked<&Audit>) -> Result<Change> {
        let audit = audit.cloned();
        self.write("reset", move |sql, tx, now| {
            let row = tx
                .prepare_cached(&sql.retry)?
                .query_row(params![now, id, from[0], from[1]], raw_task)
                .optional()?;
            audited(sql, tx, id, "reset", &audit.as_ref(), now, row)
        })
        .await
    }

    async fn delete(&self, id: TaskId, audit: Checked<&Audit>) -> Result<Change> {
        let audit = audit.cloned();
        self.write("delete", move |sql, tx, now| {
            let row = tx
                .prepare_cached(&sql.delete)?
                .query_row(params![id], raw_task)
                .optional()?;
            audited(sql, tx, id, "delete", &audit.as_ref(), now, row)
        })
        .await
    }

    async fn audit_log(&self, id: TaskId) -> Result<Vec<RawAudit>> {
        self.read("audit_log", move |sql, conn, _| {
            conn.prepare_cached(&sql.audit_log)?
                .query_map(params![id], |r| RawAudit::read(&Cols(r)))?
                .collect()
        })
        .await
    }

    async fn get(&self, id: TaskId) -> Result<Option<RawTask>> {
        self.read("get", move |sql, conn, _| {
            conn.prepare_cached(&sql.get)?
                .query_row(params![id], raw_task)
                .optional()
        })
        .await
    }

    async fn list(&self, filter: Checked<&TaskFilter>) -> Result<Vec<RawTask>> {
        let filter = filter.into_inner().clone();
        self.read("list", move |sql, conn, now| {
            let (text, args) = list_sql(&sql.list_select, &crate::sql::LIST, &filter);
            let values: Vec<rusqlite::types::Value> = args
                .into_iter()
                .map(|a| match a {
                    ListArg::Status(s) => i64::from(s).into(),
                    ListArg::Text(t) => t.to_owned().into(),
                    ListArg::Age(d) => now.saturating_sub(millis(d)).into(),
                    ListArg::Int(i) => i.into(),
                })
                .collect();
            // not cached: up to 64 shapes would push the hot statements out of the cache
            tasks(
                &mut conn.prepare(&text)?,
                rusqlite::params_from_iter(values),
            )
        })
        .await
    }

    async fn stats(&self, backlog_only: bool) -> Result<RawStats> {
        self.read("stats", move |sql, conn, now| {
            let counts_sql = if backlog_only {
                &sql.backlog_counts
            } else {
                &sql.stats_counts
            };
            let counts = conn
                .prepare_cached(counts_sql)?
                .query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))?
                .collect::<rusqlite::Result<Vec<_>>>()?;
            let oldest_due_pending_ms = conn
                .prepare_cached(&sql.stats_oldest_due)?
                .query_row(params![now], |r| r.get(0))?;
            Ok(RawStats {
                counts,
                oldest_due_pending_ms,
            })
        })
        .await
    }

    async fn saga_backlog(&self) -> Result<Vec<(String, i64, i64, i64)>> {
        self.read("saga_backlog", move |sql, conn, now| {
            conn.prepare_cached(&sql.saga_backlog)?
                .query_map(params![now], |r| {
                    Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?))
                })?
                .collect::<rusqlite::Result<Vec<_>>>()
        })
        .await
    }

    async fn throughput(&self, b: Checked<Buckets>) -> Result<Vec<(String, i64, i64, i64)>> {
        let (window, bucket) = (millis(b.window), millis(b.bucket));
        let cap = i64::try_from(b.cap).unwrap_or(i64::MAX);
        self.read("throughput", move |sql, conn, now| {
            conn.prepare_cached(&sql.throughput)?
                .query_map(params![now, window, bucket, cap], |r| {
                    Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?))
                })?
                .collect::<rusqlite::Result<Vec<_>>>()
        })
        .await
    }

    async fn purge_finished(&self, status: Checked<i16>, batch: Checked<AgedBatch>) -> Result<u64> {
        let (older_than, limit, status) = (batch.older_than, batch.limit as i64, *status);
        self.write("purge_finished", move |sql, tx, now| {
            let cutoff = now.saturating_sub(millis(older_than));
            let n = tx
                .prepare_cached(&sql.purge_finished)?
                .execute(params![cutoff, limit, status])?;
            Ok(n as u64)
        })
        .await
    }

    async fn purge_audit(&self, batch: Checked<AgedBatch>) -> Result<u64> {
        let tasks = self.purge("purge_audit", |sql| &sql.purge_audit[0], batch);
        let queues = self.purge("purge_audit", |sql| &sql.purge_audit[1], batch);
        Ok(tasks.await? + queues.await?)
    }

    async fn purge_event_types(&self, batch: Checked<AgedBatch>) -> Result<u64> {
        self.purge("purge_event_types", |sql| &sql.purge_event_types, batch)
            .await
    }

    async fn purge_barrier(&self, batch: Checked<AgedBatch>) -> Result<u64> {
        self.purge("purge_barrier", |sql| &sql.purge_barrier, batch)
            .await
    }

    async fn barrier_records(&self, gid: Checked<&str>) -> Result<Vec<RawBarrier>> {
        let gid = (*gid).to_owned();
        self.read("barrier_records", move |sql, conn, _| {
            conn.prepare_cached(&sql.barrier_records)?
                .query_map(params![gid], |r| RawBarrier::read(&Cols(r)))?
                .collect()
        })
        .await
    }

    async fn start_saga(&self, start: Checked<&SagaStart>) -> Result<SagaStarted> {
        let start = start.cloned();
        self.write_plan("start_saga", move |sql, tx| {
            SagaStartPlan::new(sql, start.as_ref()).run_blocking(&mut OnConn(tx))
        })
        .await
    }

    async fn saga(&self, name: Checked<&str>, key: Checked<&str>) -> Result<Option<RawSaga>> {
        let (name, key) = ((*name).to_owned(), (*key).to_owned());
        self.read("saga", move |sql, conn, _| {
            conn.prepare_cached(&sql.saga_get)?
                .query_map(params![name, key], |r| RawSaga::read(&Cols(r)))?
                .next()
                .transpose()
        })
        .await
    }

    async fn saga_write(&self, write: Checked<&SagaWrite>) -> Result<SagaWritten> {
        let write = write.cloned();
        let config = self.config().clone();
        self.write_plan("saga_write", move |sql, tx| {
            saga_write_blocking(sql, &config, &mut OnConn(tx), write.as_ref())
        })
        .await
    }

    async fn saga_by_id(&self, id: SagaId) -> Result<Option<RawSaga>> {
        self.read("saga_by_id", move |sql, conn, _| {
            conn.prepare_cached(&sql.saga_by_id)?
                .query_map(params![id], |r| RawSaga::read(&Cols(r)))?
                .next()
                .transpose()
        })
        .await
    }

    async fn sagas(&self, filter: Checked<&SagaFilter>) -> Result<Vec<RawSaga>> {
        let filter = filter.cloned();
        self.read("sagas", move |sql, conn, now| {
            let status = filter.status.map(|s| s.code());
            let older = filter.older_than.map(millis);
            let started = filter.started_older_than.map(millis);
            conn.prepare_cached(&sql.sagas)?
                .query_map(
                    params![
                        filter.after_id,
                        filter.name,
                        status,
                        older,
                        filter.limit as i64,
                        now,
                        started
                    ],
                    |r| RawSaga::read(&Cols(r)),
                )?
                .collect()
        })
        .await
    }

    async fn saga_log(&self, id: SagaId) -> Result<Vec<RawAudit>> {
        self.read("saga_log", move |sql, conn, _| {
            conn.prepare_cached(&sql.saga_log)?
                .query_map(params![id], |r| RawAudit::read(&Cols(r)))?
                .collect()
        })
        .await
    }

    async fn saga_steps(&self, id: SagaId) -> Result<Vec<RawSagaStep>> {
        self.read("saga_steps", move |sql, conn, _| {
            conn.prepare_cached(&sql.saga_steps)?
                .query_map(params![id], |r| RawSagaStep::read(&Cols(r)))?
                .collect()
        })
        .await
    }

    async fn delete_finished(&self, status: Checked<i16>, ids: Checked<&[TaskId]>) -> Result<u64> {
        let (ids, status) = (ids.to_vec(), *status);
        self.write("delete_finished", move |sql, tx, _| {
            let mut stmt = tx.prepare_cached(&sql.delete_finished)?;
            let mut n = 0u64;
            for id in &ids {
                n += stmt.execute(params![id, status])? as u64;
            }
            Ok(n)
        })
        .await
    }

    async fn release_order_keys(&self, keys: Checked<&[String]>) -> Result<Vec<TaskId>> {
        // every key in one write transaction, which is the keys' lock (one writer)
        let keys = keys.to_vec();
        self.write_plan("release_order_keys", move |sql, tx| {
            release_order_keys_blocking(sql, &mut OnConn(tx), &keys)
        })
        .await
    }

    async fn register_event_types(&self, event_types: Checked<&[String]>) -> Result<()> {
        let types = event_types.to_vec();
        self.write("register_event_types", move |sql, tx, now| {
            let mut stmt = tx.prepare_cached(&sql.types_register)?;
            for t in &types {
                stmt.execute(params![t, now])?;
            }
            Ok(())
        })
        .await
    }

    async fn set_queue(
        &self,
        event_type: Checked<&str>,
        change: QueueChange,
        audit: Checked<&Audit>,
    ) -> Result<Queue> {
        let event_type = (*event_type).to_owned();
        let audit: Audit = (*audit).clone();
        let c = change.columns();
        let columns = (c.paused, c.concurrency, c.rate_limit, c.rate_window_ms);
        let partitioned = c.partitioned;
        self.write("set_queue", move |sql, tx, now| {
            let (paused, concurrency, rate, window) = columns;
            let inserted = tx.prepare_cached(&sql.queue_insert)?.execute(params![
                event_type,
                paused,
                concurrency,
                rate,
                window,
                now,
                partitioned
            ])? > 0;
            let changed = if inserted {
                !change.sets_nothing_new()
            } else {
                tx.prepare_cached(&sql.queue_update)?.execute(params![
                    event_type,
                    paused,
                    concurrency,
                    rate,
                    window,
                    now,
                    partitioned
                ])? > 0
            };
            if changed {
                tx.prepare_cached(&sql.queue_audit)?.execute(params![
                    event_type,
                    change.action(),
                    audit.operator,
                    audit.reason,
                    now
                ])?;
            }
            tx.prepare_cached(&sql.queue_get)?
                .query_row(params![event_type], |r| read_queue(&Cols(r)))
        })
        .await
    }

    async fn queues(&self) -> Result<Vec<Queue>> {
        self.read("queues", |sql, conn, _| {
            conn.prepare_cached(&sql.queues)?
                .query_map([], |r| read_queue(&Cols(r)))?
                .collect()
        })
        .await
    }

    async fn queue_log(&self, event_type: Checked<&str>) -> Result<Vec<QueueLogEntry>> {
        let event_type = (*event_type).to_owned();
        self.read("queue_log", move |sql, conn, _| {
            conn.prepare_cached(&sql.queue_log)?
                .query_map(params![event_type], |r| read_queue_entry(&Cols(r)))?
                .collect()
        })
        .await
    }

    fn announce_when_visible(&self, event_type: &str, written: Written) {
        let Some(a) = &self.config.announcer else {
            return;
        };
        let (pool, sql) = (Arc::clone(&self.pool), Arc::clone(&self.sql));
        a.when_visible(event_type, written, move || {
            let (pool, sql) = (Arc::clone(&pool), Arc::clone(&sql));
            async move {
                pool.run("announce", move |conn| {
                    let (query, id) = match written {
                        Written::Task(id) | Written::Alone(id) => (&sql.status_of, id),
                        Written::Saga(id) => (&sql.saga_by_id, id),
                        _ => return Ok(false),
                    };
                    conn.prepare_cached(query)
                        .and_then(|mut s| s.exists(params![id]))
                        .map_err(|e| db_err("announce", e))
                })
                .await
            }
        });
    }

    async fn event_types(&self) -> Result<Vec<(String, DateTime<Utc>, DateTime<Utc>)>> {
        let rows: Vec<(String, i64, i64)> = self
            .read("event_types", |sql, conn, _| {
                conn.prepare_cached(&sql.types_list)?
                    .query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))?
                    .collect()
            })
            .await?;
        rows.into_iter()
            .map(|(t, f, l)| {
                let time = |ms: i64| {
                    DateTime::from_timestamp_millis(ms).ok_or_else(|| {
                        Error::new(
                            ErrorKind::Unexpected,
                            "event_types",
                            format!("bad time {ms}"),
                        )
                    })
                };
                Ok((t, time(f)?, time(l)?))
            })
            .collect()
    }

    async fn order_keys(&self, after: Option<&str>, limit: Checked<usize>) -> Result<Vec<String>> {
        let after = after.unwrap_or("").to_owned();
        let limit = i64::try_from(*limit).unwrap_or(i64::MAX);
        self.read("order_keys", move |sql, conn, _| {
            conn.prepare_cached(&sql.keys_page)?
                .query_map(params![after, limit], |r| r.get(0))?
                .collect()
        })
        .await
    }
}
