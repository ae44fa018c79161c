//! **For backend authors**: the driver interface a database backend implements. An
//! application never needs this module.
//!
//! A backend is two types:
//!
//! - a **driver** ([`Driver`]): one method per statement shape (insert a task, claim by id,
//!   claim a batch, apply marks…), which runs the backend's SQL and reads the rows it
//!   returns into [`RawTask`]s. Nothing else: it never checks its input (every argument
//!   that needs a check arrives as [`Checked`], which only core can make), never sorts
//!   results, never decodes a status code, never retries;
//! - a **store** ([`Backend`]): the type applications hold. It names its driver, and core
//!   gives it the whole [`TaskStore`](crate::TaskStore) contract: input validation
//!   first, empty-input shortcuts, row decoding, result order, the operation named in
//!   every error, and the retry of operations the database rolled back because of a
//!   concurrent transaction ([`ErrorKind::Contention`](crate::ErrorKind::Contention)).
//!
//! So a new store operation is one method of [`TaskStore`](crate::TaskStore) written once
//! in core, and one statement shape here that each backend answers with its SQL. The
//! conformance suite (`backstop-testkit`) then runs every case of the contract on the
//! backend.
//!
//! ```
//! use backstop_core::driver::{Backend, Driver};
//!
//! /// A backend's store: what applications open, migrate and hand to the engine.
//! #[derive(Clone)]
//! struct MyStore {
//!     driver: std::sync::Arc<dyn Driver>,
//! }
//!
//! impl Backend for MyStore {
//!     fn driver(&self) -> &dyn Driver {
//!         &*self.driver
//!     }
//! }
//! // `MyStore` is now a `TaskStore`: `store.enqueue(task)` validates the task, calls
//! // `Driver::enqueue`, and names `enqueue` in any error.
//! ```

mod args;
mod barrier;
mod batch;
mod checks;
mod classify;
mod connect;
mod enqueue;
mod gate;
mod insert;
mod key_walk;
mod keys;
mod limited;
mod plain;
mod plan;
mod progress;
mod release;
mod retry;
mod rows;
mod saga;
mod saga_advance;
mod saga_write;
pub mod schema;
#[cfg(any(
    feature = "sqlx-postgres",
    feature = "sqlx-mysql",
    feature = "sqlx-sqlite"
))]
mod sqlx;
mod statement;
mod text;
mod transactional;
mod url;

use std::time::Duration;

use async_trait::async_trait;
use chrono::{DateTime, Utc};

use crate::error::Result;
use crate::limits::StoreConfig;
use crate::model::{
    Audit, Lease, Mark, NewTask, Owner, Queue, QueueChange, QueueLogEntry, Recycled, SagaFilter,
    SagaId, SagaStart, SagaStarted, TaskEdit, TaskFilter, TaskId,
};

#[cfg(any(
    feature = "sqlx-postgres",
    feature = "sqlx-mysql",
    feature = "sqlx-sqlite"
))]
pub use self::sqlx::sqlx_error;
pub use args::{AgedBatch, Buckets, Change, Checked, Claim};
pub use barrier::BarrierPlan;
pub use batch::{
    insert_document, plain_document, rows_params, values_rows, EnqueueBatch, InsertTexts,
    INSERT_ROW_KEYS, MAX_INSERT_BYTES, MAX_INSERT_ROWS,
};
pub(crate) use checks::{
    check_ids, check_leases, check_marks, check_start, check_task, check_tasks, due_created,
    enqueued, enqueued_all,
};
pub use classify::{mysql_error_kind, postgres_error_kind, sqlite_error_kind};
pub use connect::ConnectFailure;
pub use enqueue::{insert_params, EnqueuePlan, EnqueueSql, EnqueueStep, RunAt, INSERT_PARAMS};
pub use gate::{round_robin, starts_per_key, Gate, Partitions};
pub use insert::{Existing, InsertStep, Inserted, KeyedInsert};
pub use key_walk::{KeyCursors, KeyStep, KeyWalk, KEYS_PER_CLAIM};
pub use keys::{release_order_keys, release_order_keys_blocking};
pub use limited::claim_limited_types;
pub use plain::{
    is_plain, is_plain_params, plain_literal, plain_params, plain_row, plain_row_written,
    PlainValue, PLAIN_OWN, TABLE_DEFAULTS,
};
pub use plan::TxPlan;
pub(crate) use progress::needs_undo;
pub use progress::{Decision, SagaChange, SagaProgress, StepEvent, StepState};
pub use release::{
    KeyRelease, KeyReleasePlan, KeysRelease, KeysReleasePlan, KeysStep, ReleaseStep,
};
pub use retry::retry_contention;
pub use rows::{
    read_queue, read_queue_entry, RawAudit, RawBarrier, RawSaga, RawSagaStep, RawStats, RawTask,
    TaskRow, AUDIT_COLUMNS, BARRIER_COLUMNS, COLUMNS, COLUMN_COUNT, QUEUE_AUDIT_COLUMNS,
    QUEUE_COLUMNS, SAGA_COLUMNS, SAGA_STEP_COLUMNS,
};
pub use saga::SagaStartPlan;
pub use saga_advance::{AdvanceDocuments, Advanced, SagaAdvance};
pub use saga_write::{saga_write_blocking, saga_write_on, SagaWrite, SagaWritten};
pub(crate) use saga_write::{step_advance, step_applied, step_write};
pub use statement::{
    Answer, BlockingTxConnection, Dialect, OwnConnection, Returns, Statement, TxConnection, Value,
};
pub use text::{
    applied_ids, count_sql, ddl_script, list_sql, list_values, mark_rounds, millis, ListArg,
    ListDialect,
};
pub use transactional::{
    complete_on, complete_on_blocking, enqueue_on, enqueue_on_blocking, Attempt, Transactional,
};
pub use url::{UrlOptions, UrlStore};

/// The statement shapes of a backend. See the [module docs](self) for how a driver
/// fits under the [`TaskStore`](crate::TaskStore) contract.
///
/// # Contract
///
/// Every method is one unit of work in the database: it commits whole or changes
/// nothing. Each names the [`TaskStore`](crate::TaskStore) method it serves; that
/// method's `# Contract` lines are what the SQL must do (the conformance suite checks
/// them through the store). In addition:
///
/// - **Input is checked.** What arrives as [`Checked`] is within the limits named on
///   the method; empty batches and zero limits never arrive.
/// - **Database time** everywhere (`now()` on the server; in an embedded database, this
///   machine's clock read once per statement).
/// - **Errors** carry a kind and `is_temporary()`; the operation name is set by the
///   store. A driver reports a failure it knows rolled the whole method back because of
///   a concurrent transaction (deadlock, serialization failure, lock wait timeout) as
///   [`ErrorKind::Contention`](crate::ErrorKind::Contention), and only such a failure:
///   the store then runs the method again. A lost connection is `Unavailable`: the work
///   may or may not have been applied, so the store does not repeat it.
/// - **Result order** does not matter: the store sorts claims oldest first.
#[async_trait]
pub trait Driver: Send + Sync + 'static {
    /// The store's settings (table, payload limit, retries).
    fn config(&self) -> &StoreConfig;

    /// [`migrate_to`](crate::TaskStore::migrate_to): under the migration lock, create the
    /// version table if missing, read the versions applied, and apply what
    /// [`schema::pending`] says is missing to reach `target`, each migration recorded in
    /// the version table (see [`schema`] for the rules). Safe to run from several
    /// instances at once.
    async fn migrate(&self, target: u32) -> Result<()>;

    /// [`enqueue`](crate::TaskStore::enqueue): insert `task` pending (due at database-now
    /// plus its delay), or find the existing task with its `(event_type, biz_key)`.
    /// Checked: every field (see [`NewTask::validate`]) against this store's payload
    /// limit.
    async fn enqueue(&self, task: Checked<&NewTask>) -> Result<Inserted>;

    /// [`enqueue_many`](crate::TaskStore::enqueue_many): run an [`EnqueueBatch`] of
    /// `tasks` on one transaction of the store's own, and commit; what each enqueue did,
    /// in order. Checked: 1 to [`MAX_ENQUEUE_MANY`](crate::limits::MAX_ENQUEUE_MANY)
    /// tasks, each as for [`enqueue`](Self::enqueue).
    async fn enqueue_many(&self, tasks: Checked<&[NewTask]>) -> Result<Vec<Inserted>>;

    /// [`claim_by_id`](crate::TaskStore::claim_by_id): claim task `id` for `owner` if it is
    /// pending and due, and its type neither paused nor limited; the row as claimed.
    async fn claim_by_id(&self, id: TaskId, owner: &Owner) -> Result<Option<RawTask>>;

    /// [`claim_batch`](crate::TaskStore::claim_batch): claim up to `limit` due pending
    /// tasks of `event_types` for `owner`, first by `(priority, next_run_at, id)`,
    /// skipping rows another claim holds. Checked: see [`Claim`].
    ///
    /// The cost of a claim must not grow with the backlog of due tasks: each event type's
    /// due rows of each priority level ([`Priority::ALL`](crate::Priority::ALL)) are read in index order
    /// (`event_type, priority, next_run_at, id`) and the read stops at `limit`; the types
    /// and levels are several such walks, merged — never a sort of every due row.
    ///
    /// Types with a concurrency limit (a queue row with `concurrency > 0`, not paused)
    /// are passed by in those walks and claimed after them, each in a transaction of its
    /// own: lock the type's queue row (`FOR UPDATE`), then count its running tasks in a
    /// later statement (a snapshot taken after the lock was granted, at READ COMMITTED),
    /// and claim at most `concurrency - running` (and what is left of `limit`), through
    /// [`claim_limited_types`], which never drops the rows the batch already holds.
    /// Learn which requested types are limited without a round trip of its own
    /// (PostgreSQL sends that read with the claim, pipelined; MySQL's claim answers a
    /// marker row per limited type with a due task; SQLite reads it in its write
    /// transaction).
    async fn claim_batch(&self, claim: Checked<Claim<'_>>) -> Result<Vec<RawTask>>;

    /// [`recycle_dead`](crate::TaskStore::recycle_dead). Checked: see [`AgedBatch`]. The
    /// counts must come from the statements that changed the rows.
    async fn recycle_dead(&self, batch: Checked<AgedBatch>) -> Result<Recycled>;

    /// [`heartbeat`](crate::TaskStore::heartbeat): one flag per lease, in order.
    /// Checked: 1 to [`MAX_LEASES`](crate::limits::MAX_LEASES) leases.
    async fn heartbeat(&self, leases: Checked<&[Lease]>) -> Result<Vec<bool>>;

    /// [`set_output`](crate::TaskStore::set_output): `UPDATE … SET output = ? WHERE id =
    /// ? AND status = 3 AND lease = ?`; whether a row changed. Checked: valid JSON within
    /// [`MAX_OUTPUT_BYTES`](crate::limits::MAX_OUTPUT_BYTES).
    async fn set_output(&self, lease: Lease, output: Checked<&str>) -> Result<bool>;

    /// [`mark`](crate::TaskStore::mark): one flag per mark, in order, all in one
    /// transaction. Checked: 1 to `MAX_LEASES` marks, retry delays at most
    /// `MAX_INTERVAL`, error messages already cut to
    /// [`MAX_ERROR_BYTES`](crate::limits::MAX_ERROR_BYTES). A set-based statement applies
    /// at most one mark per row: see [`mark_rounds`].
    async fn mark(&self, marks: Checked<&[Mark]>) -> Result<Vec<bool>>;

    /// [`mark_and_claim`](crate::TaskStore::mark_and_claim), the hand-over, in one
    /// transaction: read the claim's one event type's queue row ([`Gate`]); for a type
    /// that [`hands_over_unlocked`](Gate::hands_over_unlocked), apply the marks as
    /// [`mark`](Self::mark) does, count how many of the applied ones are of the type and
    /// the type's running tasks, and claim at most
    /// [`handover_room`](Gate::handover_room); for another limited type, lock the row
    /// first (before the marks, so every claim of the type takes its locks in one
    /// order), apply the marks, and claim as [`claim_batch`](Self::claim_batch) claims a
    /// limited type; then commit. The claim is `None` when the type has no limit: the
    /// marks are committed, and core claims as `claim_batch`. A driver may send the
    /// marks and the unlocked claim before it reads the row (a type that handed over
    /// unlocked last time): finding then a limit that takes the row, it commits the marks
    /// it applied, claims nothing, and answers `None`, so core's `claim_batch` claims
    /// the type under its row. Checked: the marks as `mark`'s; the claim as
    /// `claim_batch`'s, of one event type.
    async fn mark_and_claim(
        &self,
        marks: Checked<&[Mark]>,
        claim: Checked<Claim<'_>>,
    ) -> Result<(Vec<bool>, Option<Vec<RawTask>>)>;

    /// [`manual_reset`](crate::TaskStore::manual_reset): reset task `id` if it is failed,
    /// or running with `updated_at` older than `stuck_after`, returning the row as reset
    /// (read in the reset's transaction); else say why not. Checked: `stuck_after` at
    /// most `MAX_INTERVAL`.
    async fn manual_reset(&self, id: TaskId, stuck_after: Checked<Duration>) -> Result<Change>;

    /// [`cancel`](crate::TaskStore::cancel): if task `id` is pending or running, set it
    /// cancelled (status 4), `lease + 1`, `updated_at = now`, and append an audit entry
    /// (`cancel`, operator, reason, now) in the same transaction; return the row as
    /// changed. Else say why not, writing nothing. Checked: the audit.
    async fn cancel(&self, id: TaskId, audit: Checked<&Audit>) -> Result<Change>;

    /// [`edit`](crate::TaskStore::edit): if task `id` is pending or waiting (status 0
    /// or 5), set `next_run_at` as `edit.due` says (now; now plus the delay; the time,
    /// or now when it is past) and `payload` to `edit.payload`, keeping what the edit
    /// leaves out, `updated_at = now`, and append an audit entry (`edit.action()`) in
    /// the same transaction; return the row as changed. Else say why not, writing
    /// nothing. Checked: the edit (against this store's payload limit) and the audit.
    async fn edit(
        &self,
        id: TaskId,
        edit: Checked<&TaskEdit>,
        audit: Checked<&Audit>,
    ) -> Result<Change>;

    /// [`delete`](crate::TaskStore::delete): if task `id` exists and is not running,
    /// delete it and append an audit entry (`delete`) in the same transaction; return the
    /// row as it was. Else say why not, writing nothing. Checked: the audit.
    async fn delete(&self, id: TaskId, audit: Checked<&Audit>) -> Result<Change>;

    /// [`reset`](crate::TaskStore::reset): if task `id`'s status is one of `from`
    /// (codes of failed or cancelled; the two may be equal), set it pending with
    /// `attempts = 0`, `snoozes = 0`, `next_run_at = now`, owner cleared, `updated_at = now` (`lease` and
    /// `last_error` kept), and append an audit entry (`reset`) in the same transaction;
    /// return the row as changed. Else say why not, writing nothing.
    async fn reset(&self, id: TaskId, from: [i16; 2], audit: Checked<&Audit>) -> Result<Change>;

    /// [`audit_log`](crate::TaskStore::audit_log): task `id`'s entries, oldest first.
    async fn audit_log(&self, id: TaskId) -> Result<Vec<RawAudit>>;

    /// [`get`](crate::TaskStore::get).
    async fn get(&self, id: TaskId) -> Result<Option<RawTask>>;

    /// [`list`](crate::TaskStore::list), in id order. Checked: `limit` 1 to `MAX_BATCH`,
    /// a valid event type, `older_than` at most `MAX_INTERVAL`.
    async fn list(&self, filter: Checked<&TaskFilter>) -> Result<Vec<RawTask>>;

    /// [`stats`](crate::TaskStore::stats), or with `backlog_only`
    /// [`backlog`](crate::TaskStore::backlog): the counts of every status but succeeded,
    /// read through the status indexes (a cost that does not grow with the succeeded
    /// rows retained).
    async fn stats(&self, backlog_only: bool) -> Result<RawStats>;

    /// [`purge_finished`](crate::TaskStore::purge_finished): tasks of status code
    /// `status` (1 succeeded, 2 failed, 4 cancelled) whose `updated_at` is older than the
    /// batch's age, oldest first, through the `(status, updated_at)` index. Checked:
    /// `status` is one of those three; see [`AgedBatch`].
    async fn purge_finished(&self, status: Checked<i16>, batch: Checked<AgedBatch>) -> Result<u64>;

    /// [`purge_audit`](crate::TaskStore::purge_audit): the entries of the tasks' audit
    /// log and of the queues' log whose `at` is older than the batch's age, oldest (lowest
    /// id) first, up to the batch's limit from each; the sum. Checked: see [`AgedBatch`].
    async fn purge_audit(&self, batch: Checked<AgedBatch>) -> Result<u64>;

    /// [`purge_event_types`](crate::TaskStore::purge_event_types): the registry's rows
    /// whose `last_seen_at` is older than the batch's age. Checked: see [`AgedBatch`].
    async fn purge_event_types(&self, batch: Checked<AgedBatch>) -> Result<u64>;

    /// [`purge_barrier`](crate::TaskStore::purge_barrier): the barrier records whose
    /// `created_at` is older than the batch's age, oldest first. Checked: see
    /// [`AgedBatch`].
    async fn purge_barrier(&self, batch: Checked<AgedBatch>) -> Result<u64>;

    /// [`barrier_records`](crate::TaskStore::barrier_records): the rows of
    /// [`BARRIER_COLUMNS`] of global transaction `gid`, ordered by `created_at`, then
    /// branch and operation, at most [`MAX_BATCH`](crate::limits::MAX_BATCH). Checked:
    /// `gid` as [`BranchCall::new`](crate::BranchCall::new) checks it.
    async fn barrier_records(&self, gid: Checked<&str>) -> Result<Vec<RawBarrier>>;

    /// [`start_saga`](crate::TaskStore::start_saga): core's [`SagaStartPlan`] run in one
    /// transaction of the store's own, committed when it finishes and rolled back on an
    /// error (on an embedded database, in its write transaction).
    async fn start_saga(&self, start: Checked<&SagaStart>) -> Result<SagaStarted>;

    /// [`saga`](crate::TaskStore::saga): the row of [`SAGA_COLUMNS`] of the saga of this
    /// definition name and key, if any. Checked: the name and key are within
    /// [`SagaDef::start`](crate::SagaDef::start)'s limits.
    async fn saga(&self, name: Checked<&str>, key: Checked<&str>) -> Result<Option<RawSaga>>;

    /// [`saga_step_many`](crate::TaskStore::saga_step_many),
    /// [`command_saga`](crate::TaskStore::command_saga),
    /// [`nudge_saga`](crate::TaskStore::nudge_saga): core's [`saga_write_on`] (or
    /// [`saga_write_blocking`]) run in one transaction of the store's own, committed when
    /// it returns and rolled back on an error. Checked: a report's step, key, output
    /// (JSON, within the payload limit) and reason (cut); a command's audit.
    async fn saga_write(&self, write: Checked<&SagaWrite>) -> Result<SagaWritten>;

    /// [`saga_step_many`](crate::TaskStore::saga_step_many) in its common case, in one
    /// statement where the dialect allows: each [`SagaAdvance`] says what it writes, all
    /// or none, and the advances of one call are of distinct sagas. For each, in order:
    /// what each task's insert did, in order, and the rows of those it inserted claimed
    /// ([`Advanced`]), or `None` when it wrote nothing (the saga is not running at the
    /// step's group, or the lease is gone), and the store runs
    /// [`saga_write`](Self::saga_write) for it instead, which decides and answers as
    /// always. One statement for many advances is one transaction: an error writes none
    /// of them. Checked: the tasks, as an enqueue's.
    ///
    /// Called only when [`advances_sagas`](Self::advances_sagas) says so; the default
    /// writes nothing.
    async fn saga_advance(
        &self,
        advances: Checked<&[SagaAdvance]>,
    ) -> Result<Vec<Option<Advanced>>> {
        Ok(vec![None; advances.len()])
    }

    /// Whether this driver implements [`saga_advance`](Self::saga_advance): when not
    /// (the default), the store does not build the advance of each report, and every
    /// report takes the general write.
    fn advances_sagas(&self) -> bool {
        false
    }

    /// [`saga_steps`](crate::TaskStore::saga_steps): the rows of [`SAGA_STEP_COLUMNS`]
    /// of saga `id`, by position.
    async fn saga_steps(&self, id: SagaId) -> Result<Vec<RawSagaStep>>;

    /// [`saga_by_id`](crate::TaskStore::saga_by_id): the row of [`SAGA_COLUMNS`] of saga
    /// `id`, if any.
    async fn saga_by_id(&self, id: SagaId) -> Result<Option<RawSaga>>;

    /// [`sagas`](crate::TaskStore::sagas): the rows of [`SAGA_COLUMNS`] that match, by
    /// id. Checked: see [`SagaFilter`] (`limit` 1 to `MAX_BATCH`, a
    /// valid name, an age at most `MAX_INTERVAL`).
    async fn sagas(&self, filter: Checked<&SagaFilter>) -> Result<Vec<RawSaga>>;

    /// [`saga_backlog`](crate::TaskStore::saga_backlog): `(name, status code, count,
    /// milliseconds since the oldest updated_at)` per name and status, of the sagas in
    /// status 0 (running), 1 (compensating) or 4 (parked).
    async fn saga_backlog(&self) -> Result<Vec<(String, i64, i64, i64)>>;

    /// [`saga_log`](crate::TaskStore::saga_log): saga `id`'s operators' log entries
    /// (`saga_id, action, operator, reason, at`, read with [`RawAudit::read`]), oldest
    /// first.
    async fn saga_log(&self, id: SagaId) -> Result<Vec<RawAudit>>;

    /// [`throughput`](crate::TaskStore::throughput): `(event_type, status code, bucket,
    /// count)` of the succeeded (1) and failed (2) tasks whose `updated_at` is within
    /// `window` of database time, at most `cap` per status (the most recent), the bucket
    /// being `⌊(now − updated_at) / bucket⌋` (core clamps it into the window). Through the
    /// `(status, updated_at)` index, walked from the newest.
    async fn throughput(&self, buckets: Checked<Buckets>) -> Result<Vec<(String, i64, i64, i64)>>;

    /// [`delete_finished`](crate::TaskStore::delete_finished): the listed tasks still of
    /// status code `status`. Checked: `status` is 1, 2 or 4; 1 to `MAX_BATCH` ids.
    async fn delete_finished(&self, status: Checked<i16>, ids: Checked<&[TaskId]>) -> Result<u64>;

    /// [`release_order_keys`](crate::TaskStore::release_order_keys): run [`KeyRelease`]
    /// for each key, in the order given (sorted and distinct), each in a transaction of
    /// its own, or [`KeysRelease`] for all of them in one; the tasks made pending.
    /// Checked: 1 to `MAX_BATCH` valid keys.
    async fn release_order_keys(&self, keys: Checked<&[String]>) -> Result<Vec<TaskId>>;

    /// [`order_keys`](crate::TaskStore::order_keys): up to `limit` keys of the keys table
    /// greater than `after`, in order. Checked: `limit` 1 to `MAX_BATCH`.
    async fn order_keys(&self, after: Option<&str>, limit: Checked<usize>) -> Result<Vec<String>>;

    /// [`register_event_types`](crate::TaskStore::register_event_types): upsert each type
    /// into the handlers table (`first_seen_at` kept, `last_seen_at` = now). Checked: 1 to
    /// `MAX_EVENT_TYPES` distinct valid types.
    async fn register_event_types(&self, event_types: Checked<&[String]>) -> Result<()>;

    /// [`event_types`](crate::TaskStore::event_types): every row of the handlers table as
    /// `(event_type, first_seen_at, last_seen_at)`.
    async fn event_types(&self) -> Result<Vec<(String, DateTime<Utc>, DateTime<Utc>)>>;

    /// [`set_queue`](crate::TaskStore::set_queue), in one transaction: upsert the queue
    /// row of `event_type` with the change's settings ([`QueueChange::columns`]: `paused`
    /// and `concurrency`, each kept where `None`; a new row takes 0 for both) and
    /// `updated_at = now`, changing an existing row only when a setting differs; when it
    /// inserted a row that is not all zeros, or changed one, append an entry (the change's
    /// [`action`](QueueChange::action), operator, reason, now) to the queues'
    /// operators' log; then read the row ([`QUEUE_COLUMNS`]). Checked: the event type
    /// and the audit.
    async fn set_queue(
        &self,
        event_type: Checked<&str>,
        change: QueueChange,
        audit: Checked<&Audit>,
    ) -> Result<Queue>;

    /// [`queues`](crate::TaskStore::queues): every row of the queues table
    /// ([`QUEUE_COLUMNS`]), in any order.
    async fn queues(&self) -> Result<Vec<Queue>>;

    /// [`queue_log`](crate::TaskStore::queue_log): the entries of `event_type`
    /// ([`QUEUE_AUDIT_COLUMNS`]), oldest first. Checked: the event type.
    async fn queue_log(&self, event_type: Checked<&str>) -> Result<Vec<QueueLogEntry>>;

    /// Announce through the store's notifier ([`StoreConfig::notifier`]), if it has
    /// one, that tasks of `event_type` committed in a transaction of the store's own
    /// ([`Announcer::committed`]): core calls it after `enqueue`, `enqueue_many` and
    /// `start_saga` for the due tasks they created. Nothing to override.
    fn announce_committed(&self, event_type: &str) {
        if let Some(a) = &self.config().announcer {
            a.committed(event_type);
        }
    }

    /// As [`announce_committed`](Self::announce_committed) for task `id`, the only one
    /// its enqueue created: announced by id ([`Announcer::committed_task`]). Nothing to
    /// override.
    fn announce_committed_task(&self, id: TaskId, event_type: &str) {
        if let Some(a) = &self.config().announcer {
            a.committed_task(id, event_type);
        }
    }

    /// Announce that an operator's change took the lease of task `id` if it was running
    /// (so the engine holding it tells its handler at once: [`Wake::Revoked`]): core
    /// calls it after a `cancel` or `manual_reset` committed, and returns once it is
    /// announced (or given up on: best effort, logged). The default announces
    /// through the store's notifier, if it has one ([`Announcer::revoked`]); a backend
    /// that announces on its own (PostgreSQL's `NOTIFY`) adds its announcement to that.
    ///
    /// [`Wake::Revoked`]: crate::Wake::Revoked
    async fn announce_revoked(&self, id: TaskId) {
        if let Some(a) = &self.config().announcer {
            a.revoked(id).await;
        }
    }

    /// Announce that a queue change committed that may let tasks of `event_type` start
    /// (a resume, a limit raised, removed or partitioned): core calls it after such a
    /// [`set_queue`](crate::TaskStore::set_queue), so listening engines poll the type at
    /// once. The default announces through the store's notifier, if it has one
    /// ([`Announcer::committed`]); a backend that announces on its own (PostgreSQL's
    /// `NOTIFY`) adds its announcement to that. Best effort: a failure is logged.
    async fn announce_queue_change(&self, event_type: &str) {
        self.announce_committed(event_type);
    }

    /// Announce tasks of `event_type` written on the caller's transaction, through the
    /// store's notifier if it has one, once `written` can be read from a connection of
    /// the store's own: [`Announcer::when_visible`] with a read of the row. Core calls
    /// it after the enqueues and saga starts of [`Transactional`] that created due
    /// tasks. The default announces nothing (a backend that announces in its own SQL,
    /// as PostgreSQL's `NOTIFY` does, needs nothing more).
    fn announce_when_visible(&self, _event_type: &str, _written: Written) {}

    /// The task table's name as this backend's statements write it (quoted, and
    /// qualified by its schema where it has one), and how they spell a list's
    /// conditions: what core needs to write a statement of its own in this backend's
    /// SQL ([`count_sql`]), run with [`run`](Self::run).
    fn tasks_table(&self) -> (&str, &ListDialect);

    /// Run `statement` (core's own, in this backend's SQL: see
    /// [`tasks_table`](Self::tasks_table)) on a pooled connection, in a transaction of
    /// its own, and answer as its [`Returns`] asks. The operations core writes itself run
    /// here: [`count_matching`](crate::TaskStore::count_matching).
    async fn run(&self, statement: &Statement<'_>) -> Result<Answer>;

    /// The statements of an enqueue and of a completion on the caller's transaction
    /// ([`Transactional`]), in this backend's SQL. `enqueue` runs
    /// the same statements on the store's own connection.
    fn enqueue_sql(&self) -> &dyn EnqueueSql;
}

/// A backend's store: it names its [`Driver`], and core implements
/// [`TaskStore`](crate::TaskStore) for it (see the [module docs](self)).
pub trait Backend: Send + Sync + 'static {
    /// The driver that runs this store's SQL.
    fn driver(&self) -> &dyn Driver;
}

/// Everything a driver implementation names, in one import:
/// `use backstop_core::driver::prelude::*;`.
pub mod prelude {
    pub use super::{
        applied_ids, claim_limited_types, complete_on, complete_on_blocking, count_sql, ddl_script,
        enqueue_on, enqueue_on_blocking, insert_params, list_sql, list_values, mark_rounds, millis,
        round_robin,
        schema::{self, Migration},
        starts_per_key, AgedBatch, Backend, BarrierPlan, Buckets, Change, Checked, Claim,
        ConnectFailure, Driver, EnqueueBatch, EnqueuePlan, EnqueueSql, EnqueueStep, Existing, Gate,
        InsertStep, Inserted, KeyCursors, KeyRelease, KeyStep, KeyWalk, KeyedInsert, KeysRelease,
        KeysStep, ListArg, ListDialect, Partitions, RawAudit, RawBarrier, RawSaga, RawSagaStep,
        RawStats, RawTask, ReleaseStep, RunAt, TaskRow, AUDIT_COLUMNS, BARRIER_COLUMNS, COLUMNS,
        COLUMN_COUNT, SAGA_COLUMNS, SAGA_STEP_COLUMNS,
    };
    pub use super::{
        insert_document, is_plain, is_plain_params, plain_document, plain_literal, plain_params,
        plain_row, plain_row_written, rows_params, values_rows, Answer, BlockingTxConnection,
        Dialect, InsertTexts, PlainValue, Returns, Statement, Transactional, TxConnection, Value,
        INSERT_PARAMS, INSERT_ROW_KEYS, PLAIN_OWN,
    };
    pub use super::{read_queue, read_queue_entry, Written, QUEUE_AUDIT_COLUMNS, QUEUE_COLUMNS};
    pub use super::{
        release_order_keys, release_order_keys_blocking, saga_write_blocking, saga_write_on,
        AdvanceDocuments, Advanced, KeyReleasePlan, KeysReleasePlan, OwnConnection, SagaAdvance,
        SagaStartPlan, SagaWrite, SagaWritten, TxPlan,
    };
    pub use crate::error::{Error, ErrorKind, Result};
    pub use crate::limits::StoreConfig;
    pub use crate::model::{
        Audit, Barrier, BarrierRecord, BranchCall, BranchOp, Due, Enqueued, Lease, Mark,
        MarkAction, NewTask, Owner, Queue, QueueChange, QueueLogEntry, Recycled, Saga, SagaDef,
        SagaFilter, SagaId, SagaStart, SagaStarted, SagaStatus, Status, StepApplied, StepReport,
        TaskEdit, TaskFilter, TaskId, WhenParked,
    };
    pub use async_trait::async_trait;
}

/// Chainable setters named after the fields of an options struct (inside its `impl`
/// block), the style of every options type of backstop: `Options::default().field(v)`.
///
/// ```
/// #[derive(Default)]
/// #[non_exhaustive]
/// pub struct MyOptions {
///     /// Pool size.
///     pub max_connections: usize,
/// }
///
/// impl MyOptions {
///     backstop_core::driver::setters! {
///         /// See [`max_connections`](Self::max_connections).
///         max_connections: usize,
///     }
/// }
/// assert_eq!(MyOptions::default().max_connections(4).max_connections, 4);
/// ```
#[doc(inline)]
pub use crate::__setters as setters;
pub use crate::notify::{Admit, Announcer, Flight, Throttle, Written, REVOKED_WAIT};

/// The `table(name)` shortcut of a backend's options, for a `config: StoreConfig` field:
/// `Options::default().table("jobs")` (see [`StoreConfig::table`]).
#[doc(inline)]
pub use crate::__table_setter as table_setter;

#[doc(hidden)]
#[macro_export]
macro_rules! __table_setter {
    () => {
        /// Use another table name (a shortcut for `StoreConfig::table`).
        pub fn table(mut self, table: impl Into<String>) -> Self {
            self.config.table = table.into();
            self
        }
    };
}

#[doc(hidden)]
#[macro_export]
macro_rules! __setters {
    ($($(#[$doc:meta])* $field:ident: $ty:ty),+ $(,)?) => {$(
        $(#[$doc])*
        pub fn $field(mut self, $field: $ty) -> Self {
            self.$field = $field;
            self
        }
    )+};
}
