//! The order key's release as protocols without I/O: one key ([`KeyRelease`]) and many
//! at once ([`KeysRelease`]); and the same as plans of statements in a backend's SQL
//! ([`KeyReleasePlan`], [`KeysReleasePlan`]), which core runs on any connection.

use std::collections::BTreeSet;

use super::statement::{applied, count, first_column, key_ids, keys, locked, row};
use super::{Answer, EnqueueSql, EnqueueStep, Statement, TxPlan};
use crate::error::{Error, ErrorKind, Result};
use crate::model::TaskId;

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

/// The release of one order key ([`KeyRelease`]) as statements of a backend's
/// [`EnqueueSql`] (its per-key steps), without I/O: a [`TxPlan`] whose output is the
/// task made pending. Run inside one transaction (the key's lock is held to its end): an
/// enqueue's, or one of the store's own.
pub struct KeyReleasePlan<'a> {
    sql: &'a dyn EnqueueSql,
    key: &'a str,
    release: KeyRelease,
    step: ReleaseStep,
}

impl<'a> KeyReleasePlan<'a> {
    /// The release of `key` in `sql`'s statements.
    pub fn new(sql: &'a dyn EnqueueSql, key: &'a str) -> Self {
        let release = KeyRelease::new();
        let step = release.first();
        KeyReleasePlan {
            sql,
            key,
            release,
            step,
        }
    }

    /// [`TxPlan::next_statement`], its statement borrowing the SQL only (so a plan that
    /// runs this one inside it can hand it on). The next statement to run, or `None` when the release is done.
    pub(crate) fn next(&mut self) -> Result<Option<Statement<'a>>> {
        let key = self.key;
        let step = match self.step {
            ReleaseStep::LockKey => EnqueueStep::LockKey(key),
            ReleaseStep::ReadBlocker => EnqueueStep::KeyBlocker(key),
            ReleaseStep::ReadNext => EnqueueStep::KeyNext(key),
            ReleaseStep::Promote(id) => EnqueueStep::KeyPromote(id),
            ReleaseStep::DropKey => EnqueueStep::KeyDrop(key),
            ReleaseStep::Done(_) => return Ok(None),
        };
        let params = step.params(self.sql.run_at());
        Ok(Some(self.sql.statement(step, params)))
    }
}

impl<'a> TxPlan for KeyReleasePlan<'a> {
    type Output = Option<TaskId>;

    /// The next statement to run, or `None` when the release is done.
    fn next_statement(&mut self) -> Result<Option<Statement<'_>>> {
        self.next()
    }

    /// The answer of the statement [`next_statement`](Self::next_statement) gave last.
    fn answer(&mut self, answer: Answer) -> Result<()> {
        let release = &mut self.release;
        self.step = match self.step {
            ReleaseStep::LockKey => release.locked(locked(&answer)?)?,
            ReleaseStep::ReadBlocker => release.blocker(row(&answer)?.is_some()),
            ReleaseStep::ReadNext => release.next(first_column(&answer)?),
            ReleaseStep::Promote(_) => release.promoted(applied(&answer, "promote")?)?,
            ReleaseStep::DropKey => release.dropped(),
            ReleaseStep::Done(_) => return Err(not_asked()),
        };
        Ok(())
    }

    /// The task made pending, once [`next_statement`](Self::next_statement) said the
    /// release is done.
    fn finish(self) -> Result<Option<TaskId>> {
        match self.step {
            ReleaseStep::Done(promoted) => Ok(promoted),
            _ => Err(unfinished()),
        }
    }
}

/// The set-based release of many order keys ([`KeysRelease`]) as statements of a
/// backend's [`EnqueueSql::keys_statement`], without I/O (see [`KeyReleasePlan`]). Run
/// inside one transaction; a backend that does not
/// [`release keys together`](EnqueueSql::releases_keys_together) has no such plan.
pub struct KeysReleasePlan<'a> {
    sql: &'a dyn EnqueueSql,
    release: KeysRelease,
    step: KeysStep,
}

impl<'a> KeysReleasePlan<'a> {
    /// The release of `keys` (sorted, distinct) in `sql`'s statements.
    pub fn new(sql: &'a dyn EnqueueSql, keys: Vec<String>) -> Self {
        let release = KeysRelease::new(keys);
        let step = release.first();
        KeysReleasePlan { sql, release, step }
    }
}

impl<'a> TxPlan for KeysReleasePlan<'a> {
    type Output = KeysRelease;

    /// The next statement to run, or `None` when the release is done.
    fn next_statement(&mut self) -> Result<Option<Statement<'_>>> {
        if let KeysStep::LockKeys(keys) = &self.step {
            if self.sql.keys_insert_locks() {
                // the upsert that inserted the keys holds their locks: every key found
                let found = keys.clone();
                self.step = self.release.locked(found);
            }
        }
        if self.step == KeysStep::Done {
            return Ok(None);
        }
        self.sql
            .keys_statement(&self.step)
            .map(Some)
            .ok_or_else(|| {
                Error::new(
                    ErrorKind::Unexpected,
                    "release_order_keys",
                    "the backend has no statement for a set-based release of order keys",
                )
            })
    }

    /// The answer of the statement [`next_statement`](Self::next_statement) gave last.
    fn answer(&mut self, answer: Answer) -> Result<()> {
        let release = &mut self.release;
        self.step = match &self.step {
            KeysStep::InsertKeys(_) => release.inserted(),
            KeysStep::LockKeys(_) => release.locked(keys(answer)?),
            KeysStep::ReadBlockers(_) => release.blockers(keys(answer)?),
            KeysStep::ReadNext(_) => release.next(key_ids(answer)?),
            KeysStep::Promote(_) => release.promoted(count(&answer)?)?,
            KeysStep::DropKeys(_) => release.dropped(),
            KeysStep::Done => return Err(not_asked()),
        };
        Ok(())
    }

    /// The release as it ended (the tasks made pending, the keys left over), once
    /// [`next_statement`](Self::next_statement) said it is done.
    fn finish(self) -> Result<KeysRelease> {
        match self.step {
            KeysStep::Done => Ok(self.release),
            _ => Err(unfinished()),
        }
    }
}

fn not_asked() -> Error {
    Error::new(
        ErrorKind::Unexpected,
        "release_order_keys",
        "an answer with no statement pending",
    )
}

fn unfinished() -> Error {
    Error::new(
        ErrorKind::Unexpected,
        "release_order_keys",
        "the release's statements were not all run",
    )
}
