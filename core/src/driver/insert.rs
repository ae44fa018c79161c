//! The enqueue under a dedup rule as a protocol without I/O ([`KeyedInsert`]): what
//! every driver's insert runs, in its own SQL.

use std::time::Duration;

use crate::error::{Error, ErrorKind, Result};
use crate::model::{NewTask, Status, TaskId};

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
    /// The task has an order key: lock the key first (as [`ReleaseStep::LockKey`](crate::driver::ReleaseStep::LockKey)), so
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
    /// [`KeyRelease`](crate::driver::KeyRelease) for its key on the same connection, then answer
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
    rule: crate::model::Dedup,
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
