//! The state changes of a running task, each fenced by its lease.

use std::time::Duration;

use super::Lease;

/// What to do with a running task, named by its lease. See [`TaskStore::mark`].
///
/// Exhaustive on purpose (unlike the other enums): each action is a line of the store
/// contract that every driver implements in SQL, so a new action must be a compile error
/// in every driver's `match`, never a silent fallthrough.
///
/// [`TaskStore::mark`]: crate::TaskStore::mark
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum MarkAction {
    /// running → succeeded.
    Success,
    /// running → pending, due `delay` from now (database time), with `error` as
    /// `last_error`; running → failed instead when no attempts are left.
    Retry {
        /// The wait before the next attempt.
        delay: Duration,
        /// Why the attempt failed.
        error: String,
    },
    /// running → failed (terminal) with `error` as `last_error`.
    Fail {
        /// Why the task failed.
        error: String,
    },
    /// running → pending without spending the attempt (the claim's increment is undone);
    /// for a task that never started (executor full, shutdown).
    Release,
    /// running → pending, due `delay` from now, without spending the attempt (the
    /// claim's increment is undone) and with `snoozes` + 1, while the task has been
    /// snoozed fewer than `max` times; past that it is a [`Retry`](Self::Retry) with
    /// `error` (an attempt spent; failed when none is left). `last_error` is kept
    /// within the bound.
    Snooze {
        /// The wait before the next attempt.
        delay: Duration,
        /// How many snoozes give their attempt back.
        max: u32,
        /// The error recorded when the snooze is past `max` and spends an attempt.
        error: String,
    },
    /// running → cancelled (terminal) with `reason` as `last_error`: the handler
    /// decided the task is not to be done ([`HandlerError::cancel`](crate::HandlerError::cancel)).
    Cancel {
        /// Why the task was cancelled.
        reason: String,
    },
}

impl MarkAction {
    /// The error text a retry or a failure records; `None` for the others.
    pub fn error(&self) -> Option<&str> {
        match self {
            MarkAction::Retry { error, .. } | MarkAction::Fail { error } => Some(error),
            MarkAction::Cancel { reason } => Some(reason),
            MarkAction::Snooze { error, .. } => Some(error),
            MarkAction::Success | MarkAction::Release => None,
        }
    }
}

/// One state change of a running task. Built with [`Mark::success`], [`Mark::retry`],
/// [`Mark::fail`], [`Mark::release`], [`Mark::snooze`] or [`Mark::cancel`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Mark {
    /// The claim the change is fenced by.
    pub lease: Lease,
    /// The change.
    pub action: MarkAction,
}

impl Mark {
    /// Mark the task succeeded.
    pub fn success(lease: Lease) -> Self {
        Self {
            lease,
            action: MarkAction::Success,
        }
    }

    /// Schedule a retry after `delay` (or fail the task when no attempts are left).
    pub fn retry(lease: Lease, delay: Duration, error: impl Into<String>) -> Self {
        Self {
            lease,
            action: MarkAction::Retry {
                delay,
                error: error.into(),
            },
        }
    }

    /// Fail the task for good.
    pub fn fail(lease: Lease, error: impl Into<String>) -> Self {
        Self {
            lease,
            action: MarkAction::Fail {
                error: error.into(),
            },
        }
    }

    /// Give the task back without spending an attempt.
    pub fn release(lease: Lease) -> Self {
        Self {
            lease,
            action: MarkAction::Release,
        }
    }

    /// Run the task again after `delay` without spending an attempt, while it has been
    /// snoozed fewer than `max` times (past that, a retry with `error`).
    pub fn snooze(lease: Lease, delay: Duration, max: u32, error: impl Into<String>) -> Self {
        Self {
            lease,
            action: MarkAction::Snooze {
                delay,
                max,
                error: error.into(),
            },
        }
    }

    /// Cancel the task: terminal, with `reason`.
    pub fn cancel(lease: Lease, reason: impl Into<String>) -> Self {
        Self {
            lease,
            action: MarkAction::Cancel {
                reason: reason.into(),
            },
        }
    }
}
