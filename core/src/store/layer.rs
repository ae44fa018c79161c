//! The layer mechanism: [`StoreLayer`] and [`Layer`].

use std::time::Duration;

use async_trait::async_trait;
use futures_util::future::BoxFuture;

use super::TaskStore;
use crate::driver::{Backend, Driver};
use crate::error::Result;
use crate::model::{
    Audit, AuditEntry, BarrierRecord, Enqueued, EventTypeSeen, Lease, Mark, NewTask, Owner, Queue,
    QueueChange, QueueLogEntry, Recycled, Saga, SagaCommand, SagaCount, SagaDef, SagaFilter,
    SagaId, SagaLogEntry, SagaStart, SagaStarted, SagaStepRecord, Stats, Status, StepApplied,
    StepReport, Task, TaskEdit, TaskFilter, TaskId, Throughput,
};

/// Declares [`Op`] from one list: its variants, [`Op::ALL`] and [`Op::name`].
macro_rules! ops {
    ($($(#[$doc:meta])* $variant:ident => $name:literal),+ $(,)?) => {
        /// A [`TaskStore`] operation, as a layer sees it (see [`Call`]).
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
        #[non_exhaustive]
        pub enum Op {
            $($(#[$doc])* $variant,)+
        }

        impl Op {
            /// Every operation, in the order the trait declares them.
            pub const ALL: &'static [Op] = &[$(Op::$variant),+];

            /// The operation's name: the [`TaskStore`] method's (`"claim_batch"`).
            ///
            /// ```
            /// assert_eq!(backstop_core::Op::ClaimBatch.name(), "claim_batch");
            /// ```
            pub fn name(self) -> &'static str {
                match self {
                    $(Op::$variant => $name,)+
                }
            }
        }
    };
}

ops! {
    /// [`TaskStore::migrate`].
    Migrate => "migrate",
    /// [`TaskStore::migrate_to`].
    MigrateTo => "migrate_to",
    /// [`TaskStore::enqueue`].
    Enqueue => "enqueue",
    /// [`TaskStore::enqueue_many`].
    EnqueueMany => "enqueue_many",
    /// [`TaskStore::claim_by_id`].
    ClaimById => "claim_by_id",
    /// [`TaskStore::claim_batch`].
    ClaimBatch => "claim_batch",
    /// [`TaskStore::recycle_dead`].
    RecycleDead => "recycle_dead",
    /// [`TaskStore::heartbeat`].
    Heartbeat => "heartbeat",
    /// [`TaskStore::set_output`].
    SetOutput => "set_output",
    /// [`TaskStore::mark`].
    Mark => "mark",
    /// [`TaskStore::mark_and_claim`].
    MarkAndClaim => "mark_and_claim",
    /// [`TaskStore::manual_reset`].
    ManualReset => "manual_reset",
    /// [`TaskStore::cancel`].
    Cancel => "cancel",
    /// [`TaskStore::edit`].
    Edit => "edit",
    /// [`TaskStore::delete`].
    Delete => "delete",
    /// [`TaskStore::audit_log`].
    AuditLog => "audit_log",
    /// [`TaskStore::reset`].
    Reset => "reset",
    /// [`TaskStore::reset_matching`].
    ResetMatching => "reset_matching",
    /// [`TaskStore::get`].
    Get => "get",
    /// [`TaskStore::list`].
    List => "list",
    /// [`TaskStore::count_matching`].
    CountMatching => "count_matching",
    /// [`TaskStore::stats`].
    Stats => "stats",
    /// [`TaskStore::backlog`].
    Backlog => "backlog",
    /// [`TaskStore::throughput`].
    Throughput => "throughput",
    /// [`TaskStore::purge_finished`].
    PurgeFinished => "purge_finished",
    /// [`TaskStore::purge_audit`].
    PurgeAudit => "purge_audit",
    /// [`TaskStore::purge_event_types`].
    PurgeEventTypes => "purge_event_types",
    /// [`TaskStore::purge_barrier`].
    PurgeBarrier => "purge_barrier",
    /// [`TaskStore::barrier_records`].
    BarrierRecords => "barrier_records",
    /// [`TaskStore::start_saga`].
    StartSaga => "start_saga",
    /// [`TaskStore::saga`].
    Saga => "saga",
    /// [`TaskStore::saga_step_many`].
    SagaStep => "saga_step",
    /// [`TaskStore::saga_steps`].
    SagaSteps => "saga_steps",
    /// [`TaskStore::saga_by_id`].
    SagaById => "saga_by_id",
    /// [`TaskStore::sagas`].
    Sagas => "sagas",
    /// [`TaskStore::command_saga`].
    CommandSaga => "command_saga",
    /// [`TaskStore::nudge_saga`].
    NudgeSaga => "nudge_saga",
    /// [`TaskStore::saga_log`].
    SagaLog => "saga_log",
    /// [`TaskStore::saga_backlog`].
    SagaBacklog => "saga_backlog",
    /// [`TaskStore::delete_finished`].
    DeleteFinished => "delete_finished",
    /// [`TaskStore::release_order_keys`].
    ReleaseOrderKeys => "release_order_keys",
    /// [`TaskStore::order_keys`].
    OrderKeys => "order_keys",
    /// [`TaskStore::register_event_types`].
    RegisterEventTypes => "register_event_types",
    /// [`TaskStore::event_types`].
    EventTypes => "event_types",
    /// [`TaskStore::set_queue`].
    SetQueue => "set_queue",
    /// [`TaskStore::queues`].
    Queues => "queues",
    /// [`TaskStore::queue_log`].
    QueueLog => "queue_log",
}

impl std::fmt::Display for Op {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// One call of a store operation, described for a layer's [`around`](StoreLayer::around):
/// the operation and what it is about (set where the operation has it).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct Call<'a> {
    /// The operation.
    pub op: Op,
    /// The task it names (`claim_by_id`, `get`, an operator's change).
    pub id: Option<TaskId>,
    /// The event type it is about (`enqueue`, a filter's).
    pub event_type: Option<&'a str>,
    /// How many items it carries (tasks, marks, leases, ids, keys, event types).
    pub count: Option<usize>,
    /// The most rows it may touch or return.
    pub limit: Option<usize>,
}

impl<'a> Call<'a> {
    /// A call of `op` with nothing else known.
    pub fn new(op: Op) -> Self {
        Call {
            op,
            id: None,
            event_type: None,
            count: None,
            limit: None,
        }
    }

    /// With the task it names.
    pub fn id(mut self, id: TaskId) -> Self {
        self.id = Some(id);
        self
    }

    /// With its event type.
    pub fn event_type(mut self, event_type: &'a str) -> Self {
        self.event_type = Some(event_type);
        self
    }

    /// With how many items it carries.
    pub fn count(mut self, count: usize) -> Self {
        self.count = Some(count);
        self
    }

    /// With the most rows it may touch.
    pub fn limit(mut self, limit: usize) -> Self {
        self.limit = Some(limit);
        self
    }

    /// With what `filter` names (its event type and limit).
    pub fn filter(mut self, filter: &'a TaskFilter) -> Self {
        self.event_type = filter.event_type.as_deref();
        self.limit = Some(filter.limit);
        self
    }
}

/// Store layers: wrap any store, change the operations you care about, forward the rest.
///
/// A wrapper of a [`TaskStore`] (a tracing layer, a fault injector, a test's recorder)
/// implements [`StoreLayer`]: it names the store it wraps ([`inner`](StoreLayer::inner)),
/// overrides the hook of each operation it changes (`on_mark` for
/// [`mark`](TaskStore::mark)), and gets every other operation forwarded by the trait's
/// defaults. Every implementor of `StoreLayer` is a `TaskStore`. A wrapper that does the
/// same around every operation (a span, a delay) overrides only
/// [`around`](StoreLayer::around), which each forwarded operation runs through. (The
/// hooks have names of their own so that a module can import both traits and still call
/// `store.mark(…)` without ambiguity.)
///
/// ```
/// use backstop_core::{async_trait, Mark, Result, StoreLayer, TaskStore};
/// use std::sync::atomic::{AtomicUsize, Ordering};
///
/// /// Counts the marks that reach the store; every other call goes straight through.
/// struct CountMarks<S> {
///     inner: S,
///     marks: AtomicUsize,
/// }
///
/// #[async_trait]
/// impl<S: TaskStore> StoreLayer for CountMarks<S> {
///     type Inner = S;
///     fn inner(&self) -> &S {
///         &self.inner
///     }
///     async fn on_mark(&self, marks: &[Mark]) -> Result<Vec<bool>> {
///         self.marks.fetch_add(marks.len(), Ordering::Relaxed);
///         self.inner.mark(marks).await
///     }
/// }
/// // `CountMarks<S>` is a `TaskStore`: hand it to an engine like any store.
/// ```
///
/// A backend's store is itself the first layer: [`Backend`] stores forward every
/// operation to core's implementation of the contract over their
/// [`Driver`](crate::driver::Driver). `Arc<S>` forwards to `S`. The layers backstop ships
/// are in [`layers`](crate::layers): [`TracingLayer`](crate::layers::TracingLayer) and
/// [`FaultLayer`](crate::layers::FaultLayer).
///
/// # Contract
///
/// - A forwarded operation is the inner store's, with the same arguments and answer,
///   run inside [`around`](Self::around).
/// - An overridden hook replaces the forwarding default, `around` included: call
///   `self.around(…)` from it to keep what `around` does.
/// - A layer never weakens the inner store's contract on its own: what it adds (a
///   delay, an error before the call, a record) is its documented behaviour.
#[async_trait]
pub trait StoreLayer: Send + Sync + 'static {
    /// The store this one wraps.
    type Inner: TaskStore + ?Sized;

    /// The wrapped store.
    fn inner(&self) -> &Self::Inner;

    /// Run around every forwarded operation: `op` is the inner store's call, not yet
    /// started; the default runs it as it is. A layer that does the same for every
    /// operation (a span, latency, an injected error) overrides only this.
    fn around<'a, T: Send + 'a>(
        &'a self,
        call: Call<'a>,
        op: BoxFuture<'a, Result<T>>,
    ) -> BoxFuture<'a, Result<T>> {
        let _ = call;
        op
    }

    /// [`TaskStore::migrate`]; by default forwarded through [`around`](Self::around).
    async fn on_migrate(&self) -> Result<()> {
        self.around(Call::new(Op::Migrate), self.inner().migrate())
            .await
    }

    /// [`TaskStore::migrate_to`]; by default forwarded through [`around`](Self::around).
    async fn on_migrate_to(&self, version: u32) -> Result<()> {
        self.around(Call::new(Op::MigrateTo), self.inner().migrate_to(version))
            .await
    }

    /// [`TaskStore::enqueue`]; by default forwarded through [`around`](Self::around).
    async fn on_enqueue(&self, task: NewTask) -> Result<Enqueued> {
        let event_type = task.event_type().to_owned();
        let call = Call::new(Op::Enqueue).event_type(&event_type);
        self.around(call, self.inner().enqueue(task)).await
    }

    /// [`TaskStore::enqueue_many`]; by default forwarded through [`around`](Self::around).
    async fn on_enqueue_many(&self, tasks: &[NewTask]) -> Result<Vec<Enqueued>> {
        self.around(
            Call::new(Op::EnqueueMany).count(tasks.len()),
            self.inner().enqueue_many(tasks),
        )
        .await
    }

    /// [`TaskStore::claim_by_id`]; by default forwarded through [`around`](Self::around).
    async fn on_claim_by_id(&self, id: TaskId, owner: &Owner) -> Result<Option<Task>> {
        self.around(
            Call::new(Op::ClaimById).id(id),
            self.inner().claim_by_id(id, owner),
        )
        .await
    }

    /// [`TaskStore::claim_batch`]; by default forwarded through [`around`](Self::around).
    async fn on_claim_batch(
        &self,
        owner: &Owner,
        event_types: &[String],
        limit: usize,
    ) -> Result<Vec<Task>> {
        self.around(
            Call::new(Op::ClaimBatch)
                .count(event_types.len())
                .limit(limit),
            self.inner().claim_batch(owner, event_types, limit),
        )
        .await
    }

    /// [`TaskStore::recycle_dead`]; by default forwarded through [`around`](Self::around).
    async fn on_recycle_dead(&self, older_than: Duration, limit: usize) -> Result<Recycled> {
        self.around(
            Call::new(Op::RecycleDead).limit(limit),
            self.inner().recycle_dead(older_than, limit),
        )
        .await
    }

    /// [`TaskStore::heartbeat`]; by default forwarded through [`around`](Self::around).
    async fn on_heartbeat(&self, leases: &[Lease]) -> Result<Vec<bool>> {
        self.around(
            Call::new(Op::Heartbeat).count(leases.len()),
            self.inner().heartbeat(leases),
        )
        .await
    }

    /// [`TaskStore::set_output`]; by default forwarded through [`around`](Self::around).
    async fn on_set_output(&self, lease: Lease, output: &str) -> Result<bool> {
        self.around(
            Call::new(Op::SetOutput).count(1),
            self.inner().set_output(lease, output),
        )
        .await
    }

    /// [`TaskStore::mark`]; by default forwarded through [`around`](Self::around).
    async fn on_mark(&self, marks: &[Mark]) -> Result<Vec<bool>> {
        self.around(
            Call::new(Op::Mark).count(marks.len()),
            self.inner().mark(marks),
        )
        .await
    }

    /// [`TaskStore::mark_and_claim`]; by default forwarded through
    /// [`around`](Self::around).
    async fn on_mark_and_claim(
        &self,
        marks: &[Mark],
        owner: &Owner,
        event_type: &str,
        limit: usize,
    ) -> Result<(Vec<bool>, Vec<Task>)> {
        self.around(
            Call::new(Op::MarkAndClaim).count(marks.len()).limit(limit),
            self.inner().mark_and_claim(marks, owner, event_type, limit),
        )
        .await
    }

    /// [`TaskStore::manual_reset`]; by default forwarded through [`around`](Self::around).
    async fn on_manual_reset(&self, id: TaskId, stuck_after: Duration) -> Result<Task> {
        self.around(
            Call::new(Op::ManualReset).id(id),
            self.inner().manual_reset(id, stuck_after),
        )
        .await
    }

    /// [`TaskStore::cancel`]; by default forwarded through [`around`](Self::around).
    async fn on_cancel(&self, id: TaskId, audit: &Audit) -> Result<Task> {
        self.around(Call::new(Op::Cancel).id(id), self.inner().cancel(id, audit))
            .await
    }

    /// [`TaskStore::edit`]; by default forwarded through [`around`](Self::around).
    async fn on_edit(&self, id: TaskId, edit: &TaskEdit, audit: &Audit) -> Result<Task> {
        self.around(Call::new(Op::Edit), self.inner().edit(id, edit, audit))
            .await
    }

    /// [`TaskStore::delete`]; by default forwarded through [`around`](Self::around).
    async fn on_delete(&self, id: TaskId, audit: &Audit) -> Result<Task> {
        self.around(Call::new(Op::Delete).id(id), self.inner().delete(id, audit))
            .await
    }

    /// [`TaskStore::audit_log`]; by default forwarded through [`around`](Self::around).
    async fn on_audit_log(&self, id: TaskId) -> Result<Vec<AuditEntry>> {
        self.around(Call::new(Op::AuditLog).id(id), self.inner().audit_log(id))
            .await
    }

    /// [`TaskStore::reset`]; by default forwarded through [`around`](Self::around).
    async fn on_reset(&self, id: TaskId, audit: &Audit) -> Result<Task> {
        self.around(Call::new(Op::Reset).id(id), self.inner().reset(id, audit))
            .await
    }

    /// [`TaskStore::reset_matching`]; by default forwarded through [`around`](Self::around).
    async fn on_reset_matching(&self, filter: &TaskFilter, audit: &Audit) -> Result<Vec<Task>> {
        self.around(
            Call::new(Op::ResetMatching).filter(filter),
            self.inner().reset_matching(filter, audit),
        )
        .await
    }

    /// [`TaskStore::get`]; by default forwarded through [`around`](Self::around).
    async fn on_get(&self, id: TaskId) -> Result<Option<Task>> {
        self.around(Call::new(Op::Get).id(id), self.inner().get(id))
            .await
    }

    /// [`TaskStore::list`]; by default forwarded through [`around`](Self::around).
    async fn on_list(&self, filter: &TaskFilter) -> Result<Vec<Task>> {
        self.around(
            Call::new(Op::List).filter(filter),
            self.inner().list(filter),
        )
        .await
    }

    /// [`TaskStore::count_matching`]; by default forwarded through [`around`](Self::around).
    async fn on_count_matching(&self, filter: &TaskFilter) -> Result<u64> {
        self.around(
            Call::new(Op::CountMatching).filter(filter),
            self.inner().count_matching(filter),
        )
        .await
    }

    /// [`TaskStore::stats`]; by default forwarded through [`around`](Self::around).
    async fn on_stats(&self) -> Result<Stats> {
        self.around(Call::new(Op::Stats), self.inner().stats())
            .await
    }

    /// [`TaskStore::backlog`]; by default forwarded through [`around`](Self::around).
    async fn on_backlog(&self) -> Result<Stats> {
        self.around(Call::new(Op::Backlog), self.inner().backlog())
            .await
    }

    /// [`TaskStore::throughput`]; by default forwarded through [`around`](Self::around).
    async fn on_throughput(&self, window: Duration, bucket: Duration) -> Result<Vec<Throughput>> {
        self.around(
            Call::new(Op::Throughput),
            self.inner().throughput(window, bucket),
        )
        .await
    }

    /// [`TaskStore::purge_finished`]; by default forwarded through [`around`](Self::around).
    async fn on_purge_finished(
        &self,
        status: Status,
        older_than: Duration,
        limit: usize,
    ) -> Result<u64> {
        self.around(
            Call::new(Op::PurgeFinished).limit(limit),
            self.inner().purge_finished(status, older_than, limit),
        )
        .await
    }

    /// [`TaskStore::purge_audit`]; by default forwarded through [`around`](Self::around).
    async fn on_purge_audit(&self, older_than: Duration, limit: usize) -> Result<u64> {
        self.around(
            Call::new(Op::PurgeAudit).limit(limit),
            self.inner().purge_audit(older_than, limit),
        )
        .await
    }

    /// [`TaskStore::purge_event_types`]; by default forwarded through [`around`](Self::around).
    async fn on_purge_event_types(&self, older_than: Duration, limit: usize) -> Result<u64> {
        self.around(
            Call::new(Op::PurgeEventTypes).limit(limit),
            self.inner().purge_event_types(older_than, limit),
        )
        .await
    }

    /// [`TaskStore::purge_barrier`]; by default forwarded through [`around`](Self::around).
    async fn on_purge_barrier(&self, older_than: Duration, limit: usize) -> Result<u64> {
        self.around(
            Call::new(Op::PurgeBarrier).limit(limit),
            self.inner().purge_barrier(older_than, limit),
        )
        .await
    }

    /// [`TaskStore::barrier_records`]; by default forwarded through [`around`](Self::around).
    async fn on_barrier_records(&self, gid: &str) -> Result<Vec<BarrierRecord>> {
        self.around(
            Call::new(Op::BarrierRecords),
            self.inner().barrier_records(gid),
        )
        .await
    }

    /// [`TaskStore::start_saga`]; by default forwarded through [`around`](Self::around).
    async fn on_start_saga(&self, start: &SagaStart) -> Result<SagaStarted> {
        self.around(
            Call::new(Op::StartSaga).count(start.first_tasks().len()),
            self.inner().start_saga(start),
        )
        .await
    }

    /// [`TaskStore::saga`]; by default forwarded through [`around`](Self::around).
    async fn on_saga(&self, name: &str, key: &str) -> Result<Option<Saga>> {
        self.around(Call::new(Op::Saga), self.inner().saga(name, key))
            .await
    }

    /// [`TaskStore::saga_step_many`]; by default forwarded through [`around`](Self::around).
    async fn on_saga_step_many(
        &self,
        def: &SagaDef,
        reports: &[StepReport],
    ) -> Result<Vec<Result<StepApplied>>> {
        let call = Call::new(Op::SagaStep).count(reports.len());
        self.around(call, self.inner().saga_step_many(def, reports))
            .await
    }

    /// [`TaskStore::saga_steps`]; by default forwarded through [`around`](Self::around).
    async fn on_saga_steps(&self, id: SagaId) -> Result<Vec<SagaStepRecord>> {
        self.around(Call::new(Op::SagaSteps), self.inner().saga_steps(id))
            .await
    }

    /// [`TaskStore::saga_by_id`]; by default forwarded through [`around`](Self::around).
    async fn on_saga_by_id(&self, id: SagaId) -> Result<Option<Saga>> {
        self.around(Call::new(Op::SagaById), self.inner().saga_by_id(id))
            .await
    }

    /// [`TaskStore::sagas`]; by default forwarded through [`around`](Self::around).
    async fn on_sagas(&self, filter: &SagaFilter) -> Result<Vec<Saga>> {
        self.around(Call::new(Op::Sagas), self.inner().sagas(filter))
            .await
    }

    /// [`TaskStore::command_saga`]; by default forwarded through [`around`](Self::around).
    async fn on_command_saga(
        &self,
        id: SagaId,
        command: SagaCommand,
        audit: &Audit,
    ) -> Result<Saga> {
        self.around(
            Call::new(Op::CommandSaga),
            self.inner().command_saga(id, command, audit),
        )
        .await
    }

    /// [`TaskStore::nudge_saga`]; by default forwarded through [`around`](Self::around).
    async fn on_nudge_saga(
        &self,
        def: &SagaDef,
        id: SagaId,
        key: &str,
        audit: Option<&Audit>,
    ) -> Result<Option<StepApplied>> {
        self.around(
            Call::new(Op::NudgeSaga),
            self.inner().nudge_saga(def, id, key, audit),
        )
        .await
    }

    /// [`TaskStore::saga_backlog`]; by default forwarded through [`around`](Self::around).
    async fn on_saga_backlog(&self) -> Result<Vec<SagaCount>> {
        self.around(Call::new(Op::SagaBacklog), self.inner().saga_backlog())
            .await
    }

    /// [`TaskStore::saga_log`]; by default forwarded through [`around`](Self::around).
    async fn on_saga_log(&self, id: SagaId) -> Result<Vec<SagaLogEntry>> {
        self.around(Call::new(Op::SagaLog), self.inner().saga_log(id))
            .await
    }

    /// [`TaskStore::delete_finished`]; by default forwarded through [`around`](Self::around).
    async fn on_delete_finished(&self, status: Status, ids: &[TaskId]) -> Result<u64> {
        self.around(
            Call::new(Op::DeleteFinished).count(ids.len()),
            self.inner().delete_finished(status, ids),
        )
        .await
    }

    /// [`TaskStore::release_order_keys`]; by default forwarded through [`around`](Self::around).
    async fn on_release_order_keys(&self, keys: &[String]) -> Result<Vec<TaskId>> {
        self.around(
            Call::new(Op::ReleaseOrderKeys).count(keys.len()),
            self.inner().release_order_keys(keys),
        )
        .await
    }

    /// [`TaskStore::order_keys`]; by default forwarded through [`around`](Self::around).
    async fn on_order_keys(&self, after: Option<&str>, limit: usize) -> Result<Vec<String>> {
        self.around(
            Call::new(Op::OrderKeys).limit(limit),
            self.inner().order_keys(after, limit),
        )
        .await
    }

    /// [`TaskStore::register_event_types`]; by default forwarded through [`around`](Self::around).
    async fn on_register_event_types(&self, event_types: &[String]) -> Result<()> {
        self.around(
            Call::new(Op::RegisterEventTypes).count(event_types.len()),
            self.inner().register_event_types(event_types),
        )
        .await
    }

    /// [`TaskStore::event_types`]; by default forwarded through [`around`](Self::around).
    async fn on_event_types(&self) -> Result<Vec<EventTypeSeen>> {
        self.around(Call::new(Op::EventTypes), self.inner().event_types())
            .await
    }

    /// [`TaskStore::set_queue`]; by default forwarded through [`around`](Self::around).
    async fn on_set_queue(
        &self,
        event_type: &str,
        change: QueueChange,
        audit: &Audit,
    ) -> Result<Queue> {
        self.around(
            Call::new(Op::SetQueue),
            self.inner().set_queue(event_type, change, audit),
        )
        .await
    }

    /// [`TaskStore::queues`]; by default forwarded through [`around`](Self::around).
    async fn on_queues(&self) -> Result<Vec<Queue>> {
        self.around(Call::new(Op::Queues), self.inner().queues())
            .await
    }

    /// [`TaskStore::queue_log`]; by default forwarded through [`around`](Self::around).
    async fn on_queue_log(&self, event_type: &str) -> Result<Vec<QueueLogEntry>> {
        self.around(Call::new(Op::QueueLog), self.inner().queue_log(event_type))
            .await
    }
}

/// Every layer is a store: each operation is the layer's (its override, or the
/// forwarding default).
#[async_trait]
impl<L: StoreLayer + ?Sized> TaskStore for L {
    async fn migrate(&self) -> Result<()> {
        StoreLayer::on_migrate(self).await
    }

    async fn migrate_to(&self, version: u32) -> Result<()> {
        StoreLayer::on_migrate_to(self, version).await
    }

    async fn enqueue(&self, task: NewTask) -> Result<Enqueued> {
        StoreLayer::on_enqueue(self, task).await
    }

    async fn enqueue_many(&self, tasks: &[NewTask]) -> Result<Vec<Enqueued>> {
        StoreLayer::on_enqueue_many(self, tasks).await
    }

    async fn claim_by_id(&self, id: TaskId, owner: &Owner) -> Result<Option<Task>> {
        StoreLayer::on_claim_by_id(self, id, owner).await
    }

    async fn claim_batch(
        &self,
        owner: &Owner,
        event_types: &[String],
        limit: usize,
    ) -> Result<Vec<Task>> {
        StoreLayer::on_claim_batch(self, owner, event_types, limit).await
    }

    async fn recycle_dead(&self, older_than: Duration, limit: usize) -> Result<Recycled> {
        StoreLayer::on_recycle_dead(self, older_than, limit).await
    }

    async fn heartbeat(&self, leases: &[Lease]) -> Result<Vec<bool>> {
        StoreLayer::on_heartbeat(self, leases).await
    }

    async fn set_output(&self, lease: Lease, output: &str) -> Result<bool> {
        StoreLayer::on_set_output(self, lease, output).await
    }

    async fn mark(&self, marks: &[Mark]) -> Result<Vec<bool>> {
        StoreLayer::on_mark(self, marks).await
    }

    async fn mark_and_claim(
        &self,
        marks: &[Mark],
        owner: &Owner,
        event_type: &str,
        limit: usize,
    ) -> Result<(Vec<bool>, Vec<Task>)> {
        StoreLayer::on_mark_and_claim(self, marks, owner, event_type, limit).await
    }

    async fn manual_reset(&self, id: TaskId, stuck_after: Duration) -> Result<Task> {
        StoreLayer::on_manual_reset(self, id, stuck_after).await
    }

    async fn cancel(&self, id: TaskId, audit: &Audit) -> Result<Task> {
        StoreLayer::on_cancel(self, id, audit).await
    }

    async fn edit(&self, id: TaskId, edit: &TaskEdit, audit: &Audit) -> Result<Task> {
        StoreLayer::on_edit(self, id, edit, audit).await
    }

    async fn delete(&self, id: TaskId, audit: &Audit) -> Result<Task> {
        StoreLayer::on_delete(self, id, audit).await
    }

    async fn audit_log(&self, id: TaskId) -> Result<Vec<AuditEntry>> {
        StoreLayer::on_audit_log(self, id).await
    }

    async fn reset(&self, id: TaskId, audit: &Audit) -> Result<Task> {
        StoreLayer::on_reset(self, id, audit).await
    }

    async fn reset_matching(&self, filter: &TaskFilter, audit: &Audit) -> Result<Vec<Task>> {
        StoreLayer::on_reset_matching(self, filter, audit).await
    }

    async fn get(&self, id: TaskId) -> Result<Option<Task>> {
        StoreLayer::on_get(self, id).await
    }

    async fn list(&self, filter: &TaskFilter) -> Result<Vec<Task>> {
        StoreLayer::on_list(self, filter).await
    }

    async fn count_matching(&self, filter: &TaskFilter) -> Result<u64> {
        StoreLayer::on_count_matching(self, filter).await
    }
    async fn stats(&self) -> Result<Stats> {
        StoreLayer::on_stats(self).await
    }

    async fn backlog(&self) -> Result<Stats> {
        StoreLayer::on_backlog(self).await
    }

    async fn throughput(&self, window: Duration, bucket: Duration) -> Result<Vec<Throughput>> {
        StoreLayer::on_throughput(self, window, bucket).await
    }

    async fn purge_finished(
        &self,
        status: Status,
        older_than: Duration,
        limit: usize,
    ) -> Result<u64> {
        StoreLayer::on_purge_finished(self, status, older_than, limit).await
    }

    async fn purge_audit(&self, older_than: Duration, limit: usize) -> Result<u64> {
        StoreLayer::on_purge_audit(self, older_than, limit).await
    }

    async fn purge_event_types(&self, older_than: Duration, limit: usize) -> Result<u64> {
        StoreLayer::on_purge_event_types(self, older_than, limit).await
    }

    async fn purge_barrier(&self, older_than: Duration, limit: usize) -> Result<u64> {
        StoreLayer::on_purge_barrier(self, older_than, limit).await
    }

    async fn barrier_records(&self, gid: &str) -> Result<Vec<BarrierRecord>> {
        StoreLayer::on_barrier_records(self, gid).await
    }

    async fn start_saga(&self, start: &SagaStart) -> Result<SagaStarted> {
        StoreLayer::on_start_saga(self, start).await
    }

    async fn saga(&self, name: &str, key: &str) -> Result<Option<Saga>> {
        StoreLayer::on_saga(self, name, key).await
    }

    async fn saga_step_many(
        &self,
        def: &SagaDef,
        reports: &[StepReport],
    ) -> Result<Vec<Result<StepApplied>>> {
        StoreLayer::on_saga_step_many(self, def, reports).await
    }

    async fn saga_steps(&self, id: SagaId) -> Result<Vec<SagaStepRecord>> {
        StoreLayer::on_saga_steps(self, id).await
    }

    async fn saga_by_id(&self, id: SagaId) -> Result<Option<Saga>> {
        StoreLayer::on_saga_by_id(self, id).await
    }

    async fn sagas(&self, filter: &SagaFilter) -> Result<Vec<Saga>> {
        StoreLayer::on_sagas(self, filter).await
    }

    async fn command_saga(&self, id: SagaId, command: SagaCommand, audit: &Audit) -> Result<Saga> {
        StoreLayer::on_command_saga(self, id, command, audit).await
    }

    async fn nudge_saga(
        &self,
        def: &SagaDef,
        id: SagaId,
        key: &str,
        audit: Option<&Audit>,
    ) -> Result<Option<StepApplied>> {
        StoreLayer::on_nudge_saga(self, def, id, key, audit).await
    }

    async fn saga_log(&self, id: SagaId) -> Result<Vec<SagaLogEntry>> {
        StoreLayer::on_saga_log(self, id).await
    }

    async fn saga_backlog(&self) -> Result<Vec<SagaCount>> {
        StoreLayer::on_saga_backlog(self).await
    }

    async fn delete_finished(&self, status: Status, ids: &[TaskId]) -> Result<u64> {
        StoreLayer::on_delete_finished(self, status, ids).await
    }

    async fn release_order_keys(&self, keys: &[String]) -> Result<Vec<TaskId>> {
        StoreLayer::on_release_order_keys(self, keys).await
    }

    async fn order_keys(&self, after: Option<&str>, limit: usize) -> Result<Vec<String>> {
        StoreLayer::on_order_keys(self, after, limit).await
    }

    async fn register_event_types(&self, event_types: &[String]) -> Result<()> {
        StoreLayer::on_register_event_types(self, event_types).await
    }

    async fn event_types(&self) -> Result<Vec<EventTypeSeen>> {
        StoreLayer::on_event_types(self).await
    }

    async fn set_queue(
        &self,
        event_type: &str,
        change: QueueChange,
        audit: &Audit,
    ) -> Result<Queue> {
        StoreLayer::on_set_queue(self, event_type, change, audit).await
    }

    async fn queues(&self) -> Result<Vec<Queue>> {
        StoreLayer::on_queues(self).await
    }

    async fn queue_log(&self, event_type: &str) -> Result<Vec<QueueLogEntry>> {
        StoreLayer::on_queue_log(self, event_type).await
    }
}

/// `Arc<S>` forwards every operation to `S`.
impl<S: TaskStore + ?Sized> StoreLayer for std::sync::Arc<S> {
    type Inner = S;
    fn inner(&self) -> &S {
        self
    }
}

/// A backend's store forwards every operation to core's implementation of the contract
/// over its driver.
impl<B: Backend + ?Sized> StoreLayer for B {
    type Inner = dyn Driver;
    fn inner(&self) -> &dyn Driver {
        self.driver()
    }
}

/// Makes a layered store of a store (OpenDAL's `Layer`): `store.layer(TracingLayer)`
/// (see [`TaskStoreExt::layer`](crate::TaskStoreExt::layer)).
pub trait Layer<S: TaskStore> {
    /// The layered store.
    type Store: TaskStore;

    /// Wrap `inner`.
    fn layer(&self, inner: S) -> Self::Store;
}
