//! What [`driven`](super::driven) checks before a driver runs, and how it reads the
//! answers: batches of age, terminal states, decoded rows and counts, and the errors
//! that name why a change was refused.

use std::time::Duration;

use crate::driver::{AgedBatch, Change, Checked, RawStats, RawTask};
use crate::error::{Error, ErrorKind, Result};
use crate::limits;
use crate::model::{Mark, MarkAction, SagaId, Stats, Status, StatusCount, Task, TaskId};

/// The answer of an operator's change `op` of task `id`: the task as changed, or
/// `NotFound`, or `Conflict` naming its status and the statuses `allowed`.
/// The `NotFound` error of an operation on saga `id`, which does not exist.
pub(super) fn saga_not_found(op: &'static str, id: SagaId) -> Error {
    Error::new(ErrorKind::NotFound, op, format!("saga {id} not found"))
}

pub(super) fn operator_change(
    op: &'static str,
    id: TaskId,
    answer: Change,
    allowed: &str,
) -> Result<Task> {
    match answer {
        Change::Done(row) => row.decode(),
        Change::Missing => Err(Error::task_not_found(op, id)),
        Change::Refused(code) => Err(change_refused(op, id, Status::from_code(code)?, allowed)),
    }
}

/// Counts as the store answers them.
pub(super) fn decode_stats(raw: RawStats) -> Result<Stats> {
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

/// The code of a terminal status (succeeded, failed, cancelled), checked; `InvalidInput`
/// naming `status` for another.
pub(super) fn finished(op: &'static str, status: Status) -> Result<Checked<i16>> {
    match status {
        Status::Succeeded | Status::Failed | Status::Cancelled => Ok(Checked::new(status.code())),
        other => Err(Error::invalid_input(
            op,
            format!("status must be succeeded, failed or cancelled (a terminal one), got {other}"),
        )),
    }
}

/// Check an age-based batch (`recycle_dead`, the purges); `None` when `limit` is 0
/// and there is nothing to do.
pub(super) fn aged_batch(
    op: &'static str,
    older_than: Duration,
    limit: usize,
) -> Result<Option<Checked<AgedBatch>>> {
    limits::check_duration(op, "older_than", older_than)?;
    limits::check_limit(op, limit)?;
    Ok((limit > 0).then(|| Checked::new(AgedBatch { older_than, limit })))
}

pub(super) fn decode_all(rows: Vec<RawTask>) -> Result<Vec<Task>> {
    rows.into_iter().map(RawTask::decode).collect()
}

/// `flags` when it has one flag per input, else an `Unexpected` error.
pub(super) fn one_flag_each(op: &'static str, flags: Vec<bool>, n: usize) -> Result<Vec<bool>> {
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

pub(super) fn too_long(error: &str) -> bool {
    error.len() > limits::MAX_ERROR_BYTES
}

/// `marks` with their error texts cut to [`limits::MAX_ERROR_BYTES`] (borrowed when
/// none is longer): once here for every backend.
pub(super) fn bound_errors(marks: &[Mark]) -> std::borrow::Cow<'_, [Mark]> {
    if marks.iter().any(|m| m.action.error().is_some_and(too_long)) {
        std::borrow::Cow::Owned(marks.iter().map(bound_error).collect())
    } else {
        std::borrow::Cow::Borrowed(marks)
    }
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
        MarkAction::Cancel { reason } => MarkAction::Cancel {
            reason: cut(reason),
        },
        MarkAction::Snooze { delay, max, error } => MarkAction::Snooze {
            delay: *delay,
            max: *max,
            error: cut(error),
        },
        other => other.clone(),
    };
    Mark {
        lease: mark.lease,
        action,
    }
}

/// The `Conflict` error of an operator's `action` (`cancel`, `delete`) refused
/// because of the task's status; nothing was changed.
pub(super) fn change_refused(
    operation: &'static str,
    id: TaskId,
    status: Status,
    allowed: &str,
) -> Error {
    Error::new(
        ErrorKind::Conflict,
        operation,
        format!("task {id} is {status}: only {allowed} tasks can be changed by {operation}; nothing was changed"),
    )
}

/// The `Conflict` error of a `manual_reset` refused because of the task's status.
pub(super) fn reset_refused(operation: &'static str, id: TaskId, status: Status) -> Error {
    let why = match status {
        Status::Running => "it is running and its owner is alive (updated_at is recent)",
        Status::Pending => "it is already pending",
        Status::Succeeded => "it has succeeded",
        Status::Failed => "it changed while being reset",
        Status::Cancelled => "it was cancelled",
        Status::Waiting => "it is waiting for an earlier task of its order key",
    };
    Error::new(
        ErrorKind::Conflict,
        operation,
        format!(
            "task {id} cannot be reset: {why}; only failed or stuck running tasks can be reset"
        ),
    )
}
