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
//!   concurrent transaction ([`ErrorKind::Contention`]).
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
//! // `Driver::insert`, and names `enqueue` in any error.
//! ```

mod classify;
pub mod schema;

pub use classify::{mysql_error_kind, postgres_error_kind, sqlite_error_kind};

use std::collections::{BTreeSet, HashSet};
use std::future::Future;
use std::ops::Deref;
use std::time::Duration;

use async_trait::async_trait;
use chrono::{DateTime, Utc};

use crate::error::{Error, ErrorKind, Result};
use crate::limits::StoreConfig;
use crate::model::{
    Audit, Backoff, Enqueued, Lease, Mark, NewTask, Owner, Priority, Recycled, RetryPolicy, Status,
    Task, TaskFilter, TaskId, WhenParked,
};
pub use crate::tx::{insert_params, EnqueueBatch, EnqueuePlan, EnqueueSql, EnqueueStep, RunAt};

/// A value the store layer in core has checked against the contract's limits (see each
/// [`Driver`] method for what was checked). A driver reads it (`Deref`) but cannot make
/// one: so no input reaches a driver unchecked.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Checked<T>(T);

impl<T> Checked<T> {
    /// Only core checks.
    pub(crate) fn new(value: T) -> Self {
        Checked(value)
    }

    /// The checked value.
    pub fn into_inner(self) -> T {
        self.0
    }

    /// A borrow of the checked value, still checked.
    pub fn as_ref(&self) -> Checked<&T> {
        Checked(&self.0)
    }
}

impl<T: Clone> Checked<&T> {
    /// An owned copy of the checked value (to move into a closure or a thread), still
    /// checked.
    pub fn cloned(self) -> Checked<T> {
        Checked(self.0.clone())
    }
}

impl<'t, T> Checked<&'t [T]> {
    /// Each item of a checked slice, still checked.
    pub fn each(self) -> impl Iterator<Item = Checked<&'t T>> {
        self.0.iter().map(Checked)
    }
}

impl<T: Clone> Checked<&[T]> {
    /// An owned copy of the checked items (to move into a closure or a thread), still
    /// checked.
    pub fn cloned_vec(self) -> Checked<Vec<T>> {
        Checked(self.0.to_vec())
    }
}

impl<T> Checked<Vec<T>> {
    /// A borrow of the checked items as a slice, still checked.
    pub fn as_slice(&self) -> Checked<&[T]> {
        Checked(self.0.as_slice())
    }
}

impl<T> Deref for Checked<T> {
    type Target = T;
    fn deref(&self) -> &T {
        &self.0
    }
}

/// A batch claim's arguments (see [`Driver::claim_batch`]).
#[derive(Debug, Clone, Copy)]
pub struct Claim<'a> {
    /// Who claims.
    pub owner: &'a Owner,
    /// 1 to [`MAX_EVENT_TYPES`](crate::limits::MAX_EVENT_TYPES) distinct, valid event
    /// types.
    pub event_types: &'a [String],
    /// 1 to [`MAX_BATCH`](crate::limits::MAX_BATCH).
    pub limit: usize,
}

/// An age-based batch's arguments (see [`Driver::recycle_dead`],
/// [`Driver::purge_succeeded`]).
#[derive(Debug, Clone, Copy)]
pub struct AgedBatch {
    /// Rows whose `updated_at` is older than this, at most
    /// [`MAX_INTERVAL`](crate::limits::MAX_INTERVAL).
    pub older_than: Duration,
    /// 1 to [`MAX_BATCH`](crate::limits::MAX_BATCH) rows, oldest `updated_at` first.
    pub limit: usize,
}

/// A window of recent time cut into buckets (see [`Driver::throughput`]).
#[derive(Debug, Clone, Copy)]
pub struct Buckets {
    /// How far back: at least one bucket, at most [`MAX_THROUGHPUT_BUCKETS`] buckets and
    /// [`MAX_INTERVAL`](crate::limits::MAX_INTERVAL).
    ///
    /// [`MAX_THROUGHPUT_BUCKETS`]: crate::limits::MAX_THROUGHPUT_BUCKETS
    pub window: Duration,
    /// The bucket's width: at least one second.
    pub bucket: Duration,
    /// Count at most this many finished tasks per status, the most recent
    /// ([`MAX_THROUGHPUT_ROWS`](crate::limits::MAX_THROUGHPUT_ROWS)).
    pub cap: usize,
}

/// What a driver's insert did (made by [`KeyedInsert`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Inserted {
    /// The task's id: the new row's, or the existing row's for a duplicate.
    pub id: TaskId,
    /// Whether the row was inserted (`false`: a duplicate under the task's dedup rule).
    pub created: bool,
    /// The task's status code: pending (0) for a new task, the existing task's for a
    /// duplicate.
    pub status: i16,
    /// Whether a duplicate replaced the pending task's payload.
    pub replaced: bool,
}

impl Inserted {
    /// A new row `id`.
    pub fn created(id: TaskId) -> Self {
        Inserted {
            id,
            created: true,
            status: Status::Pending.code(),
            replaced: false,
        }
    }
}

/// The task a new enqueue met under its key (`dedup_slot = 0`), as
/// [`KeyedInsert::existing`] reads it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Existing {
    /// Its id.
    pub id: TaskId,
    /// Its status code.
    pub status: i64,
    /// How long ago it was created, in milliseconds of database time.
    pub age_ms: i64,
}

/// A step of [`KeyedInsert`] for the driver to run, on the connection the insert runs on
/// (the caller's transaction, or the store's own).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum InsertStep {
    /// The task has an order key: lock the key first (as [`ReleaseStep::LockKey`]), so
    /// the tasks of a key get their ids in the order their enqueues hold the key (and
    /// commit); answer [`KeyedInsert::key_locked`].
    LockKey,
    /// Insert the task with `dedup_slot = 0`, doing nothing on a conflict of the unique
    /// key `(biz_key, event_type, dedup_slot)`; answer [`KeyedInsert::inserted`] with the
    /// new id, or `None` on a conflict.
    Insert,
    /// Read the task holding the key (`event_type`, `biz_key`, `dedup_slot = 0`) with a
    /// locking read (it sees the latest committed row whatever the isolation level);
    /// answer [`KeyedInsert::existing`].
    ReadExisting,
    /// Free the key held by task `id`: `SET dedup_slot = id WHERE id = ? AND dedup_slot =
    /// 0` (a finished task keeps its row, under a slot of its own); answer
    /// [`KeyedInsert::released`].
    Release(TaskId),
    /// Replace task `id`'s payload with the new task's if it is still pending
    /// (`WHERE id = ? AND status = 0`; `updated_at` = now); answer
    /// [`KeyedInsert::replaced`] with whether a row changed.
    Replace(TaskId),
    /// The new task has an order key (it was inserted waiting, status 5): run
    /// [`KeyRelease`] for its key on the same connection, then answer
    /// [`KeyedInsert::promoted`] with the task it promoted, if any.
    ReleaseKey,
    /// Done: the answer of the insert.
    Done(Inserted),
}

/// The one protocol of an enqueue under a [`Dedup`](crate::Dedup) rule, which every
/// driver runs with its own SQL: insert; on a conflict, read the task holding the key and
/// let the rule decide — a duplicate (answered with that task, its payload replaced if
/// asked and still pending), or a finished task whose key is freed so the insert is tried
/// again. Each statement is guarded on its own (`dedup_slot = 0`, `status = 0`), so the
/// protocol is safe with or without a transaction around it, and against concurrent
/// enqueues of the same key (one inserts, the others become its duplicates).
///
/// ```
/// use backstop_core::driver::{Existing, InsertStep, KeyedInsert};
/// use backstop_core::{Dedup, NewTask, StoreConfig};
///
/// let task = NewTask::new("E", "k").dedup(Dedup::WhileActive);
/// let mut insert = KeyedInsert::new(&task);
/// assert_eq!(insert.first(), InsertStep::Insert); // no order key: no key lock first
/// // the key is held by a succeeded task: it is freed and the insert tried again
/// assert_eq!(insert.inserted(None).unwrap(), InsertStep::ReadExisting);
/// let old = Existing { id: 7, status: 1, age_ms: 10 };
/// assert_eq!(insert.existing(Some(old)).unwrap(), InsertStep::Release(7));
/// assert_eq!(insert.released().unwrap(), InsertStep::Insert);
/// match insert.inserted(Some(8)).unwrap() {
///     InsertStep::Done(done) => assert!(done.created && done.id == 8),
///     other => panic!("{other:?}"),
/// }
/// ```
#[derive(Debug)]
pub struct KeyedInsert<'t> {
    task: &'t NewTask,
    rule: crate::Dedup,
    rounds: u32,
    last: Option<Existing>,
    new_id: Option<TaskId>,
}

impl<'t> KeyedInsert<'t> {
    /// Most inserts tried (each after freeing a finished task's key, or a task that
    /// vanished between the conflict and the read) before answering a temporary
    /// `Conflict`: only a storm of concurrent enqueues and deletes of one key gets there.
    const MAX_ROUNDS: u32 = 8;

    /// The protocol for `task` (which the store has checked).
    pub fn new(task: &'t NewTask) -> Self {
        KeyedInsert {
            task,
            rule: task.dedup_rule(),
            rounds: 0,
            last: None,
            new_id: None,
        }
    }

    /// The first step: [`InsertStep::LockKey`] for a task with an order key, else
    /// [`InsertStep::Insert`].
    pub fn first(&self) -> InsertStep {
        match self.task.order() {
            Some(_) => InsertStep::LockKey,
            None => InsertStep::Insert,
        }
    }

    /// The order key's locking read found its row (`false`: deleted meanwhile; lock
    /// again).
    pub fn key_locked(&mut self, found: bool) -> Result<InsertStep> {
        if found {
            return Ok(InsertStep::Insert);
        }
        self.rounds += 1;
        if self.rounds >= Self::MAX_ROUNDS {
            return self.again();
        }
        Ok(InsertStep::LockKey)
    }

    /// The status a new row is inserted with: pending (0), or waiting (5) for a task with
    /// an order key (the release that follows makes it pending when it is first in line).
    pub fn initial_status(&self) -> i16 {
        match self.task.order() {
            Some(_) => Status::Waiting.code(),
            None => Status::Pending.code(),
        }
    }

    /// The insert answered `id` (`None`: the key is held).
    pub fn inserted(&mut self, id: Option<TaskId>) -> Result<InsertStep> {
        self.rounds += 1;
        Ok(match id {
            Some(id) if self.task.order().is_some() => {
                self.new_id = Some(id);
                InsertStep::ReleaseKey
            }
            Some(id) => InsertStep::Done(Inserted::created(id)),
            None => InsertStep::ReadExisting,
        })
    }

    /// The order key's release after the insert promoted `promoted` (`None`: nothing, the
    /// new task waits behind an earlier one).
    pub fn promoted(&mut self, promoted: Option<TaskId>) -> Result<InsertStep> {
        let id = self.new_id.ok_or_else(|| {
            Error::new(
                ErrorKind::Unexpected,
                "enqueue",
                "the order key was released before the task was inserted",
            )
        })?;
        let status = if promoted == Some(id) {
            Status::Pending
        } else {
            Status::Waiting
        };
        Ok(InsertStep::Done(Inserted {
            status: status.code(),
            ..Inserted::created(id)
        }))
    }

    /// The locking read answered `row` (`None`: the task holding the key went away).
    pub fn existing(&mut self, row: Option<Existing>) -> Result<InsertStep> {
        let Some(row) = row else {
            return self.again();
        };
        let status = Status::from_code(row.status)?;
        let age = Duration::from_millis(u64::try_from(row.age_ms).unwrap_or(0));
        if !self.rule.is_duplicate(status, age) {
            return Ok(InsertStep::Release(row.id));
        }
        let first_look = self.last.is_none_or(|l| l.id != row.id);
        self.last = Some(row);
        if self.task.replaces_pending() && status == Status::Pending && first_look {
            return Ok(InsertStep::Replace(row.id));
        }
        Ok(InsertStep::Done(Inserted {
            id: row.id,
            created: false,
            status: status.code(),
            replaced: false,
        }))
    }

    /// The key was freed (by this release, or by a concurrent one).
    pub fn released(&mut self) -> Result<InsertStep> {
        self.again()
    }

    /// The payload replacement changed a row (`true`), or found the task no longer
    /// pending (`false`: it is read again and answered as it now is).
    pub fn replaced(&mut self, applied: bool) -> Result<InsertStep> {
        match (applied, self.last) {
            (true, Some(row)) => Ok(InsertStep::Done(Inserted {
                id: row.id,
                created: false,
                status: Status::Pending.code(),
                replaced: true,
            })),
            _ => Ok(InsertStep::ReadExisting),
        }
    }

    fn again(&mut self) -> Result<InsertStep> {
        if self.rounds >= Self::MAX_ROUNDS {
            return Err(Error::new(
                ErrorKind::Conflict,
                "enqueue",
                format!(
                    "task {}/{} kept conflicting with concurrent changes of its key; retry",
                    self.task.event_type(),
                    self.task.biz_key()
                ),
            )
            .with_temporary(true));
        }
        Ok(InsertStep::Insert)
    }
}

/// What a driver's fenced change of one task did ([`Driver::reset`],
/// [`Driver::cancel`], [`Driver::delete`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Reset {
    /// The task was changed: the row as the change left it (as it was, for a delete).
    Done(Box<RawTask>),
    /// No task has this id.
    Missing,
    /// The task exists but may not be changed so; its status code.
    Refused(i64),
}

/// A step of [`KeyRelease`] for the driver to run, in one transaction (the caller's, for
/// an enqueue).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReleaseStep {
    /// Lock the order key: insert it into the keys table if missing (doing nothing on a
    /// conflict), then read it with a locking read (`FOR UPDATE`; SQLite's write lock is
    /// enough); answer [`KeyRelease::locked`] with whether the row was there (a
    /// concurrent release may have just deleted it).
    LockKey,
    /// Is a task of the key in the way: pending or running, or failed and blocking
    /// (`status IN (0, 3) OR (status = 2 AND order_block = 1)`)? A locking read (`FOR
    /// SHARE`), which sees the latest committed rows; answer [`KeyRelease::blocker`].
    ReadBlocker,
    /// The first waiting task of the key (`status = 5`, lowest id), locked; answer
    /// [`KeyRelease::next`].
    ReadNext,
    /// Make task `id` pending: `status = 0`, `next_run_at` = the later of its own and
    /// now, `updated_at` = now, `WHERE id = ? AND status = 5`; answer
    /// [`KeyRelease::promoted`] with whether a row changed.
    Promote(TaskId),
    /// Nothing of the key is left to run: delete its row from the keys table; answer
    /// [`KeyRelease::dropped`].
    DropKey,
    /// Done: the task made pending, if any.
    Done(Option<TaskId>),
}

/// The one protocol that moves an order key along (see
/// [`NewTask::order_key`](crate::NewTask::order_key)), which every driver runs with its own
/// SQL: under the key's lock, if no task of the key is in the way, make its first waiting
/// task pending. Run after a task of the key is enqueued (in the enqueue's transaction),
/// after one finishes, and by the engine's key sweep; idempotent.
///
/// Enqueues and releases of one key serialize on the key's row, so two tasks of a key are
/// never pending or running at once, whatever commits when.
///
/// ```
/// use backstop_core::driver::{KeyRelease, ReleaseStep};
/// let mut r = KeyRelease::new();
/// assert_eq!(r.first(), ReleaseStep::LockKey);
/// assert_eq!(r.locked(true).unwrap(), ReleaseStep::ReadBlocker);
/// assert_eq!(r.blocker(false), ReleaseStep::ReadNext);
/// assert_eq!(r.next(Some(9)), ReleaseStep::Promote(9));
/// assert_eq!(r.promoted(true).unwrap(), ReleaseStep::Done(Some(9)));
/// ```
#[derive(Debug, Default)]
pub struct KeyRelease {
    rounds: u32,
    candidate: Option<TaskId>,
}

impl KeyRelease {
    /// Most rounds (a lock row deleted under us, a candidate taken by another release)
    /// before giving up with a temporary `Conflict`.
    const MAX_ROUNDS: u32 = 8;

    /// A release of one key.
    pub fn new() -> Self {
        KeyRelease::default()
    }

    /// The first step: [`ReleaseStep::LockKey`].
    pub fn first(&self) -> ReleaseStep {
        ReleaseStep::LockKey
    }

    /// The locking read found the key's row (`false`: deleted meanwhile; lock again).
    pub fn locked(&mut self, found: bool) -> Result<ReleaseStep> {
        if found {
            return Ok(ReleaseStep::ReadBlocker);
        }
        self.again()
    }

    /// Whether a task of the key is in the way.
    pub fn blocker(&mut self, found: bool) -> ReleaseStep {
        if found {
            ReleaseStep::Done(None)
        } else {
            ReleaseStep::ReadNext
        }
    }

    /// The first waiting task of the key, if any.
    pub fn next(&mut self, id: Option<TaskId>) -> ReleaseStep {
        self.candidate = id;
        match id {
            Some(id) => ReleaseStep::Promote(id),
            None => ReleaseStep::DropKey,
        }
    }

    /// Whether the promotion changed the row (`false`: it is no longer waiting; look
    /// again).
    pub fn promoted(&mut self, applied: bool) -> Result<ReleaseStep> {
        if applied {
            return Ok(ReleaseStep::Done(self.candidate));
        }
        self.again().map(|_| ReleaseStep::ReadBlocker)
    }

    /// The key's row was deleted.
    pub fn dropped(&mut self) -> ReleaseStep {
        ReleaseStep::Done(None)
    }

    fn again(&mut self) -> Result<ReleaseStep> {
        self.rounds += 1;
        if self.rounds >= Self::MAX_ROUNDS {
            return Err(Error::new(
                ErrorKind::Conflict,
                "release_order_keys",
                "an order key kept changing under its release; retry",
            )
            .with_temporary(true));
        }
        Ok(ReleaseStep::LockKey)
    }
}

/// A step of [`KeysRelease`] for the driver to run, all in one transaction.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum KeysStep {
    /// Insert each key into the keys table, doing nothing for those already there (in
    /// the order given); answer [`KeysRelease::inserted`].
    InsertKeys(Vec<String>),
    /// Lock the keys' rows with a locking read in key order (`ORDER BY order_key FOR
    /// UPDATE`); answer [`KeysRelease::locked`] with the keys found (one just deleted by a
    /// concurrent release is not, and is left for a release of its own).
    LockKeys(Vec<String>),
    /// The tasks in the way, as for [`ReleaseStep::ReadBlocker`] (a locking read, `FOR
    /// SHARE`), of all these keys; answer [`KeysRelease::blockers`] with their keys
    /// (repeats allowed).
    ReadBlockers(Vec<String>),
    /// The first waiting task (`status = 5`, lowest id) of each of these keys, locked
    /// (`FOR UPDATE`); answer [`KeysRelease::next`] with `(key, id)` pairs.
    ReadNext(Vec<String>),
    /// Make these tasks pending, as [`ReleaseStep::Promote`] does for one (`WHERE id IN
    /// (…) AND status = 5`); answer [`KeysRelease::promoted`] with how many rows changed.
    Promote(Vec<TaskId>),
    /// Delete these keys' rows from the keys table (nothing of them is left to run);
    /// answer [`KeysRelease::dropped`].
    DropKeys(Vec<String>),
    /// Done: commit; then release each of [`KeysRelease::leftover`] with [`KeyRelease`].
    Done,
}

/// [`KeyRelease`] for many keys at once, set-based: a fixed number of statements in one
/// transaction, whatever the number of keys, where one release per key costs a
/// transaction of four or five statements each. The engine releases the keys of every
/// batch of outcomes it records, so this is what an ordered drain's speed rests on.
///
/// The keys must be sorted and distinct: every release locks key rows in key order, so
/// two batch releases of overlapping keys wait for each other instead of deadlocking. A
/// key row deleted between the insert and the lock is left over for a release of its
/// own. A driver whose batch fails with a temporary error (a deadlock the database broke,
/// say) rolls back and releases the keys one by one: the batch is an optimization, the
/// per-key protocol the definition.
///
/// ```
/// use backstop_core::driver::{KeysRelease, KeysStep};
/// let keys = vec!["a".to_string(), "b".to_string(), "c".to_string()];
/// let mut r = KeysRelease::new(keys.clone());
/// assert_eq!(r.first(), KeysStep::InsertKeys(keys.clone()));
/// assert_eq!(r.inserted(), KeysStep::LockKeys(keys.clone()));
/// assert_eq!(r.locked(keys.clone()), KeysStep::ReadBlockers(keys.clone()));
/// // "a" has a task running; "b" has one waiting; "c" has nothing left
/// assert_eq!(r.blockers(vec!["a".into()]), KeysStep::ReadNext(vec!["b".into(), "c".into()]));
/// assert_eq!(r.next(vec![("b".into(), 7)]), KeysStep::Promote(vec![7]));
/// assert_eq!(r.promoted(1).unwrap(), KeysStep::DropKeys(vec!["c".into()]));
/// assert_eq!(r.dropped(), KeysStep::Done);
/// assert_eq!(r.promoted_ids(), &[7]);
/// assert!(r.leftover().is_empty());
/// ```
#[derive(Debug)]
pub struct KeysRelease {
    keys: Vec<String>,
    leftover: Vec<String>,
    promoted: Vec<TaskId>,
    to_drop: Vec<String>,
}

impl KeysRelease {
    /// A release of `keys` (sorted and distinct).
    pub fn new(keys: Vec<String>) -> Self {
        KeysRelease {
            keys,
            leftover: Vec::new(),
            promoted: Vec::new(),
            to_drop: Vec::new(),
        }
    }

    /// The first step: [`KeysStep::InsertKeys`].
    pub fn first(&self) -> KeysStep {
        KeysStep::InsertKeys(self.keys.clone())
    }

    /// The keys are in the keys table.
    pub fn inserted(&mut self) -> KeysStep {
        KeysStep::LockKeys(self.keys.clone())
    }

    /// The keys whose rows the locking read found (and now holds).
    pub fn locked(&mut self, found: Vec<String>) -> KeysStep {
        let found: BTreeSet<String> = found.into_iter().collect();
        self.leftover = self
            .keys
            .iter()
            .filter(|k| !found.contains(*k))
            .cloned()
            .collect();
        self.keys.retain(|k| found.contains(k));
        if self.keys.is_empty() {
            return KeysStep::Done;
        }
        KeysStep::ReadBlockers(self.keys.clone())
    }

    /// The keys that have a task in the way: they stay as they are.
    pub fn blockers(&mut self, blocked: Vec<String>) -> KeysStep {
        let blocked: BTreeSet<String> = blocked.into_iter().collect();
        self.keys.retain(|k| !blocked.contains(k));
        if self.keys.is_empty() {
            return KeysStep::Done;
        }
        KeysStep::ReadNext(self.keys.clone())
    }

    /// The first waiting task of each free key that has one.
    pub fn next(&mut self, first: Vec<(String, TaskId)>) -> KeysStep {
        let with_next: BTreeSet<&str> = first.iter().map(|(k, _)| k.as_str()).collect();
        self.to_drop = self
            .keys
            .iter()
            .filter(|k| !with_next.contains(k.as_str()))
            .cloned()
            .collect();
        self.promoted = first.into_iter().map(|(_, id)| id).collect();
        self.promoted.sort_unstable();
        self.promoted.dedup();
        if !self.promoted.is_empty() {
            return KeysStep::Promote(self.promoted.clone());
        }
        self.drop_step()
    }

    /// How many of the tasks the promotion changed. They were locked by the read that
    /// found them waiting, so all of them; fewer is a temporary `Conflict` (the driver
    /// rolls back and releases the keys one by one).
    pub fn promoted(&mut self, changed: u64) -> Result<KeysStep> {
        if changed != self.promoted.len() as u64 {
            return Err(Error::new(
                ErrorKind::Conflict,
                "release_order_keys",
                format!(
                    "{changed} of {} waiting tasks were promoted; retry",
                    self.promoted.len()
                ),
            )
            .with_temporary(true));
        }
        Ok(self.drop_step())
    }

    /// The keys without work left were deleted.
    pub fn dropped(&mut self) -> KeysStep {
        self.to_drop.clear();
        KeysStep::Done
    }

    fn drop_step(&mut self) -> KeysStep {
        if self.to_drop.is_empty() {
            KeysStep::Done
        } else {
            KeysStep::DropKeys(self.to_drop.clone())
        }
    }

    /// The tasks made pending (once [`KeysStep::Done`]).
    pub fn promoted_ids(&self) -> &[TaskId] {
        &self.promoted
    }

    /// The keys whose rows were gone at the lock: release each on its own, after the
    /// commit.
    pub fn leftover(&self) -> &[String] {
        &self.leftover
    }
}

/// The audit table's columns, in the order [`RawAudit::read`] reads them.
pub const AUDIT_COLUMNS: &str = "task_id, action, operator, reason, at";

/// An audit log entry as a driver reads it (a row of [`AUDIT_COLUMNS`]).
#[derive(Debug, Clone, PartialEq, Eq)]
#[allow(missing_docs)] // the columns of the audit table
pub struct RawAudit {
    pub task_id: TaskId,
    pub action: String,
    pub operator: String,
    pub reason: String,
    pub at: DateTime<Utc>,
}

impl RawAudit {
    /// Read a row of [`AUDIT_COLUMNS`].
    pub fn read<R: TaskRow + ?Sized>(r: &R) -> std::result::Result<RawAudit, R::Error> {
        Ok(RawAudit {
            task_id: r.int(0)?,
            action: r.text(1)?,
            operator: r.text(2)?,
            reason: r.text(3)?,
            at: r.time(4)?,
        })
    }
}

/// The task table's columns, in the order [`RawTask::read`] reads them: select (or
/// return) exactly these, in this order, for every statement shape that answers rows.
pub const COLUMNS: &str = "id, event_type, biz_key, payload, status, attempts, \
    max_attempts, retry_strategy, retry_interval_ms, retry_max_interval_ms, next_run_at, \
    owner, lease, last_error, created_at, updated_at, priority, retry_jitter_pct, order_key, \
    order_block, timeout_ms";

/// Why a store's first connection failed, as its driver read the error: the one
/// wording and [`ErrorKind`] of each cause on every backend. A refused connection and a
/// connect timeout are temporary; an unknown host, refused credentials and a missing
/// database are configuration errors (retrying cannot help).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum ConnectFailure {
    /// Nothing accepted the connection at that address.
    Refused,
    /// The connect did not complete in time.
    TimedOut,
    /// The host name does not resolve.
    UnknownHost,
    /// The server refused the user or password.
    AccessDenied,
    /// The database named in the URL does not exist.
    UnknownDatabase,
    /// TLS failed: the server's certificate is not trusted (wrong CA, wrong host name),
    /// the server does not offer TLS, or it requires TLS the URL did not ask for.
    Tls,
}

impl ConnectFailure {
    /// The error of `open_store`: `backend` (as users name it), `server` (host, port and
    /// user; never the password), the cause, then `detail` (the driver's own words).
    ///
    /// ```
    /// use backstop_core::driver::ConnectFailure;
    /// use backstop_core::ErrorKind;
    /// let e = ConnectFailure::Refused.error("MySQL", "127.0.0.1:1 as user \"app\"", "os error 111");
    /// assert_eq!(e.kind(), ErrorKind::Unavailable);
    /// assert!(e.to_string().contains("cannot connect to MySQL at 127.0.0.1:1"));
    /// ```
    pub fn error(self, backend: &str, server: &str, detail: impl std::fmt::Display) -> Error {
        let (kind, why) = match self {
            ConnectFailure::Refused => (
                ErrorKind::Unavailable,
                "connection refused (is the server running, on that port?)",
            ),
            ConnectFailure::TimedOut => (ErrorKind::Unavailable, "connect timed out"),
            ConnectFailure::UnknownHost => (
                ErrorKind::Config,
                "unknown host (check the URL's host name)",
            ),
            ConnectFailure::AccessDenied => (
                ErrorKind::Config,
                "access denied (check the URL's user and password)",
            ),
            ConnectFailure::UnknownDatabase => (
                ErrorKind::Config,
                "unknown database (create it, or check the URL's path)",
            ),
            ConnectFailure::Tls => (
                ErrorKind::Config,
                "TLS failed (is the URL's CA the one that signed the server's certificate, \
                 for this host name? does the server offer TLS, or require it?)",
            ),
        };
        Error::new(
            kind,
            "open_store",
            format!("cannot connect to {backend} at {server}: {why}: {detail}"),
        )
    }

    /// [`Tls`](Self::Tls) when a driver's words for a failed connect are about TLS: a
    /// certificate refused in the handshake, a server without TLS, or one that refuses
    /// an unencrypted connection ("no encryption", PostgreSQL's `pg_hba.conf`).
    ///
    /// ```
    /// use backstop_core::driver::ConnectFailure;
    /// assert_eq!(ConnectFailure::of_tls("invalid peer certificate: UnknownIssuer"), Some(ConnectFailure::Tls));
    /// assert_eq!(ConnectFailure::of_tls("Connection refused"), None);
    /// ```
    pub fn of_tls(words: &str) -> Option<ConnectFailure> {
        ["certificate", "TLS", "SSL", "no encryption"]
            .iter()
            .any(|w| words.contains(w))
            .then_some(ConnectFailure::Tls)
    }

    /// The cause of a failed connect's I/O error, if it is one of these.
    pub fn of_io(e: &std::io::Error) -> Option<ConnectFailure> {
        match e.kind() {
            std::io::ErrorKind::ConnectionRefused => Some(ConnectFailure::Refused),
            std::io::ErrorKind::TimedOut => Some(ConnectFailure::TimedOut),
            // the resolver's "failed to lookup address information"
            _ if e.to_string().contains("lookup") => Some(ConnectFailure::UnknownHost),
            _ => None,
        }
    }
}

/// How many columns [`COLUMNS`] names: the position of a column a statement selects
/// after them.
pub const COLUMN_COUNT: usize = 21;

/// One row of [`COLUMNS`] as the database returned it, read column by column (`i` is the
/// column's position). A driver implements it on its driver's row type, in its stored
/// form: any integer width as `i64`, times as UTC.
pub trait TaskRow {
    /// The driver's error.
    type Error;
    /// An integer column.
    fn int(&self, i: usize) -> std::result::Result<i64, Self::Error>;
    /// A text column that is never NULL.
    fn text(&self, i: usize) -> std::result::Result<String, Self::Error>;
    /// A text column that may be NULL.
    fn opt_text(&self, i: usize) -> std::result::Result<Option<String>, Self::Error>;
    /// An integer column that may be NULL.
    fn opt_int(&self, i: usize) -> std::result::Result<Option<i64>, Self::Error>;
    /// A timestamp column.
    fn time(&self, i: usize) -> std::result::Result<DateTime<Utc>, Self::Error>;
}

/// A task row as a driver reads it: the columns in their stored form. Core decodes it
/// into a [`Task`] (status code, counts, backoff) and reports a corrupt row as
/// `Unexpected`.
#[derive(Debug, Clone, PartialEq, Eq)]
#[allow(missing_docs)] // the columns of the task table
pub struct RawTask {
    pub id: TaskId,
    pub event_type: String,
    pub biz_key: String,
    pub payload: String,
    pub status: i64,
    pub attempts: i64,
    pub max_attempts: i64,
    pub retry_strategy: String,
    pub retry_interval_ms: i64,
    pub retry_max_interval_ms: i64,
    pub next_run_at: DateTime<Utc>,
    pub owner: Option<String>,
    pub lease: i64,
    pub last_error: Option<String>,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
    pub priority: i64,
    pub retry_jitter_pct: i64,
    pub order_key: Option<String>,
    pub order_block: i64,
    pub timeout_ms: Option<i64>,
}

impl RawTask {
    /// Read a row of [`COLUMNS`].
    pub fn read<R: TaskRow + ?Sized>(r: &R) -> std::result::Result<RawTask, R::Error> {
        Ok(RawTask {
            id: r.int(0)?,
            event_type: r.text(1)?,
            biz_key: r.text(2)?,
            payload: r.text(3)?,
            status: r.int(4)?,
            attempts: r.int(5)?,
            max_attempts: r.int(6)?,
            retry_strategy: r.text(7)?,
            retry_interval_ms: r.int(8)?,
            retry_max_interval_ms: r.int(9)?,
            next_run_at: r.time(10)?,
            owner: r.opt_text(11)?,
            lease: r.int(12)?,
            last_error: r.opt_text(13)?,
            created_at: r.time(14)?,
            updated_at: r.time(15)?,
            priority: r.int(16)?,
            retry_jitter_pct: r.int(17)?,
            order_key: r.opt_text(18)?,
            order_block: r.int(19)?,
            timeout_ms: r.opt_int(20)?,
        })
    }

    /// The task this row holds.
    pub(crate) fn decode(self) -> Result<Task> {
        let id = self.id;
        let bad = |what: &str| {
            Error::new(
                ErrorKind::Unexpected,
                "decode_task",
                format!("task {id} has an invalid {what}"),
            )
        };
        let dur = |ms: i64, what: &str| -> Result<Duration> {
            u64::try_from(ms)
                .map(Duration::from_millis)
                .map_err(|_| bad(what))
        };
        Ok(Task {
            id,
            status: Status::from_code(self.status)?,
            attempts: u32::try_from(self.attempts).map_err(|_| bad("attempts"))?,
            retry: RetryPolicy {
                max_attempts: u32::try_from(self.max_attempts).map_err(|_| bad("max_attempts"))?,
                backoff: Backoff::from_parts(
                    &self.retry_strategy,
                    dur(self.retry_interval_ms, "retry_interval_ms")?,
                    dur(self.retry_max_interval_ms, "retry_max_interval_ms")?,
                )?,
                jitter_pct: u8::try_from(self.retry_jitter_pct)
                    .ok()
                    .filter(|p| *p <= 100)
                    .ok_or_else(|| bad("retry_jitter_pct"))?,
            },
            priority: u8::try_from(self.priority)
                .ok()
                .and_then(|p| Priority::new(p).ok())
                .ok_or_else(|| bad("priority"))?,
            when_parked: match self.order_block {
                0 => WhenParked::Skip,
                _ => WhenParked::Block,
            },
            order_key: self.order_key,
            timeout: match self.timeout_ms {
                Some(ms) => Some(dur(ms, "timeout_ms")?),
                None => None,
            },
            next_run_at: self.next_run_at,
            created_at: self.created_at,
            updated_at: self.updated_at,
            event_type: self.event_type,
            biz_key: self.biz_key,
            payload: self.payload,
            owner: self.owner,
            lease: self.lease,
            last_error: self.last_error,
        })
    }
}

/// The counts a driver's stats query reads.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RawStats {
    /// `(event_type, status code, count)` of every non-empty group.
    pub counts: Vec<(String, i64, i64)>,
    /// How long the oldest due pending task has been due, in milliseconds (database
    /// time); `None` when none is due.
    pub oldest_due_pending_ms: Option<i64>,
}

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
///   [`ErrorKind::Contention`], and only such a failure:
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
    async fn insert(&self, task: Checked<&NewTask>) -> Result<Inserted>;

    /// [`enqueue_many`](crate::TaskStore::enqueue_many): run an [`EnqueueBatch`] of
    /// `tasks` on one transaction of the store's own, and commit; what each enqueue did,
    /// in order. Checked: 1 to [`MAX_ENQUEUE_MANY`](crate::limits::MAX_ENQUEUE_MANY)
    /// tasks, each as for [`insert`](Self::insert).
    async fn insert_many(&self, tasks: Checked<&[NewTask]>) -> Result<Vec<Inserted>>;

    /// [`grab_by_id`](crate::TaskStore::grab_by_id): claim task `id` for `owner` if it is
    /// pending and due; the row as claimed.
    async fn claim_by_id(&self, id: TaskId, owner: &Owner) -> Result<Option<RawTask>>;

    /// [`grab_batch`](crate::TaskStore::grab_batch): claim up to `limit` due pending
    /// tasks of `event_types` for `owner`, first by `(priority, next_run_at, id)`,
    /// skipping rows another claim holds. Checked: see [`Claim`].
    ///
    /// The cost of a claim must not grow with the backlog of due tasks: each event type's
    /// due rows of each priority level ([`Priority::ALL`]) are read in index order
    /// (`event_type, priority, next_run_at, id`) and the read stops at `limit`; the types
    /// and levels are several such walks, merged — never a sort of every due row.
    async fn claim_batch(&self, claim: Checked<Claim<'_>>) -> Result<Vec<RawTask>>;

    /// [`recycle_dead`](crate::TaskStore::recycle_dead). Checked: see [`AgedBatch`]. The
    /// counts must come from the statements that changed the rows.
    async fn recycle_dead(&self, batch: Checked<AgedBatch>) -> Result<Recycled>;

    /// [`heartbeat`](crate::TaskStore::heartbeat): one flag per lease, in order.
    /// Checked: 1 to [`MAX_LEASES`](crate::limits::MAX_LEASES) leases.
    async fn heartbeat(&self, leases: Checked<&[Lease]>) -> Result<Vec<bool>>;

    /// [`mark`](crate::TaskStore::mark): one flag per mark, in order, all in one
    /// transaction. Checked: 1 to `MAX_LEASES` marks, retry delays at most
    /// `MAX_INTERVAL`, error messages already cut to
    /// [`MAX_ERROR_BYTES`](crate::limits::MAX_ERROR_BYTES). A set-based statement applies
    /// at most one mark per row: see [`mark_rounds`].
    async fn mark(&self, marks: Checked<&[Mark]>) -> Result<Vec<bool>>;

    /// [`manual_reset`](crate::TaskStore::manual_reset): reset task `id` if it is failed,
    /// or running with `updated_at` older than `stuck_after`, returning the row as reset
    /// (read in the reset's transaction); else say why not. Checked: `stuck_after` at
    /// most `MAX_INTERVAL`.
    async fn reset(&self, id: TaskId, stuck_after: Checked<Duration>) -> Result<Reset>;

    /// [`cancel`](crate::TaskStore::cancel): if task `id` is pending or running, set it
    /// cancelled (status 4), `lease + 1`, `updated_at = now`, and append an audit entry
    /// (`cancel`, operator, reason, now) in the same transaction; return the row as
    /// changed. Else say why not, writing nothing. Checked: the audit.
    async fn cancel(&self, id: TaskId, audit: Checked<&Audit>) -> Result<Reset>;

    /// [`delete`](crate::TaskStore::delete): if task `id` exists and is not running,
    /// delete it and append an audit entry (`delete`) in the same transaction; return the
    /// row as it was. Else say why not, writing nothing. Checked: the audit.
    async fn delete(&self, id: TaskId, audit: Checked<&Audit>) -> Result<Reset>;

    /// [`reset`](crate::TaskStore::reset): if task `id`'s status is one of `expected`
    /// (codes of failed or cancelled; the two may be equal), set it pending with
    /// `attempts = 0`, `next_run_at = now`, owner cleared, `updated_at = now` (`lease` and
    /// `last_error` kept), and append an audit entry (`reset`) in the same transaction;
    /// return the row as changed. Else say why not, writing nothing.
    async fn retry(&self, id: TaskId, expected: [i16; 2], audit: Checked<&Audit>) -> Result<Reset>;

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

    /// [`purge_succeeded`](crate::TaskStore::purge_succeeded). Checked: see [`AgedBatch`].
    async fn purge_succeeded(&self, batch: Checked<AgedBatch>) -> Result<u64>;

    /// [`throughput`](crate::TaskStore::throughput): `(event_type, status code, bucket,
    /// count)` of the succeeded (1) and failed (2) tasks whose `updated_at` is within
    /// `window` of database time, at most `cap` per status (the most recent), the bucket
    /// being `⌊(now − updated_at) / bucket⌋` (core clamps it into the window). Through the
    /// `(status, updated_at)` index, walked from the newest.
    async fn throughput(&self, buckets: Checked<Buckets>) -> Result<Vec<(String, i64, i64, i64)>>;

    /// [`delete_succeeded`](crate::TaskStore::delete_succeeded). Checked: 1 to
    /// `MAX_BATCH` ids.
    async fn delete_succeeded(&self, ids: Checked<&[TaskId]>) -> Result<u64>;

    /// [`release_order_keys`](crate::TaskStore::release_order_keys): run [`KeyRelease`]
    /// for each key, in the order given (sorted and distinct), each in a transaction of
    /// its own, or [`KeysRelease`] for all of them in one; the tasks made pending.
    /// Checked: 1 to `MAX_BATCH` valid keys.
    async fn release_keys(&self, keys: Checked<&[String]>) -> Result<Vec<TaskId>>;

    /// [`order_keys`](crate::TaskStore::order_keys): up to `limit` keys of the keys table
    /// greater than `after`, in order. Checked: `limit` 1 to `MAX_BATCH`.
    async fn order_keys(&self, after: Option<&str>, limit: Checked<usize>) -> Result<Vec<String>>;

    /// [`register_event_types`](crate::TaskStore::register_event_types): upsert each type
    /// into the handlers table (`first_seen_at` kept, `last_seen_at` = now). Checked: 1 to
    /// `MAX_EVENT_TYPES` distinct valid types.
    async fn register_types(&self, event_types: Checked<&[String]>) -> Result<()>;

    /// [`event_types`](crate::TaskStore::event_types): every row of the handlers table as
    /// `(event_type, first_seen_at, last_seen_at)`.
    async fn types(&self) -> Result<Vec<(String, DateTime<Utc>, DateTime<Utc>)>>;

    /// The statements of an enqueue and of a completion on the caller's transaction
    /// ([`Transactional`](crate::Transactional)), in this backend's SQL. `insert` runs
    /// the same statements on the store's own connection.
    fn enqueue_sql(&self) -> &dyn EnqueueSql;
}

/// A backend's store: it names its [`Driver`], and core implements
/// [`TaskStore`](crate::TaskStore) for it (see the [module docs](self)).
pub trait Backend: Send + Sync + 'static {
    /// The driver that runs this store's SQL.
    fn driver(&self) -> &dyn Driver;
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
/// Applied, the attempt's [`Context`](crate::Context) records it, so the engine does not
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
pub async fn complete_on<F, Fut>(cx: &crate::Context, mark: F) -> Result<()>
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
pub fn complete_on_blocking<F>(cx: &crate::Context, mark: F) -> Result<()>
where
    F: FnOnce(Lease) -> Result<bool>,
{
    let applied = mark(cx.lease()).map_err(|e| e.with_operation("complete_tx"))?;
    completed(cx, applied)
}

fn completed(cx: &crate::Context, applied: bool) -> Result<()> {
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

/// `task` checked against the store's limits, as `enqueue` checks it.
pub(crate) fn check_task<'t>(
    config: &StoreConfig,
    task: &'t NewTask,
) -> Result<Checked<&'t NewTask>> {
    task.validate(config.max_payload_bytes)?;
    Ok(Checked::new(task))
}

/// `tasks` checked against the store's limits, as `enqueue_many` checks them: at most
/// [`MAX_ENQUEUE_MANY`](crate::limits::MAX_ENQUEUE_MANY), each as `enqueue` checks it
/// (the first bad one named by its place in the batch).
pub(crate) fn check_tasks<'t>(
    config: &StoreConfig,
    tasks: &'t [NewTask],
) -> Result<Checked<&'t [NewTask]>> {
    let max = crate::limits::MAX_ENQUEUE_MANY;
    if tasks.len() > max {
        return Err(Error::invalid_input(
            "enqueue_many",
            format!("at most {max} tasks in one batch, got {}", tasks.len()),
        ));
    }
    for (i, task) in tasks.iter().enumerate() {
        task.validate(config.max_payload_bytes).map_err(|e| {
            Error::new(
                e.kind(),
                "enqueue_many",
                format!("task {i} of the batch: {}", e.message()),
            )
        })?;
    }
    Ok(Checked::new(tasks))
}

/// The answers of a batch enqueue that `inserted` each of `tasks`, in order.
pub(crate) fn enqueued_all(inserted: Vec<Inserted>, tasks: &[NewTask]) -> Result<Vec<Enqueued>> {
    if inserted.len() != tasks.len() {
        return Err(Error::new(
            ErrorKind::Unexpected,
            "enqueue_many",
            format!("{} answers for {} tasks", inserted.len(), tasks.len()),
        ));
    }
    // counted once per event type, not once per task
    let mut created: Vec<(&str, u64)> = Vec::new();
    let answers = inserted
        .into_iter()
        .zip(tasks)
        .map(|(inserted, task)| {
            if inserted.created {
                match created.iter_mut().find(|(t, _)| *t == task.event_type()) {
                    Some((_, n)) => *n += 1,
                    None => created.push((task.event_type(), 1)),
                }
            }
            answer(inserted, task)
        })
        .collect::<Result<Vec<_>>>()?;
    for (event_type, n) in created {
        metrics::counter!("backstop_enqueued_total", "event_type" => event_type.to_owned())
            .increment(n);
    }
    Ok(answers)
}

/// The answer of an enqueue that `inserted` `task`.
///
/// Every created task is counted here, whichever path inserted it (`TaskStore::enqueue`,
/// `Engine::enqueue`, a backend's transactional enqueue), as `backstop_enqueued_total`
/// by event type. The store cannot see the caller's commit: a task inserted in a
/// transaction that then rolled back is counted too.
pub(crate) fn enqueued(inserted: Inserted, task: &NewTask) -> Result<Enqueued> {
    if inserted.created {
        metrics::counter!("backstop_enqueued_total", "event_type" => task.event_type().to_owned())
            .increment(1);
    }
    answer(inserted, task)
}

/// The answer of an enqueue that `inserted` `task`, not counted.
fn answer(inserted: Inserted, task: &NewTask) -> Result<Enqueued> {
    Ok(Enqueued {
        id: inserted.id,
        created: inserted.created,
        event_type: task.event_type().to_owned(),
        status: Status::from_code(inserted.status.into())?,
        replaced: inserted.replaced,
    })
}

/// Split a batch of marks into rounds in which each task appears at most once, keeping
/// the order: round 1 holds the first mark of every task, round 2 the second, and so on.
///
/// A set-based `UPDATE … FROM (the marks)` applies at most one mark per row, and which one
/// is unspecified. The contract says marks apply in order, so a driver runs one statement
/// per round, in order, in one transaction. Almost every batch is a single round.
///
/// ```
/// use backstop_core::{driver::mark_rounds, Lease, Mark};
/// let l = |id| Lease { task_id: id, token: 1 };
/// let marks = [Mark::success(l(1)), Mark::success(l(2)), Mark::release(l(1))];
/// assert_eq!(mark_rounds(&marks), vec![vec![0, 1], vec![2]]);
/// ```
pub fn mark_rounds(marks: &[Mark]) -> Vec<Vec<usize>> {
    let mut rounds: Vec<(HashSet<i64>, Vec<usize>)> = Vec::new();
    for (i, m) in marks.iter().enumerate() {
        let id = m.lease.task_id;
        match rounds.iter_mut().find(|(ids, _)| !ids.contains(&id)) {
            Some((ids, idx)) => {
                ids.insert(id);
                idx.push(i);
            }
            None => rounds.push((HashSet::from([id]), vec![i])),
        }
    }
    rounds.into_iter().map(|(_, idx)| idx).collect()
}

/// Milliseconds of `d`, saturating at `i64::MAX`.
pub fn millis(d: Duration) -> i64 {
    i64::try_from(d.as_millis()).unwrap_or(i64::MAX)
}

/// A backend's schema statements as a script for a person to read: one statement per
/// paragraph, each ending in `;`, continuation lines indented by four spaces (closing
/// parentheses flush left). `parts` are the strings the backend executes; statements are
/// split at `;` (schema DDL has no `;` inside literals).
///
/// ```
/// let script = backstop_core::driver::ddl_script(&[
///     "CREATE TABLE t (\n        id INT\n     );\n     CREATE INDEX i\n        ON t (id)",
/// ]);
/// assert_eq!(script, "CREATE TABLE t (\n    id INT\n);\n\nCREATE INDEX i\n    ON t (id);\n");
/// ```
pub fn ddl_script(parts: &[&str]) -> String {
    let mut out = Vec::new();
    for statement in parts.iter().flat_map(|p| p.split(';')) {
        let mut lines = statement.lines().map(str::trim).filter(|l| !l.is_empty());
        let Some(first) = lines.next() else { continue };
        let mut text = first.to_owned();
        for line in lines {
            text.push('\n');
            if !line.starts_with(')') {
                text.push_str("    ");
            }
            text.push_str(line);
        }
        text.push(';');
        out.push(text);
    }
    let mut script = out.join("\n\n");
    script.push('\n');
    script
}

/// One bound value of a list statement (see [`list_sql`]), in placeholder order.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ListArg<'a> {
    /// A status code.
    Status(i16),
    /// An event type, a business key or an error text.
    Text(&'a str),
    /// `updated_at` older than this: the backend binds what its `older_than` spelling
    /// needs (milliseconds, microseconds, a cutoff).
    Age(Duration),
    /// An id (`id > ?`) or the row limit.
    Int(i64),
}

/// How a backend spells the parts of a list statement that differ.
#[derive(Debug, Clone, Copy)]
pub struct ListDialect {
    /// The placeholder of the n-th argument, from 1: `$1`, `?1`, `?`.
    pub placeholder: fn(usize) -> String,
    /// The condition "`last_error` contains the text bound to `p`".
    pub contains: fn(&str) -> String,
    /// The condition "`updated_at` is older than the [`ListArg::Age`] bound to `p`".
    pub older_than: fn(&str) -> String,
    /// The order of a list bounded by the backlog (a status other than succeeded, or an
    /// error search): `id`, or an expression of it when the planner would otherwise walk
    /// the primary key from the oldest row to find the few newer ones (PostgreSQL: `id +
    /// 0`, so it reads the status index and sorts what the backlog holds).
    pub backlog_order: &'static str,
}

/// The statement [`Driver::list`] runs for `filter`: `select` (`SELECT … FROM table`)
/// with only the conditions the filter sets, `ORDER BY id LIMIT`, and the arguments in
/// placeholder order. One statement per shape of filter, so each gets a plan that walks
/// the index its conditions allow (a status index, the key index), not one catch-all plan
/// for every shape that walks the table. An error search without a status skips the
/// succeeded rows (a success clears `last_error`), so it reads the backlog, not the rows
/// retained.
///
/// ```
/// use backstop_core::driver::{list_sql, ListArg, ListDialect};
/// use backstop_core::{Status, TaskFilter};
/// let pg = ListDialect {
///     placeholder: |n| format!("${n}"),
///     contains: |p| format!("strpos(last_error, {p}) > 0"),
///     older_than: |p| format!("updated_at < now() - {p}"),
///     backlog_order: "id + 0",
/// };
/// let f = TaskFilter::default().status(Status::Failed).limit(50);
/// let (sql, args) = list_sql("SELECT id FROM t", &pg, &f);
/// assert_eq!(sql, "SELECT id FROM t WHERE status = $1 ORDER BY id + 0 LIMIT $2");
/// assert_eq!(args, vec![ListArg::Status(2), ListArg::Int(50)]);
/// ```
pub fn list_sql<'f>(
    select: &str,
    dialect: &ListDialect,
    filter: &'f TaskFilter,
) -> (String, Vec<ListArg<'f>>) {
    let mut conditions = Vec::new();
    let mut args = Vec::new();
    let bind = |arg: ListArg<'f>, args: &mut Vec<ListArg<'f>>| {
        args.push(arg);
        (dialect.placeholder)(args.len())
    };
    match filter.status {
        Some(s) => conditions.push(format!(
            "status = {}",
            bind(ListArg::Status(s.code()), &mut args)
        )),
        // every status but succeeded, spelled as a list each backend's planner turns into
        // index ranges (`<> 1` is a scan of the status index on SQLite)
        None if filter.error_contains.is_some() => {
            let codes: Vec<String> = Status::ALL
                .iter()
                .filter(|s| **s != Status::Succeeded)
                .map(|s| s.code().to_string())
                .collect();
            conditions.push(format!("status IN ({})", codes.join(", ")))
        }
        None => {}
    }
    if let Some(t) = &filter.event_type {
        conditions.push(format!(
            "event_type = {}",
            bind(ListArg::Text(t), &mut args)
        ));
    }
    if let Some(k) = &filter.biz_key {
        conditions.push(format!("biz_key = {}", bind(ListArg::Text(k), &mut args)));
    }
    if let Some(e) = &filter.error_contains {
        let p = bind(ListArg::Text(e), &mut args);
        conditions.push((dialect.contains)(&p));
    }
    if let Some(age) = filter.older_than {
        let p = bind(ListArg::Age(age), &mut args);
        conditions.push((dialect.older_than)(&p));
    }
    if let Some(id) = filter.after_id {
        conditions.push(format!("id > {}", bind(ListArg::Int(id), &mut args)));
    }
    let mut sql = select.to_owned();
    if !conditions.is_empty() {
        sql.push_str(" WHERE ");
        sql.push_str(&conditions.join(" AND "));
    }
    let limit = i64::try_from(filter.limit).unwrap_or(i64::MAX);
    let bounded = match filter.status {
        Some(s) => s != Status::Succeeded,
        None => filter.error_contains.is_some(),
    };
    let order = if bounded { dialect.backlog_order } else { "id" };
    sql.push_str(&format!(
        " ORDER BY {order} LIMIT {}",
        bind(ListArg::Int(limit), &mut args)
    ));
    (sql, args)
}

/// Everything a driver implementation names, in one import:
/// `use backstop_core::driver::prelude::*;`.
pub mod prelude {
    pub use super::{
        complete_on, complete_on_blocking, ddl_script, enqueue_on, enqueue_on_blocking,
        insert_params, list_sql, mark_rounds, millis,
        schema::{self, Migration},
        AgedBatch, Backend, Buckets, Checked, Claim, ConnectFailure, Driver, EnqueueBatch,
        EnqueuePlan, EnqueueSql, EnqueueStep, Existing, InsertStep, Inserted, KeyRelease,
        KeyedInsert, KeysRelease, KeysStep, ListArg, ListDialect, RawAudit, RawStats, RawTask,
        ReleaseStep, Reset, RunAt, TaskRow, AUDIT_COLUMNS, COLUMNS, COLUMN_COUNT,
    };
    pub use crate::tx::{
        insert_document, rows_params, values_rows, Answer, BlockingTxConnection, Dialect,
        InsertTexts, Returns, Statement, Transactional, TxConnection, Value, INSERT_PARAMS,
        INSERT_ROW_KEYS,
    };
    pub use crate::{
        async_trait, Audit, Enqueued, Error, ErrorKind, Lease, Mark, MarkAction, NewTask, Owner,
        Recycled, Result, Status, StoreConfig, TaskFilter, TaskId, WhenParked,
    };
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
pub use crate::notify::{Admit, Throttle};
pub use crate::store::retry_contention;

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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn column_count_counts_columns() {
        assert_eq!(COLUMNS.split(',').count(), COLUMN_COUNT);
    }
}
