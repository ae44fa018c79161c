//! The [`TaskStore`] trait: the contract every backend honours and the conformance suite
//! (`backstop-testkit`) checks line by line.

use std::time::Duration;

use async_trait::async_trait;

use crate::error::Result;
use crate::model::{
    Audit, AuditEntry, BarrierRecord, Enqueued, EventTypeSeen, Lease, Mark, NewTask, Owner, Queue,
    QueueChange, QueueLogEntry, Recycled, Saga, SagaCommand, SagaCount, SagaDef, SagaFilter,
    SagaId, SagaLogEntry, SagaStart, SagaStarted, SagaStepRecord, Stats, Status, StepApplied,
    StepReport, Task, TaskEdit, TaskFilter, TaskId, Throughput,
};

mod answers;
mod driven;
mod layer;

pub use layer::{Call, Layer, Op, StoreLayer};

/// Storage of tasks: the local message table.
///
/// # Contract
///
/// Every implementation, whatever its database, behaves as follows; each line is a case
/// in `backstop_testkit`. Every backend's store gets this trait from core, implemented
/// once over the backend's [`Driver`](crate::driver::Driver) (see the
/// [`driver`](crate::driver) module), so the lines below that core enforces (validation,
/// empty input, order, errors, retries) hold for every backend by construction; the
/// others are the SQL each driver runs.
///
/// - **Validation first.** Bad input (see [`NewTask::validate`] and the limits in
///   [`limits`](crate::limits)) is refused with [`ErrorKind::InvalidInput`] before anything
///   is written. A bad table name is refused with [`ErrorKind::Config`] when the store is
///   opened.
/// - **Database time.** Every timestamp written and every "is it due / is it old" test uses
///   the database's clock, never the caller's.
/// - **Statuses.** `0` pending, `1` succeeded, `2` failed (terminal), `3` running. Only a
///   claim moves a task to running; only a mark with the current lease moves it out.
/// - **Fencing.** Every claim increments `attempts` and `lease`. Every change to a running
///   task ([`mark`](Self::mark), [`heartbeat`](Self::heartbeat)) names a [`Lease`] and
///   applies only when the task is still running under that lease; otherwise it changes
///   nothing and reports `false`. A recycled worker can never overwrite its successor.
/// - **Atomic claims.** A task is claimed by at most one caller per claim, however many
///   connections, processes or hosts race for it.
/// - **Errors** carry the operation, a kind, and `is_temporary()` for transient database
///   failures (busy, lost connection), which callers may retry. An operation the database
///   rolled back because of a concurrent transaction (deadlock, serialization failure,
///   lock wait timeout) is run again by the store itself
///   ([`StoreConfig::contention_retries`](crate::StoreConfig::contention_retries)); if it
///   still fails, its [`ErrorKind::Contention`](crate::ErrorKind::Contention) error is
///   [persistent](crate::Error::is_persistent), not temporary.
///
/// The trait is object safe: `Arc<dyn TaskStore>` works. Conveniences built on these
/// methods ([`mark_success`](TaskStoreExt::mark_success) and friends) live in
/// [`TaskStoreExt`], so no wrapper can bypass them. A wrapper implements [`StoreLayer`]
/// instead of this trait: it overrides what it changes and the rest is forwarded.
///
/// [`ErrorKind::InvalidInput`]: crate::ErrorKind::InvalidInput
/// [`ErrorKind::Config`]: crate::ErrorKind::Config
#[async_trait]
pub trait TaskStore: Send + Sync + 'static {
    /// Bring the schema (the task table, its indexes, the inbox and audit tables) to the
    /// newest version this release knows, applying the numbered migrations it lacks.
    ///
    /// - Idempotent: running it again (or from several instances at once) changes
    ///   nothing; one instance applies, under a lock, and the others wait for it.
    /// - Each migration applied is recorded in the version table `{table}_migrations`.
    ///   A table made before versioning is adopted as it stands and upgraded.
    /// - A schema migrated by a newer release is left as it is (with a warning): newer
    ///   migrations only add, so this release keeps working on it.
    /// - Indexes: the claim order per event type `(event_type, priority, next_run_at, id)`
    ///   of pending tasks, recycling and purging `(status, updated_at)`, and the unique
    ///   `(biz_key, event_type, dedup_slot)`.
    ///
    /// The script a DBA can review or apply by hand is each backend's `ddl()`.
    async fn migrate(&self) -> Result<()>;

    /// Apply the migrations up to schema `version` only (1 is the first), for tests of
    /// an upgrade and for staged rollouts. The store's other operations need the newest
    /// version ([`migrate`](Self::migrate)).
    ///
    /// - `InvalidInput` for a version this release does not know, writing nothing.
    /// - A `version` at or below the one applied changes nothing (no downgrades).
    async fn migrate_to(&self, version: u32) -> Result<()>;

    /// Insert a task in its own transaction.
    ///
    /// - The new task is pending, `attempts = 0`, `lease = 0`, no owner, due at
    ///   database-now plus the task's delay (or at its `run_at`), with its priority and
    ///   retry policy.
    /// - Idempotent on `(event_type, biz_key)` under the task's [`Dedup`](crate::Dedup)
    ///   rule: when the task holding that key is a duplicate by the rule (by default:
    ///   it is pending or running), nothing is written and its id and status are
    ///   returned with `created = false` — its payload replaced if the task asked for it
    ///   ([`NewTask::replace_pending`]) and it is still pending. Otherwise (say it
    ///   succeeded) a new task is inserted and the finished one keeps its row.
    /// - Of concurrent enqueues of one key, at most one inserts; the others are its
    ///   duplicates.
    /// - Invalid input is refused with `InvalidInput` and nothing is written.
    ///
    /// Backends also offer a *transactional* enqueue on their native transaction, so the
    /// task commits or rolls back with the caller's business rows.
    async fn enqueue(&self, task: NewTask) -> Result<Enqueued>;

    /// Insert many tasks in one transaction of the store's own: all or none.
    ///
    /// - Each task is answered, in the batch's order, as [`enqueue`](Self::enqueue)
    ///   answers it were the tasks enqueued one after another in one transaction: a task
    ///   whose `(event_type, biz_key)` an earlier task of the batch already holds is its
    ///   duplicate (`created = false`, the earlier task's id, or its payload replaced
    ///   when the later one asks for it).
    /// - Validation first: when any task is invalid, or there are more than
    ///   [`limits::MAX_ENQUEUE_MANY`](crate::limits::MAX_ENQUEUE_MANY), the whole batch
    ///   is refused with `InvalidInput` (naming the task by its place) and nothing is
    ///   written. An empty batch writes nothing and answers nothing.
    /// - Atomic: an error leaves nothing of the batch behind.
    /// - Tasks without an order key whose key no other task of the batch names go in
    ///   multi-row inserts of up to [`tx::MAX_INSERT_ROWS`](crate::tx::MAX_INSERT_ROWS)
    ///   rows (see [`EnqueueBatch`](crate::driver::EnqueueBatch)); the others one by one,
    ///   on the same transaction.
    ///
    /// Backends also offer it on the caller's transaction
    /// ([`Transactional::enqueue_many_in`](crate::Transactional::enqueue_many_in)).
    async fn enqueue_many(&self, tasks: &[NewTask]) -> Result<Vec<Enqueued>>;

    /// Claim one task by id: pending → running, only if it is due.
    ///
    /// - Applies only when the task is pending, `next_run_at <= now` and its event type
    ///   is neither paused nor limited ([`set_queue`](Self::set_queue)); returns `None`
    ///   otherwise (missing, not due, paused, limited, or in any other status).
    /// - On success: status running, `owner` set, `attempts + 1`, `lease + 1`,
    ///   `updated_at = now`; the returned task shows the new values.
    /// - Of any number of concurrent callers, exactly one wins.
    async fn claim_by_id(&self, id: TaskId, owner: &Owner) -> Result<Option<Task>>;

    /// Claim up to `limit` due pending tasks of the given event types.
    ///
    /// - Due pending tasks only (`next_run_at <= now`), of `event_types` only, none of a
    ///   paused type ([`set_queue`](Self::set_queue)); an empty list or `limit = 0`
    ///   claims nothing.
    /// - In claim order: the lowest [`Priority`](crate::Priority) number first, then the
    ///   earliest due, then the oldest: `(priority, next_run_at, id)`; the result is in
    ///   that order. (The tasks of types with a concurrency or rate limit are claimed
    ///   after the others', each type's in its own transaction, and follow them in the
    ///   result.)
    /// - A type with a global concurrency limit ([`QueueChange::Concurrency`]) has at
    ///   most its limit of tasks running once the claim commits: the claim locks the
    ///   type's queue row, counts its running tasks, and takes at most the room left.
    /// - A type with a rate limit ([`QueueChange::Rate`]) has at most `starts` tasks
    ///   claimed by this method in any `per`-long interval of database time: the claim
    ///   (under the same lock) sums the claims of the window in the ledger, takes at most
    ///   the rest, and records what it took.
    /// - Each claimed task is changed as by [`claim_by_id`](Self::claim_by_id).
    /// - Concurrent callers never claim the same task; none claims more than `limit`.
    /// - `limit` is at most [`limits::MAX_BATCH`](crate::limits::MAX_BATCH); at most
    ///   [`limits::MAX_EVENT_TYPES`](crate::limits::MAX_EVENT_TYPES) event types, each
    ///   valid (a type named twice counts once).
    /// - The cost of a claim does not grow with the backlog of due tasks, of these event
    ///   types or of others: each type's due tasks of each priority level are read in
    ///   order, up to the limit.
    async fn claim_batch(
        &self,
        owner: &Owner,
        event_types: &[String],
        limit: usize,
    ) -> Result<Vec<Task>>;

    /// Recover up to `limit` running tasks whose `updated_at` is older than `older_than`
    /// (their owner stopped heartbeating): the dead-worker sweep.
    ///
    /// - Back to pending (owner cleared, due at once) when `attempts < max_attempts`;
    ///   otherwise failed, with a `last_error` that says the last attempt died.
    /// - Re-checks `status = running` and the age in the same statement: a task that
    ///   completed or was heartbeated meanwhile is never touched.
    /// - Oldest `updated_at` first.
    /// - A dead task whose row another transaction holds is either waited for or passed
    ///   over; one passed over is counted in [`Recycled::passed_over`] (never lost: the
    ///   caller sweeps again).
    async fn recycle_dead(&self, older_than: Duration, limit: usize) -> Result<Recycled>;

    /// Refresh `updated_at` of running tasks still held under these leases, so a long
    /// task is never recycled while its owner lives.
    ///
    /// - Returns one flag per lease, in order: `true` when refreshed, `false` when the
    ///   lease is no longer current (the task was recycled, reset or completed).
    /// - Never waits for another transaction's lock on a row (where the backend has
    ///   row locks): a lease whose row another writer holds at the moment (the holder's
    ///   own mark or saga report under way, an operator's command) is answered from
    ///   what was committed, `true` when the task runs under it, and is refreshed by a
    ///   later heartbeat. One held row never holds up the refresh of the others.
    async fn heartbeat(&self, leases: &[Lease]) -> Result<Vec<bool>>;

    /// Record `output` (JSON text) as the running task's output, fenced by its lease:
    /// what [`Context::record_output`](crate::Context::record_output) writes.
    ///
    /// - Applies only while the task runs under that exact lease; returns `true` then,
    ///   `false` otherwise (recycled, reset, cancelled, completed), and changes nothing.
    /// - Replaces an output recorded before (by this attempt or an earlier one). Leaves
    ///   every other column alone: status, attempts, lease, `updated_at`.
    /// - `output` must be valid JSON of at most
    ///   [`MAX_OUTPUT_BYTES`](crate::limits::MAX_OUTPUT_BYTES); otherwise
    ///   `InvalidInput` naming `output`, and nothing is written.
    async fn set_output(&self, lease: Lease, output: &str) -> Result<bool>;

    /// Apply state changes to running tasks, each fenced by its lease.
    ///
    /// - Each mark applies only when its task is running with that exact lease; otherwise
    ///   it changes nothing. Returns one flag per mark, in order: `true` when applied.
    /// - [`Success`](crate::MarkAction::Success): status succeeded, owner kept (who did
    ///   it), `last_error` cleared.
    /// - [`Retry`](crate::MarkAction::Retry): status pending, owner cleared,
    ///   `next_run_at = now + delay` exactly, `last_error` set (cut to
    ///   [`MAX_ERROR_BYTES`](crate::limits::MAX_ERROR_BYTES)); when the task has no
    ///   attempts left (`attempts >= max_attempts`) it becomes failed instead.
    /// - [`Fail`](crate::MarkAction::Fail): status failed, owner cleared, `last_error` set.
    /// - [`Snooze`](crate::MarkAction::Snooze): while the task's snooze count is below
    ///   `max`: status pending, owner cleared, `attempts − 1`, `next_run_at = now +
    ///   delay` exactly, the count + 1, `last_error` kept; at `max`, as a retry with
    ///   `error` (the count unchanged).
    /// - [`Cancel`](crate::MarkAction::Cancel): status cancelled, owner cleared,
    ///   `last_error` the reason (cut as an error is), `attempts` unchanged.
    /// - [`Release`](crate::MarkAction::Release): status pending, owner cleared,
    ///   `attempts − 1` (the claim's increment is given back), `next_run_at` unchanged.
    /// - Every applied mark sets `updated_at = now`. Marks of one call apply in order, in
    ///   one transaction where the backend allows.
    async fn mark(&self, marks: &[Mark]) -> Result<Vec<bool>>;

    /// Apply `marks` as [`mark`](Self::mark) does, then claim up to `limit` due tasks
    /// of `event_type` for `owner` as [`claim_batch`](Self::claim_batch) does of that
    /// one type: the hand-over of a limited type's slots from the tasks that finished to
    /// the next, which the engine uses when it records outcomes.
    ///
    /// - Returns one flag per mark, as `mark` does, and the tasks claimed, in claim order.
    /// - When `event_type` has a concurrency or rate limit, the marks and the claim are
    ///   one transaction, committed together or not at all, and the claim counts none of
    ///   the marked tasks as running. (One exception: a type whose limits changed from a
    ///   concurrency limit alone to one that takes the queue's row since its last
    ///   hand-over on this store may be handed over as the last one was, and find it
    ///   out with the marks; then the marks commit and the claim follows as under
    ///   "Otherwise" below. PostgreSQL does so to send a hand-over in one flight.)
    /// - A type whose only limit is its concurrency (no rate, not partitioned): the
    ///   claim takes at most as many tasks as this call's applied marks of the type took
    ///   out of running, and at most the room its own count sees. It never raises the
    ///   type's running count, so it takes no turn on the queue's row: the hand-overs of
    ///   several instances run side by side. The room beyond what the marks freed (a
    ///   raised limit) is a batch claim's.
    /// - A type with a rate limit, or partitioned: the transaction holds the queue's row
    ///   from before the marks to its commit, and the claim takes the room as
    ///   `claim_batch` does, before any other claim of the type can.
    /// - Otherwise (no limit, or none as the call learns under that lock), as `mark`
    ///   then `claim_batch`: the marks commit first; a claim that then fails answers no
    ///   tasks rather than an error, since the marks it follows are applied.
    /// - Checks its input as `mark` and `claim_batch` do, before anything is written: at
    ///   most [`MAX_LEASES`](crate::limits::MAX_LEASES) marks, a valid `event_type`,
    ///   `limit` at most [`MAX_BATCH`](crate::limits::MAX_BATCH). No marks is a claim
    ///   alone; a `limit` of 0 is a mark alone.
    async fn mark_and_claim(
        &self,
        marks: &[Mark],
        owner: &Owner,
        event_type: &str,
        limit: usize,
    ) -> Result<(Vec<bool>, Vec<Task>)>;

    /// An operator's retry: failed → pending with `attempts = 0` (and `snoozes = 0`),
    /// due now, `last_error` kept for the record.
    ///
    /// - Also resets a *stuck* running task: one whose `updated_at` is older than
    ///   `stuck_after` (its owner is gone). A running task with a live owner is never reset.
    ///   The reset is announced as [`cancel`](Self::cancel)'s is, so a holder that was
    ///   alive after all hears its lease is gone.
    /// - Returns the task as reset, read atomically with the reset: never the state of a
    ///   claim that followed it (the reset task is due at once, so a poller may take it
    ///   right away). `NotFound` when there is no such task; `Conflict` when it is
    ///   pending, succeeded, or running with a live owner (nothing changes).
    async fn manual_reset(&self, id: TaskId, stuck_after: Duration) -> Result<Task>;

    /// An operator's cancel: a pending, waiting or running task becomes cancelled, a
    /// terminal state of its own; it is never claimed again (and the next task of its
    /// order key, if any, goes on).
    ///
    /// - Fenced against a concurrent claim: the change and its status check are one
    ///   statement (or one locking transaction), so a claim either comes before (and the
    ///   running task is cancelled) or finds the task cancelled.
    /// - A running task's lease is bumped: its holder's heartbeats and completion are
    ///   refused, so its outcome is never applied. The handler is not interrupted: its
    ///   engine tells it through [`Context::cancelled`](crate::Context::cancelled) and
    ///   [`lease_lost`](crate::lease_lost) (cooperative cancel) within a round trip when
    ///   the store announces it to the engine's notifier ([`Wake::Revoked`](crate::Wake::Revoked):
    ///   a PostgreSQL store with `NOTIFY`, any store given
    ///   [`StoreConfig::notifier`](crate::StoreConfig::notifier)), else at the engine's
    ///   next heartbeat. The announcement follows every cancel, after its commit.
    /// - The audit log gets an entry (`cancel`, operator, reason, database time) in the
    ///   same transaction.
    /// - Returns the task as cancelled. `NotFound` when there is no such task, `Conflict`
    ///   when it is succeeded, failed or already cancelled; `InvalidInput` for a bad
    ///   audit. Nothing is written then.
    async fn cancel(&self, id: TaskId, audit: &Audit) -> Result<Task>;

    /// An operator's edit of a task that waits to run ([`TaskEdit`]): run it now,
    /// reschedule it, replace its payload, or both.
    ///
    /// - Applies to a pending or waiting task only; the change and its status check are
    ///   one statement, so a claim either comes first (and the edit is refused) or
    ///   finds the task edited. A new due time is database time: now, now plus a delay,
    ///   or the time given (now when it is past); `attempts`, `lease` and the rest are
    ///   kept; `updated_at = now`.
    /// - The audit log gets an entry (the edit's [`action`](TaskEdit::action):
    ///   `run_now`, `reschedule` or `edit`; operator, reason) in the same transaction.
    /// - Returns the task as edited. `NotFound` when there is no such task, `Conflict`
    ///   when it is running or finished, `InvalidInput` for an edit that changes
    ///   nothing, a payload that is not JSON or is over the store's limit, a delay past
    ///   [`MAX_INTERVAL`](crate::limits::MAX_INTERVAL), or a bad audit. Nothing is
    ///   written then.
    async fn edit(&self, id: TaskId, edit: &TaskEdit, audit: &Audit) -> Result<Task>;

    /// An operator's delete: removes a task that is not running (cancel it first), and
    /// records it in the audit log in the same transaction. Returns the task as it was.
    /// `NotFound` when there is no such task, `Conflict` when it is running,
    /// `InvalidInput` for a bad audit; nothing is written then.
    async fn delete(&self, id: TaskId, audit: &Audit) -> Result<Task>;

    /// The audit log of task `id` (operators' changes), oldest first; kept after the task
    /// is deleted.
    async fn audit_log(&self, id: TaskId) -> Result<Vec<AuditEntry>>;

    /// An operator's retry of one task: failed or cancelled → pending with
    /// `attempts = 0` and `snoozes = 0`, due now, owner cleared, `last_error` kept for the record; audited
    /// in the same transaction. A task with an order key goes back in line: pending if
    /// it is first (as a parked task that blocks its key is), else waiting. Needs no engine setting: a running task is never reset
    /// here (the dead-worker sweep recycles those whose owner died).
    ///
    /// Returns the task as reset. `NotFound` when there is no such task, `Conflict` when
    /// it is pending, running or succeeded; nothing is written then.
    async fn reset(&self, id: TaskId, audit: &Audit) -> Result<Task>;

    /// Reset every failed or cancelled task matching `filter`, at most `filter.limit` per
    /// call (page through with more calls), in id order. Each task is reset atomically
    /// with its status checked again (the filter's status, or failed or cancelled), so
    /// two operators resetting the same filter at once reset each task once: the one
    /// that comes second finds it pending and skips it. Returns the tasks this call
    /// reset; each has an audit entry. `InvalidInput` when the filter asks for another
    /// status.
    async fn reset_matching(&self, filter: &TaskFilter, audit: &Audit) -> Result<Vec<Task>>;

    /// One task by id, or `None`.
    async fn get(&self, id: TaskId) -> Result<Option<Task>>;

    /// Tasks matching `filter`, in id order (see [`TaskFilter`]).
    async fn list(&self, filter: &TaskFilter) -> Result<Vec<Task>>;

    /// How many tasks match `filter`: the tasks [`list`](Self::list) would page through
    /// (every condition of the filter; not its `limit`), for an operator's "N tasks
    /// match" before a bulk action.
    ///
    /// - Counted up to [`MAX_COUNT`](crate::limits::MAX_COUNT): a count at the cap means
    ///   that many or more, and the cost of a count is bounded by the cap whatever the
    ///   table holds. Not for a loop: read [`backlog`](Self::backlog) there.
    /// - The filter is checked as `list` checks it: `InvalidInput` for one it refuses.
    async fn count_matching(&self, filter: &TaskFilter) -> Result<u64>;

    /// Counts per status and event type, and the age of the oldest due pending task.
    /// Counts every row (the succeeded ones retained too): for an operator's overview,
    /// not for a loop; see [`backlog`](Self::backlog).
    async fn stats(&self) -> Result<Stats>;

    /// The backlog: counts per event type of every status but succeeded (pending,
    /// running, failed, cancelled), and the age of the oldest due pending task. Read
    /// through the status indexes, so its cost follows the backlog, not the succeeded
    /// rows retained (10 million cost what none do). `count(Succeeded)` is 0 here.
    async fn backlog(&self) -> Result<Stats>;

    /// Tasks finished (succeeded, or failed for good) in the last `window` of database
    /// time, counted per event type, status and `bucket` (0 the most recent) — a console's
    /// throughput chart. Only non-zero counts are returned, ordered by event type, status
    /// and bucket. A task counts where its `updated_at` falls, so one reset and finished
    /// again counts once, at its last finish. Read through the `(status, updated_at)`
    /// index from the newest, at most
    /// [`MAX_THROUGHPUT_ROWS`](crate::limits::MAX_THROUGHPUT_ROWS) per status: the cost
    /// follows the tasks finished in the window up to that bound, never the rows retained;
    /// past it (a busy system) the older buckets read low, and a status whose counts add
    /// up to the bound was capped.
    /// `InvalidInput` unless `1s ≤ bucket ≤ window`, at most
    /// [`MAX_THROUGHPUT_BUCKETS`](crate::limits::MAX_THROUGHPUT_BUCKETS) buckets.
    async fn throughput(&self, window: Duration, bucket: Duration) -> Result<Vec<Throughput>>;

    /// Delete up to `limit` tasks in the terminal `status` (succeeded, failed or
    /// cancelled) whose `updated_at` is older than `older_than`, oldest first
    /// (retention); returns how many were deleted. Never touches a task in any other
    /// status. The tasks' audit entries stay (see [`purge_audit`](Self::purge_audit)).
    /// A purged failed task that held its order key's line no longer does: the engine's
    /// key sweep lets the next task of the key go. `InvalidInput` for a status that is
    /// not terminal; nothing is deleted then.
    async fn purge_finished(
        &self,
        status: Status,
        older_than: Duration,
        limit: usize,
    ) -> Result<u64>;

    /// Delete up to `limit` entries of the operators' logs (tasks' audit entries, the
    /// queues' log) written more than `older_than` ago, oldest first, from each log;
    /// returns how many were deleted. The logs have no index on time: a purge reads a
    /// log in id order (entries are written in time order), a cost that follows the log,
    /// which is small beside the tasks.
    async fn purge_audit(&self, older_than: Duration, limit: usize) -> Result<u64>;

    /// Delete up to `limit` event types of the registry
    /// ([`register_event_types`](Self::register_event_types)) that no engine has
    /// registered for longer than `older_than` (decommissioned); returns how many were
    /// deleted. A live engine registers its types again every hour.
    async fn purge_event_types(&self, older_than: Duration, limit: usize) -> Result<u64>;

    /// Delete up to `limit` records of the participant barrier
    /// ([`Transactional::barrier_in`](crate::Transactional::barrier_in)) written more than
    /// `older_than` ago, oldest first; returns how many were deleted.
    ///
    /// A purged record no longer refuses anything: a second delivery of a purged call
    /// runs again, and a forward call arriving after its purged compensation runs. Keep
    /// records longer than any call of a global transaction can be delivered (its
    /// deadline plus the retry horizon of the tasks that carry its calls).
    async fn purge_barrier(&self, older_than: Duration, limit: usize) -> Result<u64>;

    /// The participant barrier's records of global transaction `gid` (see
    /// [`Transactional::barrier_in`](crate::Transactional::barrier_in)), ordered by when
    /// they were written, then branch and operation; the first
    /// [`MAX_BATCH`](crate::limits::MAX_BATCH). What an operator reads to see why a call
    /// ran or was skipped: a record whose reason is a compensation stands for a forward
    /// call that never ran before it.
    ///
    /// `gid` is checked as [`BranchCall::new`](crate::BranchCall::new) checks it
    /// (`InvalidInput`).
    async fn barrier_records(&self, gid: &str) -> Result<Vec<BarrierRecord>>;

    /// Start a saga ([`SagaDef::start`](crate::SagaDef::start)) in a transaction of the
    /// store's own: its state row (running, at group 0, with its input) and the tasks of
    /// its first group's actions commit together. To start it with business writes, use
    /// [`Transactional::start_in`](crate::Transactional::start_in).
    ///
    /// # Contract
    ///
    /// - **Idempotent by key.** A saga of this definition name and key that exists (in
    ///   any status) is answered with `created: false` and its status, and nothing is
    ///   written; of two starts of one key racing, one creates and the other answers it.
    /// - **Whole or nothing.** The row and the first group's tasks (each enqueued as
    ///   [`enqueue`](Self::enqueue) would, its business key naming the saga's key and
    ///   the step) commit in one transaction.
    /// - **Bad input writes nothing.** An input or a task over the store's payload limit
    ///   is `InvalidInput` before anything runs.
    async fn start_saga(&self, start: &SagaStart) -> Result<SagaStarted>;

    /// The state row of the saga of definition `name` and `key`, if any.
    ///
    /// `name` and `key` are checked as [`SagaDef::builder`](crate::SagaDef::builder) and
    /// [`SagaDef::start`](crate::SagaDef::start) check them (`InvalidInput`).
    async fn saga(&self, name: &str, key: &str) -> Result<Option<Saga>>;

    /// Report how the tasks of steps of sagas of `def` finished, and move each saga on,
    /// in transactions of the store's own: one answer per report, in order. The engine's
    /// step runner ([`EngineBuilder::saga`](crate::EngineBuilder::saga)) calls it with
    /// the reports that arrive while the previous call is in flight, as the completion
    /// flusher marks; a runner of one's own may too, or report one step with
    /// [`TaskStoreExt::saga_step`].
    ///
    /// # Contract
    ///
    /// Each report is applied as if alone, as below, and answered in its own slot: a
    /// report refused (`Conflict`, `InvalidInput`) writes nothing of its own and leaves
    /// the others of the call to be applied. A store may apply several reports in one
    /// statement or transaction (PostgreSQL does, for the common case of a lone step's
    /// action done). An error of the whole call (the connection, the statement) is the
    /// outer `Err`: then a report's writes either all committed or none did, and a
    /// runner reports again (the fence makes a report that did commit answer
    /// `Conflict`). Two reports of one saga in a call take turns as two calls would.
    ///
    /// - **Fenced.** It applies only while the step's task runs under `report.lease`:
    ///   the task is marked succeeded (or, for [`StepOutcome::Exhausted`](crate::StepOutcome::Exhausted),
    ///   failed with the reason) in the same transaction. Otherwise `Conflict`, and
    ///   nothing is written.
    /// - **One transaction.** The task's mark, the step's row (its state, and its
    ///   output for a done action), the saga's row and the tasks of the steps that start
    ///   now commit together, under the saga row's lock: reports of one saga take turns.
    /// - **The state machine** is [`SagaProgress`](crate::driver::SagaProgress): a group's
    ///   actions all done start the next group (or complete the saga); a refusal
    ///   compensates the done steps of its group once the group has finished, then each
    ///   earlier group in reverse order, then the saga is compensated; a phase out of
    ///   attempts parks the saga with the reason. A report of another group than the
    ///   saga's, or of a completed, compensated or parked saga, only records the step.
    /// - **Every report** bumps the saga's `version` and `updated_at`.
    /// - **Claimed next steps, when asked** ([`StepReport::claim_next`](crate::StepReport::claim_next)):
    ///   a store may insert the tasks the report creates already claimed by the report's
    ///   owner (running, `attempts` 1, lease 1), each then in
    ///   [`StepApplied::claimed`](crate::StepApplied::claimed) as a claim returns it, or
    ///   decline (pending, none in `claimed`). Never a task that was there before.
    /// - **Bad input writes nothing**: a step `def` does not have, a bad key, an output
    ///   that is not JSON or over the payload limit are `InvalidInput`.
    async fn saga_step_many(
        &self,
        def: &SagaDef,
        reports: &[StepReport],
    ) -> Result<Vec<Result<StepApplied>>>;

    /// The step rows of saga `id`, by position: each finished step's state and its
    /// action's output. Empty for a saga without finished steps, or no saga.
    async fn saga_steps(&self, id: SagaId) -> Result<Vec<SagaStepRecord>>;

    /// The state row of saga `id`, if any.
    async fn saga_by_id(&self, id: SagaId) -> Result<Option<Saga>>;

    /// The sagas that match `filter`, by id (page with `after_id`). `InvalidInput` for a
    /// bad filter (see [`SagaFilter`]).
    async fn sagas(&self, filter: &SagaFilter) -> Result<Vec<Saga>>;

    /// The unfinished sagas per definition and status (running, compensating, parked;
    /// none of a status is no entry): how many, and how long the least recently changed
    /// has been unchanged, in database time. Read through the `(status, updated_at)`
    /// index, so its cost follows the unfinished sagas, not the finished ones kept.
    /// The gauges `backstop_sagas` and `backstop_saga_unchanged_seconds` come from it
    /// ([`BacklogGauges`](crate::BacklogGauges)).
    async fn saga_backlog(&self) -> Result<Vec<SagaCount>>;

    /// An operator's command on saga `id` ([`SagaCommand`]), audited: the change and its
    /// entry in the saga's operators' log ([`saga_log`](Self::saga_log)) commit together.
    /// Returns the saga's row as the command left it.
    ///
    /// # Contract
    ///
    /// - **Retry** (a parked saga): its failed step tasks (those of its event type whose
    ///   business key starts with `<key>/`: out of attempts, or failed with no report
    ///   reaching the saga) are reset to pending (attempts 0, due now) and it goes back to compensating if any step of its group
    ///   was refused or compensated or failed compensating, else to running.
    /// - **Compensate** (a running saga, or one parked on a failed action): it turns
    ///   compensating, the reason naming the operator and the audit's reason, and a
    ///   nudge task is enqueued for the engine running its steps, which enqueues the
    ///   compensations ([`nudge_saga`](Self::nudge_saga)).
    /// - **Resolve** to completed or compensated (a saga not yet either): set so, the
    ///   reason naming the operator.
    /// - **Refused, writing nothing**: no saga of that id is `NotFound`; a saga in a
    ///   status the command may not be given in is `Conflict`, naming its status; a bad
    ///   audit, or a resolution to another status, is `InvalidInput`.
    async fn command_saga(&self, id: SagaId, command: SagaCommand, audit: &Audit) -> Result<Saga>;

    /// Enqueue what saga `id`'s state calls for, in one transaction under its row's
    /// lock ([`SagaProgress::nudge`](crate::driver::SagaProgress::nudge)): the engine's
    /// step runner calls it for a nudge task, a reconciler for a saga found stuck. Each
    /// step's task is enqueued once per phase, so a nudge asked twice adds nothing.
    /// `None` when there is no saga `id`. With `audit`, a nudge that changes something
    /// (enqueues a task, moves the saga) is written to the saga's operators' log as
    /// `nudge` (the reconciler's pushes forward); one that finds nothing to do is not,
    /// and leaves the saga's row as it was (its version, time and reason: a compensating
    /// saga whose compensations are enqueued already is not "moved" to where it is).
    /// A compensating saga whose group still waits for actions gets back the tasks of
    /// its own that failed (pending, `attempts` 0, due now): an action whose task failed
    /// without reporting would otherwise never settle the group, and run now it is
    /// refused unrun (the saga compensates).
    /// `InvalidInput` for a bad key or audit, writing nothing.
    async fn nudge_saga(
        &self,
        def: &SagaDef,
        id: SagaId,
        key: &str,
        audit: Option<&Audit>,
    ) -> Result<Option<StepApplied>>;

    /// Saga `id`'s operators' log, oldest first.
    async fn saga_log(&self, id: SagaId) -> Result<Vec<SagaLogEntry>>;

    /// Delete the tasks with these ids that are in the terminal `status`; returns how
    /// many were deleted. A listed task in any other status (reset, say, since it was
    /// read) is kept. Used by retention with an archive callback: list, archive, then
    /// delete exactly those. `InvalidInput` for a status that is not terminal, or more
    /// than [`MAX_BATCH`](crate::limits::MAX_BATCH) ids.
    async fn delete_finished(&self, status: Status, ids: &[TaskId]) -> Result<u64>;

    /// Move these order keys along (see [`NewTask::order_key`](crate::NewTask::order_key)):
    /// for each key with no task in the way (pending, running, or parked and blocking),
    /// its first waiting task (lowest id) becomes pending, due at the later of its
    /// `next_run_at` and now. Returns the tasks made pending, so a caller can run them
    /// ahead.
    ///
    /// - Marks do not move keys along: the engine calls this after it records outcomes
    ///   of tasks with order keys; operators' changes (cancel, delete, reset) do it
    ///   themselves; the engine's key sweep ([`order_keys`](Self::order_keys)) catches
    ///   what a crash in between left behind.
    /// - Idempotent and safe to race: of concurrent releases and enqueues of one key,
    ///   one at a time holds the key's lock, so never two tasks of a key are pending or
    ///   running at once.
    /// - At most [`MAX_BATCH`](crate::limits::MAX_BATCH) valid keys (duplicates count
    ///   once); `InvalidInput` otherwise, nothing written.
    async fn release_order_keys(&self, keys: &[String]) -> Result<Vec<TaskId>>;

    /// Up to `limit` (1 to [`MAX_BATCH`](crate::limits::MAX_BATCH)) order keys that have
    /// tasks not yet done, greater than `after`, in order: the engine's key sweep pages
    /// through them and releases each page. (Keys are listed from a table of their own,
    /// so the page costs what it holds.)
    async fn order_keys(&self, after: Option<&str>, limit: usize) -> Result<Vec<String>>;

    /// Record that an engine with handlers for `event_types` runs (it calls this when it
    /// starts, and now and then while it runs): the fleet's handled types, so a task of a
    /// type no engine handles (a typo) can be reported instead of waiting forever. At
    /// most [`MAX_EVENT_TYPES`](crate::limits::MAX_EVENT_TYPES) valid types;
    /// `InvalidInput` otherwise, nothing written.
    async fn register_event_types(&self, event_types: &[String]) -> Result<()>;

    /// The event types some engine has registered (see
    /// [`register_event_types`](Self::register_event_types)), in order.
    async fn event_types(&self) -> Result<Vec<EventTypeSeen>>;

    /// An operator's change of the settings of event type `event_type`'s queue
    /// ([`QueueChange`]), audited. Returns the queue's settings as the change left them.
    ///
    /// # Contract
    ///
    /// - **Pause** keeps every claim off the type's tasks from the moment it commits:
    ///   [`claim_by_id`](Self::claim_by_id), [`claim_batch`](Self::claim_batch), a claim
    ///   on the caller's transaction, and a saga report's claimed next steps (inserted
    ///   pending instead) all pass a paused type by, in the statement that claims, so
    ///   every instance honours it at its next poll or wake-up without reading it first.
    ///   Enqueues of the type commit and answer as before; running tasks run on and
    ///   their marks apply.
    /// - **Resume** lets the claims take the type's tasks again.
    /// - **Concurrency** `Some(n)` caps the type's running tasks (status running, across
    ///   every instance) at `n`: [`claim_by_id`](Self::claim_by_id), a claim on the
    ///   caller's transaction and a saga report's claimed next steps pass a limited type
    ///   by (as a paused one); only [`claim_batch`](Self::claim_batch) takes its tasks,
    ///   and it claims at most `n` less the type's running tasks, counted after it locked
    ///   the queue's row (so two claims of the type, on any instance, never both count
    ///   the same room). A task stays counted until its mark, a recycle of its dead
    ///   holder or an operator's change ends its run; a holder alive past its lease may
    ///   run beside the task's next holder, as at-least-once delivery allows. A limit
    ///   lowered below the running count lets them finish and claims nothing until the
    ///   count is under it. `None` removes the limit. `n` must be 1 to
    ///   [`MAX_CONCURRENCY`](crate::MAX_CONCURRENCY).
    /// - **Rate** `Some(rate)` caps the type's starts: only
    ///   [`claim_batch`](Self::claim_batch) takes its tasks (as for a concurrency limit),
    ///   at most `rate.starts` in any `rate.per` of database time, counted from the
    ///   ledger of its claims under the queue's row lock (a sliding window: see
    ///   [`RateLimit`](crate::RateLimit)). A start counts whatever became of it (a
    ///   task given back, or whose holder died, spent its start). Both limits may be set
    ///   at once; each claim takes the smaller room. `None` removes it. `starts` must be
    ///   1 to [`MAX_CONCURRENCY`](crate::MAX_CONCURRENCY), `per` whole seconds from 1 s
    ///   to [`MAX_RATE_WINDOW`](crate::MAX_RATE_WINDOW).
    /// - **Announced**: with a notifier on the store ([`StoreConfig::notifier`](crate::StoreConfig::notifier)), every
    ///   change but a pause announces the type once committed, so listening engines poll
    ///   it at once: a resume, or room a raised or removed limit opens, starts tasks
    ///   within a wake-up, not at the next poll.
    /// - **Audited**: a change that changes the setting and its entry in the queue's
    ///   operators' log ([`queue_log`](Self::queue_log)) commit together. A change to
    ///   what the setting already is (a pause of a paused type) writes nothing and
    ///   answers the settings as they are.
    /// - **Bad input writes nothing**: an invalid event type or audit, a limit of 0 or
    ///   past the bound, is `InvalidInput`. A type no task or engine has named yet may be
    ///   paused or limited ahead of its first task.
    async fn set_queue(
        &self,
        event_type: &str,
        change: QueueChange,
        audit: &Audit,
    ) -> Result<Queue>;

    /// The settings of every queue an operator has changed, by event type. A type with
    /// no entry runs unpaused and unlimited.
    async fn queues(&self) -> Result<Vec<Queue>>;

    /// The operators' log of event type `event_type`'s queue, oldest first.
    /// `InvalidInput` for an invalid event type.
    async fn queue_log(&self, event_type: &str) -> Result<Vec<QueueLogEntry>>;
}

/// Conveniences over [`TaskStore`], for every store (including `dyn TaskStore`).
///
/// ```
/// # async fn demo(store: &dyn backstop_core::TaskStore, task: backstop_core::Task) -> backstop_core::Result<()> {
/// use backstop_core::TaskStoreExt;
/// if !store.mark_success(task.lease()).await? {
///     // our lease was lost: the task was recycled and someone else owns it now
/// }
/// # Ok(()) }
/// ```
#[async_trait]
pub trait TaskStoreExt: TaskStore {
    /// Mark one task succeeded; `false` when the lease is stale.
    async fn mark_success(&self, lease: Lease) -> Result<bool> {
        first(self.mark(&[Mark::success(lease)]).await?)
    }

    /// Schedule a retry of one task after `delay` (failed when no attempts are left);
    /// `false` when the lease is stale.
    async fn mark_retry(&self, lease: Lease, delay: Duration, error: &str) -> Result<bool> {
        first(self.mark(&[Mark::retry(lease, delay, error)]).await?)
    }

    /// Fail one task for good; `false` when the lease is stale.
    async fn mark_fail(&self, lease: Lease, error: &str) -> Result<bool> {
        first(self.mark(&[Mark::fail(lease, error)]).await?)
    }

    /// Report one step ([`TaskStore::saga_step_many`] of one report).
    async fn saga_step(&self, def: &SagaDef, report: &StepReport) -> Result<StepApplied> {
        let mut answers = self
            .saga_step_many(def, std::slice::from_ref(report))
            .await?;
        match (answers.pop(), answers.is_empty()) {
            (Some(answer), true) => answer,
            _ => Err(crate::error::Error::new(
                crate::error::ErrorKind::Unexpected,
                "saga_step",
                "store answered a step's report with other than one answer",
            )),
        }
    }

    /// [`purge_finished`](TaskStore::purge_finished) of succeeded tasks.
    async fn purge_succeeded(&self, older_than: Duration, limit: usize) -> Result<u64> {
        self.purge_finished(Status::Succeeded, older_than, limit)
            .await
    }

    /// [`delete_finished`](TaskStore::delete_finished) of succeeded tasks.
    async fn delete_succeeded(&self, ids: &[TaskId]) -> Result<u64> {
        self.delete_finished(Status::Succeeded, ids).await
    }

    /// Give one task back without spending an attempt; `false` when the lease is stale.
    async fn release(&self, lease: Lease) -> Result<bool> {
        first(self.mark(&[Mark::release(lease)]).await?)
    }

    /// This store wrapped by `layer`: `store.layer(TracingLayer::new())` (see
    /// [`Layer`], [`StoreLayer`]).
    ///
    /// ```
    /// # async fn demo(store: impl backstop_core::TaskStore) {
    /// use backstop_core::{layers::TracingLayer, TaskStoreExt};
    /// let traced = store.layer(TracingLayer::new());
    /// # }
    /// ```
    fn layer<L: Layer<Self>>(self, layer: L) -> L::Store
    where
        Self: Sized,
    {
        layer.layer(self)
    }
}

impl<S: TaskStore + ?Sized> TaskStoreExt for S {}

fn first(flags: Vec<bool>) -> Result<bool> {
    match flags.as_slice() {
        [flag] => Ok(*flag),
        other => Err(crate::error::Error::new(
            crate::error::ErrorKind::Unexpected,
            "mark",
            format!("store answered {} flags for one mark", other.len()),
        )),
    }
}
