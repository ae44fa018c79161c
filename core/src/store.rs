//! The [`TaskStore`] trait: the contract every backend honours and the conformance suite
//! (`backstop-testkit`) checks line by line.

use std::time::Duration;

use async_trait::async_trait;

use crate::driver::{
    check_task, check_tasks, enqueued, enqueued_all, schema, AgedBatch, Backend, Buckets, Checked,
    Claim, Driver, RawStats, RawTask, Reset,
};
use crate::error::{Error, ErrorKind, Result};
use crate::limits;
use crate::model::{
    Audit, AuditEntry, Enqueued, EventTypeSeen, Lease, Mark, MarkAction, NewTask, Owner, Recycled,
    Stats, Status, StatusCount, Task, TaskFilter, TaskId, Throughput,
};

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
///   grab moves a task to running; only a mark with the current lease moves it out.
/// - **Fencing.** Every grab increments `attempts` and `lease`. Every change to a running
///   task ([`mark`](Self::mark), [`heartbeat`](Self::heartbeat)) names a [`Lease`] and
///   applies only when the task is still running under that lease; otherwise it changes
///   nothing and reports `false`. A recycled worker can never overwrite its successor.
/// - **Atomic claims.** A task is claimed by at most one caller per grab, however many
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
/// [`TaskStoreExt`], so wrappers need implement only this trait.
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
    /// - Applies only when the task is pending and `next_run_at <= now`; returns `None`
    ///   otherwise (missing, not due, or in any other status).
    /// - On success: status running, `owner` set, `attempts + 1`, `lease + 1`,
    ///   `updated_at = now`; the returned task shows the new values.
    /// - Of any number of concurrent callers, exactly one wins.
    async fn grab_by_id(&self, id: TaskId, owner: &Owner) -> Result<Option<Task>>;

    /// Claim up to `limit` due pending tasks of the given event types.
    ///
    /// - Due pending tasks only (`next_run_at <= now`), of `event_types` only; an empty
    ///   list or `limit = 0` claims nothing.
    /// - In claim order: the lowest [`Priority`](crate::Priority) number first, then the
    ///   earliest due, then the oldest: `(priority, next_run_at, id)`; the result is in
    ///   that order.
    /// - Each claimed task is changed as by [`grab_by_id`](Self::grab_by_id).
    /// - Concurrent callers never claim the same task; none claims more than `limit`.
    /// - `limit` is at most [`limits::MAX_BATCH`](crate::limits::MAX_BATCH); at most
    ///   [`limits::MAX_EVENT_TYPES`](crate::limits::MAX_EVENT_TYPES) event types, each
    ///   valid (a type named twice counts once).
    /// - The cost of a claim does not grow with the backlog of due tasks, of these event
    ///   types or of others: each type's due tasks of each priority level are read in
    ///   order, up to the limit.
    async fn grab_batch(
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
    async fn recycle_dead(&self, older_than: Duration, limit: usize) -> Result<Recycled>;

    /// Refresh `updated_at` of running tasks still held under these leases, so a long
    /// task is never recycled while its owner lives.
    ///
    /// - Returns one flag per lease, in order: `true` when refreshed, `false` when the
    ///   lease is no longer current (the task was recycled, reset or completed).
    async fn heartbeat(&self, leases: &[Lease]) -> Result<Vec<bool>>;

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
    /// - [`Release`](crate::MarkAction::Release): status pending, owner cleared,
    ///   `attempts − 1` (the grab's increment is given back), `next_run_at` unchanged.
    /// - Every applied mark sets `updated_at = now`. Marks of one call apply in order, in
    ///   one transaction where the backend allows.
    async fn mark(&self, marks: &[Mark]) -> Result<Vec<bool>>;

    /// An operator's retry: failed → pending with `attempts = 0`,
    /// due now, `last_error` kept for the record.
    ///
    /// - Also resets a *stuck* running task: one whose `updated_at` is older than
    ///   `stuck_after` (its owner is gone). A running task with a live owner is never reset.
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
    ///   refused, so its outcome is never applied. The handler is not interrupted: an
    ///   engine learns of it at its next heartbeat and tells the handler through
    ///   [`lease_lost`](crate::lease_lost) (cooperative cancel).
    /// - The audit log gets an entry (`cancel`, operator, reason, database time) in the
    ///   same transaction.
    /// - Returns the task as cancelled. `NotFound` when there is no such task, `Conflict`
    ///   when it is succeeded, failed or already cancelled; `InvalidInput` for a bad
    ///   audit. Nothing is written then.
    async fn cancel(&self, id: TaskId, audit: &Audit) -> Result<Task>;

    /// An operator's delete: removes a task that is not running (cancel it first), and
    /// records it in the audit log in the same transaction. Returns the task as it was.
    /// `NotFound` when there is no such task, `Conflict` when it is running,
    /// `InvalidInput` for a bad audit; nothing is written then.
    async fn delete(&self, id: TaskId, audit: &Audit) -> Result<Task>;

    /// The audit log of task `id` (operators' changes), oldest first; kept after the task
    /// is deleted.
    async fn audit_log(&self, id: TaskId) -> Result<Vec<AuditEntry>>;

    /// An operator's retry of one task: failed or cancelled → pending with
    /// `attempts = 0`, due now, owner cleared, `last_error` kept for the record; audited
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

    /// Delete up to `limit` succeeded tasks whose `updated_at` is older than
    /// `older_than` (retention); returns how many were deleted. Never touches a task in
    /// any other status.
    async fn purge_succeeded(&self, older_than: Duration, limit: usize) -> Result<u64>;

    /// Delete the tasks with these ids that are succeeded; returns how many were deleted.
    /// A listed task in any other status (reset, say, since it was read) is kept. Used by
    /// retention with an archive callback: list, archive, then delete exactly those.
    async fn delete_succeeded(&self, ids: &[TaskId]) -> Result<u64>;

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

    /// Give one task back without spending an attempt; `false` when the lease is stale.
    async fn release(&self, lease: Lease) -> Result<bool> {
        first(self.mark(&[Mark::release(lease)]).await?)
    }
}

impl<S: TaskStore + ?Sized> TaskStoreExt for S {}

fn first(flags: Vec<bool>) -> Result<bool> {
    match flags.as_slice() {
        [flag] => Ok(*flag),
        other => Err(crate::Error::new(
            crate::ErrorKind::Unexpected,
            "mark",
            format!("store answered {} flags for one mark", other.len()),
        )),
    }
}

#[async_trait]
impl<S: TaskStore + ?Sized> TaskStore for std::sync::Arc<S> {
    async fn migrate(&self) -> Result<()> {
        (**self).migrate().await
    }
    async fn migrate_to(&self, version: u32) -> Result<()> {
        (**self).migrate_to(version).await
    }
    async fn enqueue(&self, task: NewTask) -> Result<Enqueued> {
        (**self).enqueue(task).await
    }
    async fn enqueue_many(&self, tasks: &[NewTask]) -> Result<Vec<Enqueued>> {
        (**self).enqueue_many(tasks).await
    }
    async fn grab_by_id(&self, id: TaskId, owner: &Owner) -> Result<Option<Task>> {
        (**self).grab_by_id(id, owner).await
    }
    async fn grab_batch(
        &self,
        owner: &Owner,
        event_types: &[String],
        limit: usize,
    ) -> Result<Vec<Task>> {
        (**self).grab_batch(owner, event_types, limit).await
    }
    async fn recycle_dead(&self, older_than: Duration, limit: usize) -> Result<Recycled> {
        (**self).recycle_dead(older_than, limit).await
    }
    async fn heartbeat(&self, leases: &[Lease]) -> Result<Vec<bool>> {
        (**self).heartbeat(leases).await
    }
    async fn mark(&self, marks: &[Mark]) -> Result<Vec<bool>> {
        (**self).mark(marks).await
    }
    async fn manual_reset(&self, id: TaskId, stuck_after: Duration) -> Result<Task> {
        (**self).manual_reset(id, stuck_after).await
    }

    async fn cancel(&self, id: TaskId, audit: &Audit) -> Result<Task> {
        (**self).cancel(id, audit).await
    }

    async fn delete(&self, id: TaskId, audit: &Audit) -> Result<Task> {
        (**self).delete(id, audit).await
    }

    async fn audit_log(&self, id: TaskId) -> Result<Vec<AuditEntry>> {
        (**self).audit_log(id).await
    }

    async fn reset(&self, id: TaskId, audit: &Audit) -> Result<Task> {
        (**self).reset(id, audit).await
    }

    async fn reset_matching(&self, filter: &TaskFilter, audit: &Audit) -> Result<Vec<Task>> {
        (**self).reset_matching(filter, audit).await
    }
    async fn get(&self, id: TaskId) -> Result<Option<Task>> {
        (**self).get(id).await
    }
    async fn list(&self, filter: &TaskFilter) -> Result<Vec<Task>> {
        (**self).list(filter).await
    }
    async fn stats(&self) -> Result<Stats> {
        (**self).stats().await
    }
    async fn backlog(&self) -> Result<Stats> {
        (**self).backlog().await
    }
    async fn throughput(&self, window: Duration, bucket: Duration) -> Result<Vec<Throughput>> {
        (**self).throughput(window, bucket).await
    }
    async fn purge_succeeded(&self, older_than: Duration, limit: usize) -> Result<u64> {
        (**self).purge_succeeded(older_than, limit).await
    }
    async fn delete_succeeded(&self, ids: &[TaskId]) -> Result<u64> {
        (**self).delete_succeeded(ids).await
    }
    async fn release_order_keys(&self, keys: &[String]) -> Result<Vec<TaskId>> {
        (**self).release_order_keys(keys).await
    }
    async fn order_keys(&self, after: Option<&str>, limit: usize) -> Result<Vec<String>> {
        (**self).order_keys(after, limit).await
    }
    async fn register_event_types(&self, event_types: &[String]) -> Result<()> {
        (**self).register_event_types(event_types).await
    }
    async fn event_types(&self) -> Result<Vec<EventTypeSeen>> {
        (**self).event_types().await
    }
}

/// The contract, implemented once for every backend: check the input, shortcut empty
/// input, run the driver's statement shape (again, on contention), decode and order what
/// it returns, and name the operation in every error.
#[async_trait]
impl<B: Backend + ?Sized> TaskStore for B {
    async fn migrate(&self) -> Result<()> {
        let d = self.driver();
        run(d, "migrate", || d.migrate(schema::LATEST)).await
    }

    async fn migrate_to(&self, version: u32) -> Result<()> {
        let d = self.driver();
        if version == 0 || version > schema::LATEST {
            return Err(Error::invalid_input(
                "migrate",
                format!(
                    "no schema version {version}: this release knows versions 1 to {}",
                    schema::LATEST
                ),
            ));
        }
        run(d, "migrate", || d.migrate(version)).await
    }

    async fn enqueue(&self, task: NewTask) -> Result<Enqueued> {
        let d = self.driver();
        let checked = check_task(d.config(), &task)?;
        let inserted = run(d, "enqueue", || d.insert(checked)).await?;
        enqueued(inserted, &task)
    }

    async fn enqueue_many(&self, tasks: &[NewTask]) -> Result<Vec<Enqueued>> {
        let d = self.driver();
        let checked = check_tasks(d.config(), tasks)?;
        if tasks.is_empty() {
            return Ok(Vec::new());
        }
        let inserted = run(d, "enqueue_many", || d.insert_many(checked)).await?;
        enqueued_all(inserted, tasks)
    }

    async fn grab_by_id(&self, id: TaskId, owner: &Owner) -> Result<Option<Task>> {
        let d = self.driver();
        let row = run(d, "grab_by_id", || d.claim_by_id(id, owner)).await?;
        row.map(RawTask::decode).transpose()
    }

    async fn grab_batch(
        &self,
        owner: &Owner,
        event_types: &[String],
        limit: usize,
    ) -> Result<Vec<Task>> {
        const OP: &str = "grab_batch";
        limits::check_limit(OP, limit)?;
        limits::check_event_types(OP, event_types)?;
        if limit == 0 || event_types.is_empty() {
            return Ok(Vec::new());
        }
        // distinct types: each is one ordered walk of its due rows
        let mut types = event_types.to_vec();
        types.sort_unstable();
        types.dedup();
        let d = self.driver();
        let claim = Checked::new(Claim {
            owner,
            event_types: &types,
            limit,
        });
        let rows = run(d, OP, || d.claim_batch(claim)).await?;
        let mut tasks = decode_all(rows)?;
        tasks.sort_by_key(|t| (t.priority, t.next_run_at, t.id));
        Ok(tasks)
    }

    async fn recycle_dead(&self, older_than: Duration, limit: usize) -> Result<Recycled> {
        const OP: &str = "recycle_dead";
        let Some(batch) = aged_batch(OP, older_than, limit)? else {
            return Ok(Recycled::default());
        };
        let d = self.driver();
        run(d, OP, || d.recycle_dead(batch)).await
    }

    async fn heartbeat(&self, leases: &[Lease]) -> Result<Vec<bool>> {
        const OP: &str = "heartbeat";
        limits::check_leases(OP, leases)?;
        if leases.is_empty() {
            return Ok(Vec::new());
        }
        let d = self.driver();
        let leases = Checked::new(leases);
        let flags = run(d, OP, || d.heartbeat(leases)).await?;
        one_flag_each(OP, flags, leases.len())
    }

    async fn mark(&self, marks: &[Mark]) -> Result<Vec<bool>> {
        const OP: &str = "mark";
        limits::check_marks(OP, marks)?;
        if marks.is_empty() {
            return Ok(Vec::new());
        }
        // error texts cut to the column's bound here, once for every backend
        let bounded: Vec<Mark>;
        let marks = if marks.iter().any(|m| m.action.error().is_some_and(too_long)) {
            bounded = marks.iter().map(bound_error).collect();
            bounded.as_slice()
        } else {
            marks
        };
        let d = self.driver();
        let marks = Checked::new(marks);
        let flags = run(d, OP, || d.mark(marks)).await?;
        one_flag_each(OP, flags, marks.len())
    }

    async fn manual_reset(&self, id: TaskId, stuck_after: Duration) -> Result<Task> {
        const OP: &str = "manual_reset";
        limits::check_duration(OP, "stuck_after", stuck_after)?;
        let d = self.driver();
        let stuck_after = Checked::new(stuck_after);
        match run(d, OP, || d.reset(id, stuck_after)).await? {
            Reset::Done(row) => reread_after_release(self, OP, row.decode()?).await,
            Reset::Missing => Err(Error::task_not_found(OP, id)),
            Reset::Refused(code) => Err(Error::reset_refused(OP, id, Status::from_code(code)?)),
        }
    }

    async fn cancel(&self, id: TaskId, audit: &Audit) -> Result<Task> {
        const OP: &str = "cancel";
        limits::check_audit(OP, audit)?;
        let d = self.driver();
        let audit = Checked::new(audit);
        let answer = run(d, OP, || d.cancel(id, audit)).await?;
        let task = operator_change(OP, id, answer, "pending, waiting or running")?;
        move_key_along(self, OP, &task).await?;
        Ok(task)
    }

    async fn delete(&self, id: TaskId, audit: &Audit) -> Result<Task> {
        const OP: &str = "delete";
        limits::check_audit(OP, audit)?;
        let d = self.driver();
        let audit = Checked::new(audit);
        let answer = run(d, OP, || d.delete(id, audit)).await?;
        let task = operator_change(
            OP,
            id,
            answer,
            "pending, waiting, succeeded, failed or cancelled (not running)",
        )?;
        move_key_along(self, OP, &task).await?;
        Ok(task)
    }

    async fn reset(&self, id: TaskId, audit: &Audit) -> Result<Task> {
        const OP: &str = "reset";
        limits::check_audit(OP, audit)?;
        let d = self.driver();
        let audit = Checked::new(audit);
        let expected = [Status::Failed.code(), Status::Cancelled.code()];
        let answer = run(d, OP, || d.retry(id, expected, audit)).await?;
        let task = operator_change(OP, id, answer, "failed or cancelled")?;
        reread_after_release(self, OP, task).await
    }

    async fn reset_matching(&self, filter: &TaskFilter, audit: &Audit) -> Result<Vec<Task>> {
        const OP: &str = "reset_matching";
        limits::check_audit(OP, audit)?;
        limits::check_filter(filter).map_err(|e| e.with_operation(OP))?;
        let expected = match filter.status {
            None => [Status::Failed.code(), Status::Cancelled.code()],
            Some(s @ (Status::Failed | Status::Cancelled)) => [s.code(), s.code()],
            Some(other) => {
                return Err(Error::invalid_input(
                    OP,
                    format!(
                        "only failed or cancelled tasks can be reset, the filter asks for {other}"
                    ),
                ))
            }
        };
        if filter.limit == 0 {
            return Ok(Vec::new());
        }
        let d = self.driver();
        // The candidates, then each reset on its own with its status checked again: a
        // task another operator reset meanwhile is refused and skipped.
        let mut candidates = Vec::new();
        for status in [expected[0], expected[1]] {
            let mut f = filter.clone();
            f.status = Some(Status::from_code(i64::from(status))?);
            let f = Checked::new(&f);
            candidates.extend(run(d, OP, || d.list(f)).await?);
            if expected[0] == expected[1] {
                break;
            }
        }
        candidates.sort_by_key(|t| t.id);
        candidates.truncate(filter.limit);
        let audit = Checked::new(audit);
        let mut reset = Vec::new();
        for c in candidates {
            match run(d, OP, || d.retry(c.id, expected, audit)).await? {
                Reset::Done(row) => {
                    reset.push(reread_after_release(self, OP, row.decode()?).await?)
                }
                Reset::Missing | Reset::Refused(_) => {} // changed meanwhile: not ours
            }
        }
        Ok(reset)
    }

    async fn audit_log(&self, id: TaskId) -> Result<Vec<AuditEntry>> {
        let d = self.driver();
        let rows = run(d, "audit_log", || d.audit_log(id)).await?;
        Ok(rows
            .into_iter()
            .map(|r| AuditEntry {
                task_id: r.task_id,
                action: r.action,
                operator: r.operator,
                reason: r.reason,
                at: r.at,
            })
            .collect())
    }

    async fn get(&self, id: TaskId) -> Result<Option<Task>> {
        let d = self.driver();
        let row = run(d, "get", || d.get(id)).await?;
        row.map(RawTask::decode).transpose()
    }

    async fn list(&self, filter: &TaskFilter) -> Result<Vec<Task>> {
        const OP: &str = "list";
        limits::check_filter(filter)?;
        if filter.limit == 0 {
            return Ok(Vec::new());
        }
        let d = self.driver();
        let filter = Checked::new(filter);
        decode_all(run(d, OP, || d.list(filter)).await?)
    }

    async fn stats(&self) -> Result<Stats> {
        let d = self.driver();
        decode_stats(run(d, "stats", || d.stats(false)).await?)
    }

    async fn backlog(&self) -> Result<Stats> {
        let d = self.driver();
        decode_stats(run(d, "backlog", || d.stats(true)).await?)
    }

    async fn throughput(&self, window: Duration, bucket: Duration) -> Result<Vec<Throughput>> {
        const OP: &str = "throughput";
        limits::check_buckets(OP, window, bucket)?;
        let last = u32::try_from(window.as_millis().div_ceil(bucket.as_millis()) - 1).unwrap_or(0);
        let d = self.driver();
        let buckets = Checked::new(Buckets {
            window,
            bucket,
            cap: limits::MAX_THROUGHPUT_ROWS,
        });
        let rows = run(d, OP, || d.throughput(buckets)).await?;
        // rows on a bucket's edge (or a clock step) may land one bucket out: clamp, merge
        let mut merged: std::collections::BTreeMap<(String, i64, u32), u64> = Default::default();
        for (event_type, code, bucket, count) in rows {
            let b = u32::try_from(bucket.max(0)).unwrap_or(u32::MAX).min(last);
            *merged.entry((event_type, code, b)).or_default() += u64::try_from(count).unwrap_or(0);
        }
        merged
            .into_iter()
            .map(|((event_type, code, bucket), count)| {
                Ok(Throughput {
                    event_type,
                    status: Status::from_code(code)?,
                    bucket,
                    count,
                })
            })
            .collect()
    }

    async fn purge_succeeded(&self, older_than: Duration, limit: usize) -> Result<u64> {
        const OP: &str = "purge_succeeded";
        let Some(batch) = aged_batch(OP, older_than, limit)? else {
            return Ok(0);
        };
        let d = self.driver();
        run(d, OP, || d.purge_succeeded(batch)).await
    }

    async fn delete_succeeded(&self, ids: &[TaskId]) -> Result<u64> {
        const OP: &str = "delete_succeeded";
        limits::check_ids(OP, ids)?;
        if ids.is_empty() {
            return Ok(0);
        }
        let d = self.driver();
        let ids = Checked::new(ids);
        run(d, OP, || d.delete_succeeded(ids)).await
    }

    async fn release_order_keys(&self, keys: &[String]) -> Result<Vec<TaskId>> {
        const OP: &str = "release_order_keys";
        if keys.len() > limits::MAX_BATCH {
            return Err(Error::invalid_input(
                OP,
                format!(
                    "at most {} keys per call, got {}",
                    limits::MAX_BATCH,
                    keys.len()
                ),
            ));
        }
        for k in keys {
            limits::check_order_key(OP, k)?;
        }
        let mut keys = keys.to_vec();
        keys.sort_unstable();
        keys.dedup();
        if keys.is_empty() {
            return Ok(Vec::new());
        }
        let d = self.driver();
        let keys = Checked::new(keys.as_slice());
        run(d, OP, || d.release_keys(keys)).await
    }

    async fn register_event_types(&self, event_types: &[String]) -> Result<()> {
        const OP: &str = "register_event_types";
        limits::check_event_types(OP, event_types)?;
        let mut types = event_types.to_vec();
        types.sort_unstable();
        types.dedup();
        if types.is_empty() {
            return Ok(());
        }
        let d = self.driver();
        let types = Checked::new(types.as_slice());
        run(d, OP, || d.register_types(types)).await
    }

    async fn event_types(&self) -> Result<Vec<EventTypeSeen>> {
        let d = self.driver();
        let mut rows = run(d, "event_types", || d.types()).await?;
        rows.sort();
        Ok(rows
            .into_iter()
            .map(|(event_type, first_seen, last_seen)| EventTypeSeen {
                event_type,
                first_seen,
                last_seen,
            })
            .collect())
    }

    async fn order_keys(&self, after: Option<&str>, limit: usize) -> Result<Vec<String>> {
        const OP: &str = "order_keys";
        limits::check_limit(OP, limit)?;
        if limit == 0 {
            return Ok(Vec::new());
        }
        let d = self.driver();
        let limit = Checked::new(limit);
        run(d, OP, || d.order_keys(after, limit)).await
    }
}

/// Run one driver call as operation `op`: again (with backoff and jitter) while the
/// database rolls it back on contention, up to the store's `contention_retries`; every
/// error it returns names `op`.
async fn run<T, F, Fut>(driver: &dyn Driver, op: &'static str, call: F) -> Result<T>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<T>>,
{
    retry_contention(driver.config(), op, call).await
}

/// Run `call` as operation `op`, again (backoff from 5 ms, doubling, with jitter) while it
/// fails with temporary [`ErrorKind::Contention`], up to `config.contention_retries`
/// times; then the error is persistent. Every error returned names `op`. The store's own
/// retry, for backend operations outside [`TaskStore`] (an inbox's first statement, say);
/// `call` must be safe to run again (the database rolled the failed try back).
pub async fn retry_contention<T, F, Fut>(
    config: &crate::limits::StoreConfig,
    op: &'static str,
    mut call: F,
) -> Result<T>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<T>>,
{
    /// The first wait; each further one doubles, up to `MAX_BACKOFF`.
    const FIRST_BACKOFF: Duration = Duration::from_millis(5);
    const MAX_BACKOFF: Duration = Duration::from_secs(1);
    let retries = config.contention_retries;
    let mut backoff = FIRST_BACKOFF;
    let mut attempt = 0;
    loop {
        match call().await {
            Ok(v) => return Ok(v),
            Err(e) if e.kind() == ErrorKind::Contention && e.is_temporary() => {
                if attempt >= retries {
                    let e = e.with_operation(op);
                    return Err(if attempt > 0 { e.retried(attempt) } else { e });
                }
                attempt += 1;
                // jitter, so that two victims of one deadlock do not collide again
                tokio::time::sleep(backoff + jitter(backoff / 2)).await;
                backoff = (backoff * 2).min(MAX_BACKOFF);
            }
            Err(e) => return Err(e.with_operation(op)),
        }
    }
}

/// The answer of an operator's change `op` of task `id`: the task as changed, or
/// `NotFound`, or `Conflict` naming its status and the statuses `allowed`.
/// After an operator's change of a task with an order key: move the key along (the
/// task may have left the way, or, reset, joined the line).
async fn move_key_along<S: TaskStore + ?Sized>(
    store: &S,
    op: &'static str,
    task: &Task,
) -> Result<()> {
    if let Some(key) = &task.order_key {
        store
            .release_order_keys(std::slice::from_ref(key))
            .await
            .map_err(|e| e.with_operation(op))?;
    }
    Ok(())
}

/// [`move_key_along`] for a reset task (reset into the line as waiting), answered as it
/// then is: pending if it was first in line.
async fn reread_after_release<S: TaskStore + ?Sized>(
    store: &S,
    op: &'static str,
    task: Task,
) -> Result<Task> {
    if task.order_key.is_none() {
        return Ok(task);
    }
    move_key_along(store, op, &task).await?;
    Ok(store
        .get(task.id)
        .await
        .map_err(|e| e.with_operation(op))?
        .unwrap_or(task))
}

fn operator_change(op: &'static str, id: TaskId, answer: Reset, allowed: &str) -> Result<Task> {
    match answer {
        Reset::Done(row) => row.decode(),
        Reset::Missing => Err(Error::task_not_found(op, id)),
        Reset::Refused(code) => Err(Error::change_refused(
            op,
            id,
            Status::from_code(code)?,
            allowed,
        )),
    }
}

/// Counts as the store answers them.
fn decode_stats(raw: RawStats) -> Result<Stats> {
    let counts = raw
        .counts
        .into_iter()
        .map(|(event_type, code, count)| {
            Ok(StatusCount {
                event_type,
                status: Status::from_code(code)?,
                count: u64::try_from(count).unwrap_or(0),
            })
        })
        .collect::<Result<Vec<_>>>()?;
    Ok(Stats {
        counts,
        oldest_due_pending: raw
            .oldest_due_pending_ms
            .map(|ms| Duration::from_millis(u64::try_from(ms).unwrap_or(0))),
    })
}

/// A pseudo-random duration in `[0, max)` (no need for a random number crate here).
fn jitter(max: Duration) -> Duration {
    use std::hash::{BuildHasher, Hasher};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u128(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or_default(),
    );
    let micros = max.as_micros().max(1) as u64;
    Duration::from_micros(h.finish() % micros)
}

/// Check an age-based batch (`recycle_dead`, `purge_succeeded`); `None` when `limit` is 0
/// and there is nothing to do.
fn aged_batch(
    op: &'static str,
    older_than: Duration,
    limit: usize,
) -> Result<Option<Checked<AgedBatch>>> {
    limits::check_duration(op, "older_than", older_than)?;
    limits::check_limit(op, limit)?;
    Ok((limit > 0).then(|| Checked::new(AgedBatch { older_than, limit })))
}

fn decode_all(rows: Vec<RawTask>) -> Result<Vec<Task>> {
    rows.into_iter().map(RawTask::decode).collect()
}

/// `flags` when it has one flag per input, else an `Unexpected` error.
fn one_flag_each(op: &'static str, flags: Vec<bool>, n: usize) -> Result<Vec<bool>> {
    if flags.len() == n {
        Ok(flags)
    } else {
        Err(Error::new(
            ErrorKind::Unexpected,
            op,
            format!("the driver answered {} flags for {n} inputs", flags.len()),
        ))
    }
}

fn too_long(error: &str) -> bool {
    error.len() > limits::MAX_ERROR_BYTES
}

/// `mark` with its error text cut to [`limits::MAX_ERROR_BYTES`].
fn bound_error(mark: &Mark) -> Mark {
    let cut = |e: &str| limits::bounded_error(e).to_owned();
    let action = match &mark.action {
        MarkAction::Retry { delay, error } => MarkAction::Retry {
            delay: *delay,
            error: cut(error),
        },
        MarkAction::Fail { error } => MarkAction::Fail { error: cut(error) },
        other => other.clone(),
    };
    Mark {
        lease: mark.lease,
        action,
    }
}
