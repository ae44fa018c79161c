//! The enqueue, claim and completion on the caller's own transaction
//! ([`Transactional`]), and the helpers of a backend's native forms of them.

use std::future::Future;

use async_trait::async_trait;

use super::checks::{check_start, check_task, check_tasks, enqueued, enqueued_all};
use super::saga_write::{saga_write_blocking, saga_write_on, step_applied, step_write};
use super::statement::applied;
use super::{
    Answer, Backend, BlockingTxConnection, Checked, Dialect, EnqueueBatch, EnqueuePlan, EnqueueSql,
    EnqueueStep, Inserted, SagaStartPlan, Statement, TxConnection, TxPlan,
};
use crate::error::{Error, ErrorKind, Result};
use crate::limits::StoreConfig;
use crate::model::{
    Barrier, BranchCall, Enqueued, Lease, NewTask, Owner, SagaDef, SagaStart, SagaStarted,
    StepApplied, StepReport, TaskId,
};

/// The attempt of a running task that a handler completes on its own transaction
/// ([`Transactional::complete_in`], [`complete_on`]). The engine's
/// [`Context`](crate::Context) is one.
pub trait Attempt: Send + Sync {
    /// The lease the attempt holds.
    fn lease(&self) -> Lease;

    /// Record that the handler marked its own success, so the engine does not mark it
    /// again.
    #[doc(hidden)]
    fn set_completed(&self);
}

/// A backend's transactional enqueue, on the caller's own transaction or connection:
/// `task` is checked as [`TaskStore::enqueue`](crate::TaskStore::enqueue) checks it (bad
/// input is refused before `insert` runs), handed to `insert` (the backend's insert shape
/// on the caller's connection), and answered as `enqueue` answers, with `enqueue` named
/// in any error. Never retried: a conflict rolled back the caller's transaction, which
/// only the caller can run again.
///
/// ```
/// use backstop_core::driver::{enqueue_on, Inserted};
/// use backstop_core::{ErrorKind, NewTask, StoreConfig};
///
/// # tokio_test(async {
/// let config = StoreConfig::default();
/// let enqueued = enqueue_on(&config, &NewTask::new("PAY", "order-1"), |task| async move {
///     // run the insert on the caller's transaction here
///     assert_eq!(task.biz_key(), "order-1");
///     Ok(Inserted::created(7))
/// })
/// .await
/// .unwrap();
/// assert_eq!((enqueued.id, enqueued.created), (7, true));
///
/// let bad = enqueue_on(&config, &NewTask::new("", "k"), |_| async {
///     unreachable!("never called with invalid input")
/// })
/// .await;
/// assert_eq!(bad.unwrap_err().kind(), ErrorKind::InvalidInput);
/// # });
/// # fn tokio_test(f: impl std::future::Future<Output = ()>) {
/// #     tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(f)
/// # }
/// ```
pub async fn enqueue_on<'t, F, Fut>(
    config: &StoreConfig,
    task: &'t NewTask,
    insert: F,
) -> Result<Enqueued>
where
    F: FnOnce(Checked<&'t NewTask>) -> Fut,
    Fut: Future<Output = Result<Inserted>>,
{
    let checked = check_task(config, task)?;
    let inserted = insert(checked)
        .await
        .map_err(|e| e.with_operation("enqueue"))?;
    enqueued(inserted, task)
}

/// [`enqueue_on`] for a backend whose calls block (an embedded database).
pub fn enqueue_on_blocking<'t, F>(
    config: &StoreConfig,
    task: &'t NewTask,
    insert: F,
) -> Result<Enqueued>
where
    F: FnOnce(Checked<&'t NewTask>) -> Result<Inserted>,
{
    let checked = check_task(config, task)?;
    let inserted = insert(checked).map_err(|e| e.with_operation("enqueue"))?;
    enqueued(inserted, task)
}

/// A backend's completion of a running task on the handler's own transaction
/// (`complete_tx`): `mark` runs the fenced success mark (`status = 1` where the task is
/// running under `lease`) on the caller's transaction and answers whether a row changed.
/// Applied, the attempt ([`Attempt`], the engine's [`Context`](crate::Context)) records it, so the engine does not
/// mark the task again; the handler commits its business writes, the follow-up tasks it
/// enqueued on the same transaction and the success together. Not applied (the lease is
/// gone: cancelled, reset, recycled), a `Conflict` error: the handler's `?` rolls the
/// whole transaction back.
///
/// ```
/// # use backstop_core::{driver::complete_on, Context, ErrorKind};
/// # async fn demo(cx: &Context) -> backstop_core::Result<()> {
/// // on the handler's transaction, after its business writes:
/// complete_on(cx, |lease| async move {
///     // UPDATE … SET status = 1 WHERE id = lease.task_id AND status = 3 AND lease = lease.token
///     Ok(true)
/// })
/// .await?;
/// // … then commit.
/// # Ok(()) }
/// ```
pub async fn complete_on<F, Fut>(cx: &dyn Attempt, mark: F) -> Result<()>
where
    F: FnOnce(Lease) -> Fut,
    Fut: Future<Output = Result<bool>>,
{
    let applied = mark(cx.lease())
        .await
        .map_err(|e| e.with_operation("complete_tx"))?;
    completed(cx, applied)
}

/// [`complete_on`] for a backend whose calls block (an embedded database).
pub fn complete_on_blocking<F>(cx: &dyn Attempt, mark: F) -> Result<()>
where
    F: FnOnce(Lease) -> Result<bool>,
{
    let applied = mark(cx.lease()).map_err(|e| e.with_operation("complete_tx"))?;
    completed(cx, applied)
}

fn completed(cx: &dyn Attempt, applied: bool) -> Result<()> {
    if !applied {
        let lease = cx.lease();
        return Err(Error::new(
            ErrorKind::Conflict,
            "complete_tx",
            format!(
                "task {} is no longer running under lease {} (cancelled, reset or recycled): \
                 its outcome is refused; roll the transaction back",
                lease.task_id, lease.token
            ),
        ));
    }
    cx.set_completed();
    Ok(())
}

/// The transactional enqueue and completion, on any store and any [`TxConnection`]: the
/// same call on every backend. Implemented for every backend's store (and `AnyStore`).
///
/// The native forms of each backend (`PgStore::enqueue_tx` on tokio-postgres,
/// `SqliteStore::transaction` on rusqlite) run the same statements.
#[async_trait]
pub trait Transactional: Backend {
    /// The SQL the store writes: for an application that picks its own SQL text per
    /// database (placeholders, say).
    fn dialect(&self) -> Dialect {
        self.driver().enqueue_sql().dialect()
    }

    /// Enqueue `task` on the caller's transaction `conn`: the task row commits or rolls
    /// back together with the caller's business rows.
    ///
    /// - Same validation and idempotency as [`TaskStore::enqueue`](crate::TaskStore::enqueue):
    ///   invalid input is refused (`InvalidInput`) before anything runs, and so is a
    ///   connection of another [`Dialect`] than the store's (`Config`).
    /// - A duplicate returns the existing task's id with `created: false` and writes
    ///   nothing; the caller's transaction stays usable.
    /// - Never retried: a deadlock or serialization failure rolled back the caller's
    ///   whole transaction, which only the caller can run again (the error is
    ///   `Contention`).
    /// - `conn` must reach the store's database and table (same schema, migrated). On
    ///   SQLite, open the transaction with `BEGIN IMMEDIATE` so it never fails to
    ///   upgrade to a write; on MySQL, the session time zone must be UTC (sqlx's
    ///   default).
    async fn enqueue_in<C>(&self, conn: &mut C, task: &NewTask) -> Result<Enqueued>
    where
        C: TxConnection + ?Sized,
    {
        let sql = self.driver().enqueue_sql();
        let checked = check_task(self.driver().config(), task)?;
        same_dialect(sql.dialect(), conn.dialect(), "enqueue")?;
        let inserted = EnqueuePlan::new(sql, checked)
            .run(conn)
            .await
            .map_err(|e| e.with_operation("enqueue"))?;
        let done = enqueued(inserted, task)?;
        announce_visible(
            self.driver(),
            std::slice::from_ref(task),
            std::slice::from_ref(&done),
        );
        Ok(done)
    }

    /// Enqueue many `tasks` on the caller's transaction `conn`, most of them in
    /// multi-row inserts: they commit or roll back with the caller's business rows.
    ///
    /// - Answered, validated and ordered as
    ///   [`TaskStore::enqueue_many`](crate::TaskStore::enqueue_many): one invalid task
    ///   refuses the batch before anything runs.
    /// - An error part way leaves some of the batch written on the caller's
    ///   transaction: roll it back.
    /// - Otherwise as [`enqueue_in`](Self::enqueue_in) (never retried; the same
    ///   requirements on `conn`).
    async fn enqueue_many_in<C>(&self, conn: &mut C, tasks: &[NewTask]) -> Result<Vec<Enqueued>>
    where
        C: TxConnection + ?Sized,
    {
        let sql = self.driver().enqueue_sql();
        let checked = check_tasks(self.driver().config(), tasks)?;
        same_dialect(sql.dialect(), conn.dialect(), "enqueue_many")?;
        let inserted = EnqueueBatch::new(sql, checked)
            .run(conn)
            .await
            .map_err(|e| e.with_operation("enqueue_many"))?;
        let done = enqueued_all(inserted, tasks)?;
        announce_visible(self.driver(), tasks, &done);
        Ok(done)
    }

    /// [`enqueue_many_in`](Self::enqueue_many_in) on a blocking driver's connection.
    fn enqueue_many_blocking<C>(&self, conn: &mut C, tasks: &[NewTask]) -> Result<Vec<Enqueued>>
    where
        C: BlockingTxConnection + ?Sized,
    {
        let sql = self.driver().enqueue_sql();
        let checked = check_tasks(self.driver().config(), tasks)?;
        same_dialect(sql.dialect(), conn.dialect(), "enqueue_many")?;
        let inserted = EnqueueBatch::new(sql, checked)
            .run_blocking(conn)
            .map_err(|e| e.with_operation("enqueue_many"))?;
        let done = enqueued_all(inserted, tasks)?;
        announce_visible(self.driver(), tasks, &done);
        Ok(done)
    }

    /// [`enqueue_in`](Self::enqueue_in) on a blocking driver's connection.
    fn enqueue_blocking<C>(&self, conn: &mut C, task: &NewTask) -> Result<Enqueued>
    where
        C: BlockingTxConnection + ?Sized,
    {
        let sql = self.driver().enqueue_sql();
        let checked = check_task(self.driver().config(), task)?;
        same_dialect(sql.dialect(), conn.dialect(), "enqueue")?;
        let inserted = EnqueuePlan::new(sql, checked)
            .run_blocking(conn)
            .map_err(|e| e.with_operation("enqueue"))?;
        let done = enqueued(inserted, task)?;
        announce_visible(
            self.driver(),
            std::slice::from_ref(task),
            std::slice::from_ref(&done),
        );
        Ok(done)
    }

    /// Claim task `id` for `owner` on the caller's transaction `conn`, so the claim
    /// commits with the enqueue instead of after it: one commit fewer per task run ahead.
    /// For a task enqueued on this same transaction (any task never claimed before
    /// works). Returns the claim's lease (token 1), or `None` when the task was not
    /// claimed: missing (rolled back), not pending (waiting behind its order key), not
    /// due (delayed), or claimed before.
    ///
    /// Most callers want [`Engine::claim_in`](crate::Engine::claim_in), which reserves
    /// the executor's room first and runs the task after the commit.
    ///
    /// - Nothing is retried (as [`enqueue_in`](Self::enqueue_in)); on an error, roll the
    ///   transaction back (PostgreSQL has aborted it).
    /// - The claim's lease clock starts at this statement: a transaction still open
    ///   `dead_after` later commits a task the sweep takes as dead at once (the lease
    ///   fence keeps the late run from writing over the next attempt).
    async fn claim_in<C>(&self, conn: &mut C, id: TaskId, owner: &Owner) -> Result<Option<Lease>>
    where
        C: TxConnection + ?Sized,
    {
        let sql = self.driver().enqueue_sql();
        same_dialect(sql.dialect(), conn.dialect(), "claim_in")?;
        let statement = claim_statement(sql, id, owner);
        let answer = conn.run(&statement).await?;
        claimed_lease(&answer, id)
    }

    /// [`claim_in`](Self::claim_in) on a blocking driver's connection.
    fn claim_blocking<C>(&self, conn: &mut C, id: TaskId, owner: &Owner) -> Result<Option<Lease>>
    where
        C: BlockingTxConnection + ?Sized,
    {
        let sql = self.driver().enqueue_sql();
        same_dialect(sql.dialect(), conn.dialect(), "claim_in")?;
        let statement = claim_statement(sql, id, owner);
        let answer = conn.run(&statement)?;
        claimed_lease(&answer, id)
    }

    /// [`complete_in`](Self::complete_in) on a blocking driver's connection.
    fn complete_blocking<C>(&self, conn: &mut C, cx: &dyn Attempt) -> Result<()>
    where
        C: BlockingTxConnection + ?Sized,
    {
        let sql = self.driver().enqueue_sql();
        same_dialect(sql.dialect(), conn.dialect(), "complete_tx")?;
        crate::driver::complete_on_blocking(cx, |lease| {
            applied(
                &conn.run(&statement(sql, EnqueueStep::Complete(lease)))?,
                "complete",
            )
        })
    }

    /// Inside a handler: record the running task's success on the handler's transaction
    /// `conn`, with its business writes and the follow-up tasks it enqueued there
    /// ([`enqueue_in`](Self::enqueue_in)): all commit together or not at all (see
    /// [`complete_on`](crate::driver::complete_on)). `Conflict` when the attempt's lease
    /// is gone: return the error and the transaction rolls back.
    async fn complete_in<C>(&self, conn: &mut C, cx: &dyn Attempt) -> Result<()>
    where
        C: TxConnection + ?Sized,
    {
        let sql = self.driver().enqueue_sql();
        same_dialect(sql.dialect(), conn.dialect(), "complete_tx")?;
        crate::driver::complete_on(cx, |lease| async move {
            let answer = conn
                .run(&statement(sql, EnqueueStep::Complete(lease)))
                .await?;
            applied(&answer, "complete")
        })
        .await
    }

    /// Decide the participant barrier of `call` on the participant's transaction `conn`
    /// (see [`BarrierPlan`](crate::driver::BarrierPlan) for the rules): run the business
    /// logic only when the answer [`should_run`](crate::Barrier::should_run), then
    /// **commit whatever the answer** — the records the barrier wrote are what refuses a
    /// second delivery, or a forward call arriving after its compensation. Roll back on
    /// an error, and nothing of the call is recorded.
    ///
    /// - Bad ids were refused when `call` was made ([`BranchCall::new`](crate::BranchCall::new));
    ///   a connection of another [`Dialect`] than the store's is refused (`Config`)
    ///   before anything runs.
    /// - Never retried, as [`enqueue_in`](Self::enqueue_in): a racing call of the same
    ///   branch waits for this transaction's end, and its answer follows from this one's.
    ///
    /// ```no_run
    /// # use backstop_core::{BranchCall, BranchOp, Transactional, TxConnection};
    /// # async fn pay<S: Transactional, C: TxConnection>(store: &S, tx: &mut C) -> backstop_core::Result<()> {
    /// let call = BranchCall::new("order-42", "payment", BranchOp::Compensate)?;
    /// if store.barrier_in(tx, &call).await?.should_run() {
    ///     // refund, on the same transaction
    /// }
    /// // … then commit, whatever the barrier said.
    /// # Ok(()) }
    /// ```
    async fn barrier_in<C>(&self, conn: &mut C, call: &BranchCall) -> Result<Barrier>
    where
        C: TxConnection + ?Sized,
    {
        let sql = self.driver().enqueue_sql();
        same_dialect(sql.dialect(), conn.dialect(), "barrier")?;
        super::BarrierPlan::new(sql, call)
            .run(conn)
            .await
            .map_err(|e| e.with_operation("barrier"))
    }

    /// [`barrier_in`](Self::barrier_in) on a blocking driver's connection.
    fn barrier_blocking<C>(&self, conn: &mut C, call: &BranchCall) -> Result<Barrier>
    where
        C: BlockingTxConnection + ?Sized,
    {
        let sql = self.driver().enqueue_sql();
        same_dialect(sql.dialect(), conn.dialect(), "barrier")?;
        super::BarrierPlan::new(sql, call)
            .run_blocking(conn)
            .map_err(|e| e.with_operation("barrier"))
    }

    /// Start a saga on the caller's transaction `conn`, with the business writes that
    /// call for it: its state row and its first group's tasks commit with them, or not at
    /// all. As [`TaskStore::start_saga`](crate::TaskStore::start_saga) answers: a key
    /// started before is answered (`created: false`) and nothing is written.
    ///
    /// - Checked as `start_saga` checks (`InvalidInput`), and a connection of another
    ///   [`Dialect`] than the store's is refused (`Config`), before anything runs.
    /// - Never retried, as [`enqueue_in`](Self::enqueue_in): a racing start of the same
    ///   key waits for this transaction's end, then answers this one's saga.
    ///
    /// ```no_run
    /// # use backstop_core::{SagaDef, SagaStep, Transactional, TxConnection};
    /// # async fn order<S: Transactional, C: TxConnection>(store: &S, tx: &mut C) -> backstop_core::Result<()> {
    /// let def = SagaDef::builder("order")
    ///     .step(SagaStep::new("stock").compensated())
    ///     .step(SagaStep::new("pay"))
    ///     .build()?;
    /// // … insert the order on `tx`, then:
    /// let started = store.start_in(tx, &def.start("order-42", &42)?).await?;
    /// assert!(started.created);
    /// // … commit
    /// # Ok(()) }
    /// ```
    async fn start_in<C>(&self, conn: &mut C, start: &SagaStart) -> Result<SagaStarted>
    where
        C: TxConnection + ?Sized,
    {
        let sql = self.driver().enqueue_sql();
        let checked = check_start(self.driver().config(), start)?;
        same_dialect(sql.dialect(), conn.dialect(), "start_saga")?;
        let started = SagaStartPlan::new(sql, checked)
            .run(conn)
            .await
            .map_err(|e| e.with_operation("start_saga"))?;
        announce_started(self.driver(), start, &started);
        Ok(started)
    }

    /// [`start_in`](Self::start_in) on a blocking driver's connection.
    fn start_blocking<C>(&self, conn: &mut C, start: &SagaStart) -> Result<SagaStarted>
    where
        C: BlockingTxConnection + ?Sized,
    {
        let sql = self.driver().enqueue_sql();
        let checked = check_start(self.driver().config(), start)?;
        same_dialect(sql.dialect(), conn.dialect(), "start_saga")?;
        let started = SagaStartPlan::new(sql, checked)
            .run_blocking(conn)
            .map_err(|e| e.with_operation("start_saga"))?;
        announce_started(self.driver(), start, &started);
        Ok(started)
    }

    /// Record a saga step's report ([`TaskStore::saga_step_many`](crate::TaskStore::saga_step_many))
    /// on the caller's transaction, with the business writes of the step: the step's
    /// effect, its task's success, its step row, the saga's row and the next steps'
    /// tasks commit together, or not at all, so a step that writes to this database
    /// takes effect exactly once. The same contract as `saga_step` (fenced by the task's
    /// lease: `Conflict` when it lost it; bad input is `InvalidInput` and writes nothing);
    /// on an error, roll the transaction back. A step's code reports so with
    /// [`StepContext::report`](crate::StepContext::report) and
    /// [`StepContext::reported`](crate::StepContext::reported).
    async fn saga_step_in<C>(
        &self,
        conn: &mut C,
        def: &SagaDef,
        report: &StepReport,
    ) -> Result<StepApplied>
    where
        C: TxConnection + ?Sized,
    {
        const OP: &str = "saga_step";
        let sql = self.driver().enqueue_sql();
        let config = self.driver().config();
        let write = step_write(config, def, report)?;
        same_dialect(sql.dialect(), conn.dialect(), OP)?;
        let written = saga_write_on(sql, config, conn, Checked::new(&write))
            .await
            .map_err(|e| e.with_operation(OP))?;
        step_applied(written)
    }

    /// [`saga_step_in`](Self::saga_step_in) on a blocking driver's connection.
    fn saga_step_blocking<C>(
        &self,
        conn: &mut C,
        def: &SagaDef,
        report: &StepReport,
    ) -> Result<StepApplied>
    where
        C: BlockingTxConnection + ?Sized,
    {
        const OP: &str = "saga_step";
        let sql = self.driver().enqueue_sql();
        let config = self.driver().config();
        let write = step_write(config, def, report)?;
        same_dialect(sql.dialect(), conn.dialect(), OP)?;
        let written = saga_write_blocking(sql, config, conn, Checked::new(&write))
            .map_err(|e| e.with_operation(OP))?;
        step_applied(written)
    }
}

impl<B: Backend + ?Sized> Transactional for B {}

/// Announce, once they can be read (committed), the due tasks an enqueue on the caller's
/// transaction created ([`Driver::announce_when_visible`]).
fn announce_visible(d: &dyn super::Driver, tasks: &[NewTask], done: &[Enqueued]) {
    for (event_type, id) in super::due_created(tasks, done) {
        let written = match tasks.len() {
            1 => super::Written::Alone(id),
            _ => super::Written::Task(id),
        };
        d.announce_when_visible(event_type, written);
    }
}

/// Announce, once it can be read, a saga started on the caller's transaction (its first
/// steps' tasks).
fn announce_started(d: &dyn super::Driver, start: &SagaStart, started: &SagaStarted) {
    if let (true, Some(first)) = (started.created, start.first_tasks().first()) {
        d.announce_when_visible(first.event_type(), super::Written::Saga(started.id));
    }
}

/// The claim of task `id` for `owner` on the caller's transaction, in `sql`'s SQL.
fn claim_statement<'a>(sql: &'a dyn EnqueueSql, id: TaskId, owner: &'a Owner) -> Statement<'a> {
    statement(
        sql,
        EnqueueStep::Claim {
            id,
            owner: owner.as_str(),
        },
    )
}

/// The statement of `step` in `sql`'s SQL, with the parameters core makes for it.
fn statement<'a>(sql: &'a dyn EnqueueSql, step: EnqueueStep<'a>) -> Statement<'a> {
    let params = step.params(sql.run_at());
    sql.statement(step, params)
}

/// The lease of a claim on the caller's transaction: token 1, the first claim's.
fn claimed_lease(answer: &Answer, id: TaskId) -> Result<Option<Lease>> {
    Ok(applied(answer, "claim_in")?.then_some(Lease {
        task_id: id,
        token: 1,
    }))
}

fn same_dialect(store: Dialect, conn: Dialect, op: &'static str) -> Result<()> {
    if store == conn {
        return Ok(());
    }
    Err(Error::config(
        op,
        format!("the store is on {store} but the transaction's connection is {conn}"),
    ))
}
