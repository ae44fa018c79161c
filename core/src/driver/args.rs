//! The arguments a [`Driver`](super::Driver) method gets, checked by core, and the
//! answer of a fenced change.

use std::ops::Deref;
use std::time::Duration;

use super::rows::RawTask;
use crate::model::Owner;

/// A value the store layer in core has checked against the contract's limits (see each
/// [`Driver`](crate::driver::Driver) method for what was checked). A driver reads it (`Deref`) but cannot make
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

/// A batch claim's arguments (see [`Driver::claim_batch`](crate::driver::Driver::claim_batch)).
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

impl Claim<'_> {
    /// The claim's one event type: a claim after marks
    /// ([`Driver::mark_and_claim`](crate::driver::Driver::mark_and_claim)) names one.
    pub fn only_type(&self) -> crate::Result<&str> {
        match self.event_types {
            [one] => Ok(one),
            _ => Err(crate::Error::new(
                crate::ErrorKind::Unexpected,
                "mark_and_claim",
                "a claim after marks names one event type",
            )),
        }
    }
}

/// An age-based batch's arguments (see [`Driver::recycle_dead`](crate::driver::Driver::recycle_dead),
/// [`Driver::purge_finished`](crate::driver::Driver::purge_finished)).
#[derive(Debug, Clone, Copy)]
pub struct AgedBatch {
    /// Rows whose `updated_at` is older than this, at most
    /// [`MAX_INTERVAL`](crate::limits::MAX_INTERVAL).
    pub older_than: Duration,
    /// 1 to [`MAX_BATCH`](crate::limits::MAX_BATCH) rows, oldest `updated_at` first.
    pub limit: usize,
}

/// A window of recent time cut into buckets (see [`Driver::throughput`](crate::driver::Driver::throughput)).
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

/// What a driver's fenced change of one task did ([`Driver::manual_reset`](crate::driver::Driver::manual_reset), [`Driver::reset`](crate::driver::Driver::reset),
/// [`Driver::cancel`](crate::driver::Driver::cancel), [`Driver::delete`](crate::driver::Driver::delete)).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Change {
    /// The task was changed: the row as the change left it (as it was, for a delete).
    Done(Box<RawTask>),
    /// No task has this id.
    Missing,
    /// The task exists but may not be changed so; its status code.
    Refused(i64),
}
