//! The PostgreSQL driver: the statement shapes of the store contract, on pooled
//! connections.

use std::collections::HashSet;
use std::sync::Arc;
use std::time::Duration;

use backstop_core::driver::prelude::*;
use backstop_core::driver::{Admit, Throttle, REVOKED_WAIT};
#[cfg(doc)]
use backstop_core::TaskStore;
use backstop_core::Wake;
use chrono::{DateTime, Utc};
use deadpool_postgres::{Object, Pool};
use tokio_postgres::{GenericClient, Row};

use crate::conn::{OnClient, Param, PgConnection, Stmt};
use crate::connect::pg_err;
use crate::listen::pg_notify;
use crate::options::PgOptions;
use crate::rows::{col, raw_task, Cols};
use crate::sql::Sql;
use crate::tls;

/// The PostgreSQL driver under a [`PgStore`](crate::PgStore): its pool, its SQL and the
/// throttle of its `NOTIFY`s.
pub(crate) struct PgDriver {
    pub(crate) pool: Pool,
    pub(crate) sql: Sql,
    pub(crate) options: PgOptions,
    /// How the store's connections are made, with their TLS (for the listener's own
    /// connection); `None` for a store made from a pool.
    pub(crate) pg_config: Option<(tokio_postgres::Config, tls::Tls)>,
    pub(crate) throttle: Arc<Throttle>,
    /// Where the next partitioned claim of each type starts (`claim_partitioned`).
    pub(crate) cursors: KeyCursors,
    /// The types whose last hand-over found only a concurrency limit: their next one
    /// goes in one flight (`hand_over`).
    pub(crate) unlocked: std::sync::Mutex<std::collections::HashSet<String>>,
}

impl PgDriver {
    /// Whether this enqueue announces its task (inside its transaction). Every path that
    /// builds an announcing statement holds a [`Throttle::flight`] around it (to its
    /// commit where the store commits), so one enqueue at a time is announced at every
    /// commit ([`Throttle::admit_flying`]). When the throttle holds it back, a trailing
    /// `NOTIFY` is sent at the end of the window on a pooled connection, after this
    /// transaction has (most likely) committed; a transaction still open then is found
    /// by the next poll.
    pub(crate) fn notify_now(&self, event_type: &str) -> bool {
        if !self.options.notify {
            return false;
        }
        match self.throttle.admit_flying(event_type) {
            Admit::Now => true,
            Admit::Covered => false,
            Admit::Later(after) => {
                let Ok(runtime) = tokio::runtime::Handle::try_current() else {
                    self.throttle.trailing_sent(event_type);
                    return false;
                };
                let (pool, throttle) = (self.pool.clone(), Arc::clone(&self.throttle));
                let (channel, event_type) = (self.sql.channel.clone(), event_type.to_owned());
                runtime.spawn(async move {
                    throttle.wait_trailing(&event_type, after).await;
                    if let Err(e) = pg_notify(&pool, &channel, &event_type).await {
                        tracing::debug!(error = %e, %event_type, "trailing NOTIFY failed");
                    }
                });
                false
            }
        }
    }

    /// The answer of a fenced change of task `id` whose statement returned `rows`: the
    /// changed row, or why there was none (missing, or its status).
    pub(crate) async fn changed(&self, id: TaskId, rows: Vec<RawTask>) -> Result<Change> {
        if let Some(row) = rows.into_iter().next() {
            return Ok(Change::Done(Box::new(row)));
        }
        let rows = self.query(&self.sql.status_of, &[&id]).await?;
        Ok(match rows.first() {
            None => Change::Missing,
            Some(r) => Change::Refused(col::<i16>(r, 0)?.into()),
        })
    }

    /// The task a step's report met under its key (a duplicate of its insert), read on
    /// a pooled connection after the report committed.
    async fn existing(&self, event_type: &str, biz_key: &str) -> Result<Inserted> {
        let rows = self
            .query(&self.sql.existing, &[&event_type, &biz_key])
            .await?;
        let row = rows.first().ok_or_else(|| {
            unexpected_answer(&format!(
                "the task under key {biz_key:?} went away after the report met it"
            ))
        })?;
        Ok(Inserted {
            id: col(row, 0)?,
            created: false,
            status: i16::try_from(col::<i64>(row, 1)?).unwrap_or(-1),
            replaced: false,
        })
    }

    /// Whether statements are prepared once per pooled connection (named, cached), or
    /// sent unnamed with their parameters' types each time (behind a transaction pooler,
    /// where a named statement does not outlive its transaction).
    pub(crate) fn prepared(&self) -> bool {
        !self.options.transaction_pooling
    }

    /// `sql` as this store sends it on `client` (see [`prepared`](Self::prepared)).
    pub(crate) async fn statement<'s>(&self, client: &Object, sql: &'s str) -> Result<Stmt<'s>> {
        Ok(if self.prepared() {
            Stmt::Cached(client.prepare_cached(sql).await.map_err(pg_err)?)
        } else {
            Stmt::Unnamed(sql)
        })
    }

    /// Run one statement on a pooled connection.
    pub(crate) async fn query(&self, sql: &str, params: &[&dyn Param]) -> Result<Vec<Row>> {
        let client = self.client().await?;
        let stmt = self.statement(&client, sql).await?;
        stmt.query(&**client, params).await
    }

    /// Run one statement on a pooled connection; the rows it changed.
    pub(crate) async fn execute(&self, sql: &str, params: &[&dyn Param]) -> Result<u64> {
        let client = self.client().await?;
        let stmt = self.statement(&client, sql).await?;
        stmt.execute(&**client, params).await
    }

    /// Run one statement that reads task rows.
    pub(crate) async fn tasks(&self, sql: &str, params: &[&dyn Param]) -> Result<Vec<RawTask>> {
        self.query(sql, params)
            .await?
            .iter()
            .map(raw_task)
            .collect()
    }

    /// A pooled connection of the store's own for core's transactions.
    pub(crate) async fn connection(&self) -> Result<PgConnection> {
        Ok(PgConnection {
            client: Some(self.client().await?),
            prepared: self.prepared(),
            in_transaction: false,
        })
    }

    pub(crate) async fn client(&self) -> Result<Object> {
        self.pool.get().await.map_err(|e| {
            Error::new(
                ErrorKind::Unavailable,
                "connect",
                format!("no PostgreSQL connection: {e}"),
            )
            .with_source(e)
        })
    }
}

#[async_trait]
impl Driver for PgDriver {
    fn config(&self) -> &StoreConfig {
        &self.options.config
    }

    /// `NOTIFY` on the store's channel (with announcements on), on a pooled connection
    /// after the change committed (waited for at most `REVOKED_WAIT`), plus the store's
    /// notifier's announcement if it has one.
    async fn announce_revoked(&self, id: TaskId) {
        if let Some(a) = &self.options.config.announcer {
            a.revoked(id).await;
        }
        if !self.options.notify {
            return;
        }
        let message = Wake::revoked_message(id);
        let notify = pg_notify(&self.pool, &self.sql.channel, &message);
        match tokio::time::timeout(REVOKED_WAIT, notify).await {
            Ok(Ok(())) => {}
            Ok(Err(e)) => {
                tracing::debug!(error = %e, task_id = id, "NOTIFY of a revoked lease failed")
            }
            Err(_) => tracing::debug!(task_id = id, "NOTIFY of a revoked lease timed out"),
        }
    }

    /// The store's notifier's announcement, if it has one, plus a `NOTIFY` of the type
    /// on the store's channel (with announcements on), as an enqueue's.
    async fn announce_queue_change(&self, event_type: &str) {
        self.announce_committed(event_type);
        if !self.options.notify {
            return;
        }
        if let Err(e) = pg_notify(&self.pool, &self.sql.channel, event_type).await {
            tracing::debug!(error = %e, event_type, "NOTIFY of a queue change failed");
        }
    }

    async fn migrate(&self, target: u32) -> Result<()> {
        let mut client = self.client().await?;
        // One transaction for the lot: PostgreSQL's DDL is transactional, so the schema
        // moves from one version to the target or not at all.
        let tx = client.transaction().await.map_err(pg_err)?;
        // Serialize concurrent migrations: CREATE … IF NOT EXISTS alone races on the
        // catalogs when two instances start together.
        tx.execute(
            "SELECT pg_advisory_xact_lock(hashtext($1))",
            &[&self.sql.lock_key],
        )
        .await
        .map_err(pg_err)?;
        tx.batch_execute(&self.sql.schema.setup)
            .await
            .map_err(pg_err)?;
        let applied: Vec<i64> = tx
            .query(&self.sql.schema.read, &[])
            .await
            .map_err(pg_err)?
            .iter()
            .map(|r| r.get(0))
            .collect();
        let table = &self.options.config.table;
        let migrations = self.sql.schema.migrations()?;
        for m in schema::pending(table, &applied, &migrations, target)? {
            for statement in &m.statements {
                tx.batch_execute(statement).await.map_err(pg_err)?;
            }
            let version = i32::try_from(m.version).unwrap_or(i32::MAX);
            tx.execute(&self.sql.schema.record, &[&version, &m.name])
                .await
                .map_err(pg_err)?;
            schema::log_applied(table, m);
        }
        tx.commit().await.map_err(pg_err)
    }

    fn tasks_table(&self) -> (&str, &ListDialect) {
        (&self.sql.tasks, &crate::sql::LIST)
    }

    async fn run(&self, statement: &Statement<'_>) -> Result<Answer> {
        let client = self.client().await?;
        OnClient(&*client, self.prepared()).run(statement).await
    }

    fn enqueue_sql(&self) -> &dyn EnqueueSql {
        self
    }

    async fn enqueue(&self, task: Checked<&NewTask>) -> Result<Inserted> {
        // One statement in autocommit (more on a conflict, each guarded on its own); a
        // task with an order key in a transaction, so its key's lock is held throughout.
        let _flight = self.throttle.flight();
        let mut client = self.client().await?;
        if task.order().is_none() {
            return EnqueuePlan::new(self, task)
                .run(&mut OnClient(&client, self.prepared()))
                .await;
        }
        let tx = client.transaction().await.map_err(pg_err)?;
        let inserted = EnqueuePlan::new(self, task)
            .run(&mut OnClient(&tx, self.prepared()))
            .await?;
        tx.commit().await.map_err(pg_err)?;
        Ok(inserted)
    }

    async fn enqueue_many(&self, tasks: Checked<&[NewTask]>) -> Result<Vec<Inserted>> {
        let _flight = self.throttle.flight();
        let mut client = self.client().await?;
        let tx = client.transaction().await.map_err(pg_err)?;
        let inserted = EnqueueBatch::new(self, tasks)
            .run(&mut OnClient(&tx, self.prepared()))
            .await?;
        tx.commit().await.map_err(pg_err)?;
        Ok(inserted)
    }

    async fn claim_by_id(&self, id: TaskId, owner: &Owner) -> Result<Option<RawTask>> {
        let rows = self
            .tasks(&self.sql.claim_by_id, &[&id, &owner.as_str()])
            .await?;
        Ok(rows.into_iter().next())
    }

    /// The claim and the read of its limited types (see `limited_with_room`) go in one
    /// round trip, pipelined on one connection: the claim first, each its own implicit
    /// transaction. Then the limited types, each claimed in a transaction of its own.
    async fn claim_batch(&self, claim: Checked<Claim<'_>>) -> Result<Vec<RawTask>> {
        let (owner, limit) = (claim.owner.as_str(), claim.limit as i64);
        let many = claim.event_types;
        let (claim_sql, limited_sql, types): (_, _, &dyn Param) = match many {
            [one] => (&self.sql.claim_one_type, &self.sql.limited_one_type, one),
            _ => (
                &self.sql.claim_many_types,
                &self.sql.limited_many_types,
                &many,
            ),
        };
        let client = self.client().await?;
        let claim_stmt = self.statement(&client, claim_sql).await?;
        let limited_stmt = self.statement(&client, limited_sql).await?;
        let (claim_params, limited_params): ([&dyn Param; 3], [&dyn Param; 1]) =
            ([&owner, types, &limit], [types]);
        let (claimed, limited) = tokio::join!(
            claim_stmt.query(&**client, &claim_params),
            limited_stmt.query(&**client, &limited_params),
        );
        drop(client);
        let claimed = claimed?.iter().map(raw_task).collect::<Result<Vec<_>>>()?;
        let limited = limited.and_then(|rows| {
            rows.iter()
                .map(|row| Ok((col::<String>(row, 0)?, col::<i16>(row, 1)? == 1)))
                .collect::<Result<Vec<_>>>()
        });
        claim_limited_types(
            claimed,
            limited,
            claim.limit,
            |(event_type, partitioned), left| async move {
                self.claim_limited(owner, &event_type, partitioned, left as i64)
                    .await
            },
        )
        .await
    }

    async fn recycle_dead(&self, batch: Checked<AgedBatch>) -> Result<Recycled> {
        let rows = self
            .query(
                &self.sql.recycle_dead,
                &[&millis(batch.older_than), &(batch.limit as i64)],
            )
            .await?;
        let row = rows.first().ok_or_else(|| {
            Error::new(
                ErrorKind::Unexpected,
                "recycle_dead",
                "the sweep answered no row",
            )
        })?;
        let count = |i| col::<i64>(row, i).map(|n| n.max(0) as u64);
        let (to_pending, total, passed_over) = (count(0)?, count(1)?, count(2)?);
        Ok(Recycled {
            to_pending,
            to_failed: total.saturating_sub(to_pending),
            passed_over,
        })
    }

    async fn heartbeat(&self, leases: Checked<&[Lease]>) -> Result<Vec<bool>> {
        let ids: Vec<i64> = leases.iter().map(|l| l.task_id).collect();
        let tokens: Vec<i64> = leases.iter().map(|l| l.token).collect();
        let rows = self.query(&self.sql.heartbeat, &[&ids, &tokens]).await?;
        let refreshed = rows
            .iter()
            .map(|r| Ok((col::<i64>(r, 0)?, col::<i64>(r, 1)?)))
            .collect::<Result<HashSet<(i64, i64)>>>()?;
        Ok(leases
            .iter()
            .map(|l| refreshed.contains(&(l.task_id, l.token)))
            .collect())
    }

    async fn set_output(&self, lease: Lease, output: Checked<&str>) -> Result<bool> {
        let n = self
            .execute(
                &self.sql.set_output,
                &[&*output, &lease.task_id, &lease.token],
            )
            .await?;
        Ok(n == 1)
    }

    async fn mark(&self, marks: Checked<&[Mark]>) -> Result<Vec<bool>> {
        let marks = *marks;
        let rounds = mark_rounds(marks);
        let mut client = self.client().await?;
        let stmt = self.statement(&client, &self.sql.mark).await?;
        let mut flags = vec![false; marks.len()];
        if let [round] = rounds.as_slice() {
            // One statement: no transaction needed (one round trip).
            mark_round(&**client, &stmt, marks, round, &mut flags).await?;
            return Ok(flags);
        }
        let tx = client.transaction().await.map_err(pg_err)?;
        for round in &rounds {
            mark_round(&*tx, &stmt, marks, round, &mut flags).await?;
        }
        tx.commit().await.map_err(pg_err)?;
        Ok(flags)
    }

    async fn mark_and_claim(
        &self,
        marks: Checked<&[Mark]>,
        claim: Checked<Claim<'_>>,
    ) -> Result<(Vec<bool>, Option<Vec<RawTask>>)> {
        let event_type = claim.only_type()?;
        let (owner, limit) = (claim.owner.as_str(), claim.limit as i64);
        self.hand_over(&marks, owner, event_type, limit).await
    }

    async fn manual_reset(&self, id: TaskId, stuck_after: Checked<Duration>) -> Result<Change> {
        let rows = self
            .tasks(&self.sql.manual_reset, &[&id, &millis(*stuck_after)])
            .await?;
        self.changed(id, rows).await
    }

    async fn cancel(&self, id: TaskId, audit: Checked<&Audit>) -> Result<Change> {
        let rows = self
            .tasks(&self.sql.cancel, &[&id, &audit.operator, &audit.reason])
            .await?;
        self.changed(id, rows).await
    }

    async fn edit(
        &self,
        id: TaskId,
        edit: Checked<&TaskEdit>,
        audit: Checked<&Audit>,
    ) -> Result<Change> {
        let (delay, at) = edit.due_parts();
        let rows = self
            .tasks(
                &self.sql.edit,
                &[
                    &id,
                    &delay,
                    &at,
                    &edit.payload.as_deref(),
                    &edit.action(),
                    &audit.operator,
                    &audit.reason,
                ],
            )
            .await?;
        self.changed(id, rows).await
    }

    async fn delete(&self, id: TaskId, audit: Checked<&Audit>) -> Result<Change> {
        let rows = self
            .tasks(&self.sql.delete, &[&id, &audit.operator, &audit.reason])
            .await?;
        self.changed(id, rows).await
    }

    async fn reset(&self, id: TaskId, from: [i16; 2], audit: Checked<&Audit>) -> Result<Change> {
        let rows = self
            .tasks(
                &self.sql.retry,
                &[&id, &audit.operator, &audit.reason, &from[0], &from[1]],
            )
            .await?;
        self.changed(id, rows).await
    }

    async fn audit_log(&self, id: TaskId) -> Result<Vec<RawAudit>> {
        self.query(&self.sql.audit_log, &[&id])
            .await?
            .iter()
            .map(|r| RawAudit::read(&Cols(r)))
            .collect()
    }

    async fn get(&self, id: TaskId) -> Result<Option<RawTask>> {
        Ok(self.tasks(&self.sql.get, &[&id]).await?.into_iter().next())
    }

    async fn list(&self, filter: Checked<&TaskFilter>) -> Result<Vec<RawTask>> {
        let (sql, args) = list_sql(&self.sql.list_select, &crate::sql::LIST, &filter);
        let values: Vec<Box<dyn Param + Send>> = args
            .into_iter()
            .map(|a| -> Box<dyn Param + Send> {
                match a {
                    ListArg::Status(s) => Box::new(s),
                    ListArg::Text(t) => Box::new(t.to_owned()),
                    ListArg::Age(d) => Box::new(millis(d)),
                    ListArg::Int(i) => Box::new(i),
                }
            })
            .collect();
        let params: Vec<&dyn Param> = values.iter().map(|v| &**v as &dyn Param).collect();
        self.tasks(&sql, &params).await
    }

    async fn stats(&self, backlog_only: bool) -> Result<RawStats> {
        let counts_sql = if backlog_only {
            &self.sql.backlog_counts
        } else {
            &self.sql.stats_counts
        };
        let counts = self
            .query(counts_sql, &[])
            .await?
            .iter()
            .map(|r| Ok((col(r, 0)?, i64::from(col::<i16>(r, 1)?), col::<i64>(r, 2)?)))
            .collect::<Result<Vec<_>>>()?;
        let rows = self.query(&self.sql.stats_oldest_due, &[]).await?;
        let oldest_due_pending_ms = match rows.first() {
            Some(r) => col(r, 0)?,
            None => None,
        };
        Ok(RawStats {
            counts,
            oldest_due_pending_ms,
        })
    }

    async fn throughput(&self, b: Checked<Buckets>) -> Result<Vec<(String, i64, i64, i64)>> {
        let cap = i64::try_from(b.cap).unwrap_or(i64::MAX);
        self.query(
            &self.sql.throughput,
            &[&millis(b.window), &millis(b.bucket), &cap],
        )
        .await?
        .iter()
        .map(name_code_counts)
        .collect()
    }

    async fn purge_finished(&self, status: Checked<i16>, batch: Checked<AgedBatch>) -> Result<u64> {
        let (age, limit) = (millis(batch.older_than), batch.limit as i64);
        self.execute(&self.sql.purge_finished, &[&age, &limit, &*status])
            .await
    }

    async fn purge_audit(&self, batch: Checked<AgedBatch>) -> Result<u64> {
        let (age, limit) = (millis(batch.older_than), batch.limit as i64);
        let mut total = 0;
        for sql in &self.sql.purge_audit {
            total += self.execute(sql, &[&age, &limit]).await?;
        }
        Ok(total)
    }

    async fn purge_event_types(&self, batch: Checked<AgedBatch>) -> Result<u64> {
        let (age, limit) = (millis(batch.older_than), batch.limit as i64);
        self.execute(&self.sql.purge_event_types, &[&age, &limit])
            .await
    }

    async fn purge_barrier(&self, batch: Checked<AgedBatch>) -> Result<u64> {
        self.execute(
            &self.sql.purge_barrier,
            &[&millis(batch.older_than), &(batch.limit as i64)],
        )
        .await
    }

    async fn barrier_records(&self, gid: Checked<&str>) -> Result<Vec<RawBarrier>> {
        self.query(&self.sql.barrier_records, &[&*gid])
            .await?
            .iter()
            .map(|r| RawBarrier::read(&Cols(r)))
            .collect()
    }

    async fn start_saga(&self, start: Checked<&SagaStart>) -> Result<SagaStarted> {
        let _flight = self.throttle.flight();
        let mut client = self.client().await?;
        let tx = client.transaction().await.map_err(pg_err)?;
        let started = SagaStartPlan::new(self, start)
            .run(&mut OnClient(&tx, self.prepared()))
            .await?;
        tx.commit().await.map_err(pg_err)?;
        Ok(started)
    }

    async fn saga(&self, name: Checked<&str>, key: Checked<&str>) -> Result<Option<RawSaga>> {
        self.query(&self.sql.saga_get, &[&*name, &*key])
            .await?
            .first()
            .map(|r| RawSaga::read(&Cols(r)))
            .transpose()
    }

    async fn saga_write(&self, write: Checked<&SagaWrite>) -> Result<SagaWritten> {
        let _flight = self.throttle.flight();
        let mut client = self.client().await?;
        let tx = client.transaction().await.map_err(pg_err)?;
        let mut conn = OnClient(&tx, self.prepared());
        let written = saga_write_on(self, self.config(), &mut conn, write).await?;
        tx.commit().await.map_err(pg_err)?;
        Ok(written)
    }

    fn advances_sagas(&self) -> bool {
        true
    }

    async fn saga_advance(
        &self,
        advances: Checked<&[SagaAdvance]>,
    ) -> Result<Vec<Option<Advanced>>> {
        let advances = advances.into_inner();
        let docs = AdvanceDocuments::new(advances, self.config())?;
        let _flight = self.throttle.flight();
        // a task claimed here runs here: nobody else needs to hear of it
        let mut announce: Vec<&str> = Vec::new();
        for a in advances.iter().filter(|a| a.claim.is_none()) {
            for t in &a.tasks {
                let et = t.event_type();
                if !announce.contains(&et) && self.notify_now(et) {
                    announce.push(et);
                }
            }
        }
        let rows = self
            .query(
                &self.sql.saga_advance,
                &[
                    &docs.reports,
                    &docs.tasks,
                    &docs.advance_of_task,
                    &self.sql.channel,
                    &announce,
                ],
            )
            .await?;
        let first = rows.first().ok_or_else(|| unexpected_answer("no row"))?;
        let applied: Vec<i32> = col::<Option<Vec<i32>>>(first, COLUMN_COUNT)?.unwrap_or_default();
        let (recorded, moved) = (
            col::<i64>(first, COLUMN_COUNT + 1)?,
            col::<i64>(first, COLUMN_COUNT + 2)?,
        );
        if recorded != applied.len() as i64 || moved != applied.len() as i64 {
            return Err(unexpected_answer(&format!(
                "{} reports applied, {recorded} step rows and {moved} sagas written",
                applied.len()
            )));
        }
        let mut new = Vec::with_capacity(rows.len());
        for row in &rows {
            if col::<Option<i64>>(row, 0)?.is_some() {
                new.push(raw_task(row)?);
            }
        }
        let mut out = vec![None; advances.len()];
        for i in applied {
            let Some(a) = usize::try_from(i).ok().and_then(|i| advances.get(i)) else {
                return Err(unexpected_answer(&format!(
                    "an advance {i} of {}",
                    advances.len()
                )));
            };
            let mut inserted = Vec::with_capacity(a.tasks.len());
            let mut claimed = Vec::new();
            for task in &a.tasks {
                let found = new
                    .iter()
                    .position(|t| t.biz_key == task.biz_key() && t.event_type == task.event_type());
                inserted.push(match found {
                    Some(at) => {
                        let t = new.swap_remove(at);
                        let i = Inserted {
                            status: i16::try_from(t.status).unwrap_or(-1),
                            ..Inserted::created(t.id)
                        };
                        // inserted claimed, unless its type is paused
                        if t.status == i64::from(Status::Running.code()) {
                            claimed.push(t);
                        }
                        i
                    }
                    // its key was taken (a nudge enqueued it first): the task there
                    None => self.existing(task.event_type(), task.biz_key()).await?,
                });
            }
            out[i as usize] = Some(Advanced::new(inserted, claimed));
        }
        Ok(out)
    }

    async fn saga_by_id(&self, id: SagaId) -> Result<Option<RawSaga>> {
        self.query(&self.sql.saga_by_id, &[&id])
            .await?
            .first()
            .map(|r| RawSaga::read(&Cols(r)))
            .transpose()
    }

    async fn sagas(&self, filter: Checked<&SagaFilter>) -> Result<Vec<RawSaga>> {
        let status = filter.status.map(|s| s.code());
        let older = filter.older_than.map(millis);
        let started = filter.started_older_than.map(millis);
        let limit = filter.limit as i64;
        self.query(
            &self.sql.sagas,
            &[
                &filter.after_id,
                &filter.name,
                &status,
                &older,
                &limit,
                &started,
            ],
        )
        .await?
        .iter()
        .map(|r| RawSaga::read(&Cols(r)))
        .collect()
    }

    async fn saga_backlog(&self) -> Result<Vec<(String, i64, i64, i64)>> {
        self.query(&self.sql.saga_backlog, &[])
            .await?
            .iter()
            .map(name_code_counts)
            .collect()
    }

    async fn saga_log(&self, id: SagaId) -> Result<Vec<RawAudit>> {
        self.query(&self.sql.saga_log, &[&id])
            .await?
            .iter()
            .map(|r| RawAudit::read(&Cols(r)))
            .collect()
    }

    async fn saga_steps(&self, id: SagaId) -> Result<Vec<RawSagaStep>> {
        self.query(&self.sql.saga_steps, &[&id])
            .await?
            .iter()
            .map(|r| RawSagaStep::read(&Cols(r)))
            .collect()
    }

    async fn delete_finished(&self, status: Checked<i16>, ids: Checked<&[TaskId]>) -> Result<u64> {
        self.execute(&self.sql.delete_finished, &[&*ids, &*status])
            .await
    }

    async fn release_order_keys(&self, keys: Checked<&[String]>) -> Result<Vec<TaskId>> {
        let mut conn = self.connection().await?;
        release_order_keys(self, &mut conn, &keys).await
    }

    async fn register_event_types(&self, event_types: Checked<&[String]>) -> Result<()> {
        self.execute(&self.sql.types_register, &[&*event_types])
            .await
            .map(|_| ())
    }

    async fn event_types(&self) -> Result<Vec<(String, DateTime<Utc>, DateTime<Utc>)>> {
        let rows = self.query(&self.sql.types_list, &[]).await?;
        rows.iter()
            .map(|r| Ok((col(r, 0)?, col(r, 1)?, col(r, 2)?)))
            .collect()
    }

    async fn set_queue(
        &self,
        event_type: Checked<&str>,
        change: QueueChange,
        audit: Checked<&Audit>,
    ) -> Result<Queue> {
        let c = change.columns();
        let action = change.action();
        let params: [&dyn Param; 9] = [
            &*event_type,
            &c.paused,
            &action,
            &audit.operator,
            &audit.reason,
            &c.concurrency,
            &c.rate_limit,
            &c.rate_window_ms,
            &c.partitioned,
        ];
        let mut rows = self.query(&self.sql.queue_set, &params).await?;
        if rows.is_empty() {
            // the setting already was so: nothing written; the row as it is
            rows = self.query(&self.sql.queue_get, &[&*event_type]).await?;
        }
        let row = rows
            .first()
            .ok_or_else(|| unexpected_answer("no queue row after its change"))?;
        read_queue(&Cols(row))
    }

    async fn queues(&self) -> Result<Vec<Queue>> {
        self.query(&self.sql.queues, &[])
            .await?
            .iter()
            .map(|r| read_queue(&Cols(r)))
            .collect()
    }

    async fn queue_log(&self, event_type: Checked<&str>) -> Result<Vec<QueueLogEntry>> {
        self.query(&self.sql.queue_log, &[&*event_type])
            .await?
            .iter()
            .map(|r| read_queue_entry(&Cols(r)))
            .collect()
    }

    async fn order_keys(&self, after: Option<&str>, limit: Checked<usize>) -> Result<Vec<String>> {
        let limit = i64::try_from(*limit).unwrap_or(i64::MAX);
        let rows = self
            .query(&self.sql.keys_page, &[&after.unwrap_or(""), &limit])
            .await?;
        rows.iter().map(|r| col(r, 0)).collect()
    }
}

/// Apply one round of marks (each task at most once) as one set-based statement, setting
/// the flags of the marks that applied. The rows go in id order: the statement updates
/// them in the order of its arrays (see `Sql::mark`).
pub(crate) async fn mark_round<C: GenericClient + Sync>(
    client: &C,
    stmt: &Stmt<'_>,
    marks: &[Mark],
    round: &[usize],
    flags: &mut [bool],
) -> Result<()> {
    let mut round = round.to_vec();
    round.sort_unstable_by_key(|&i| marks[i].lease.task_id);
    let round = round.as_slice();
    let mut ids = Vec::with_capacity(round.len());
    let mut tokens = Vec::with_capacity(round.len());
    let mut kinds = Vec::with_capacity(round.len());
    let mut delays = Vec::with_capacity(round.len());
    let mut errors: Vec<Option<&str>> = Vec::with_capacity(round.len());
    let mut maxes = Vec::with_capacity(round.len());
    for &i in round {
        let m = &marks[i];
        ids.push(m.lease.task_id);
        tokens.push(m.lease.token);
        let max = match &m.action {
            MarkAction::Snooze { max, .. } => i64::from(*max),
            _ => 0,
        };
        maxes.push(max);
        let (kind, delay, error): (i16, i64, Option<&str>) = match &m.action {
            MarkAction::Success => (1, 0, None),
            MarkAction::Retry { delay, error } => (2, millis(*delay), Some(error.as_str())),
            MarkAction::Fail { error } => (3, 0, Some(error.as_str())),
            MarkAction::Release => (4, 0, None),
            MarkAction::Cancel { reason } => (5, 0, Some(reason.as_str())),
            MarkAction::Snooze { delay, error, .. } => (6, millis(*delay), Some(error.as_str())),
        };
        kinds.push(kind);
        delays.push(delay);
        errors.push(error);
    }
    let rows = stmt
        .query(client, &[&ids, &tokens, &kinds, &delays, &errors, &maxes])
        .await?;
    let applied = rows
        .iter()
        .map(|r| col::<i64>(r, 0))
        .collect::<Result<HashSet<i64>>>()?;
    for &i in round {
        flags[i] = applied.contains(&marks[i].lease.task_id);
    }
    Ok(())
}

/// A row of a name, a status code (`smallint`) and two counts: the throughput's and the
/// saga backlog's.
fn name_code_counts(r: &tokio_postgres::Row) -> Result<(String, i64, i64, i64)> {
    Ok((
        col(r, 0)?,
        i64::from(col::<i16>(r, 1)?),
        col::<i64>(r, 2)?,
        col::<i64>(r, 3)?,
    ))
}

/// An answer of a step's report in one statement that cannot be.
fn unexpected_answer(what: &str) -> Error {
    Error::new(
        ErrorKind::Unexpected,
        "saga_step",
        format!("the report's statement answered {what}"),
    )
}
