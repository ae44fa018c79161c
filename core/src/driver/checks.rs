//! The checks of an enqueue's input and the making of its answers, shared by the store
//! and the transactional enqueue.

use super::{Checked, Inserted};
use crate::error::{Error, ErrorKind, Result};
use crate::limits::StoreConfig;
use crate::limits::{self, MAX_BATCH, MAX_LEASES};
use crate::model::{Enqueued, Lease, Mark, MarkAction, NewTask, Status, TaskId};

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

/// The due tasks these enqueues created, one per event type (the first): what a store
/// announces ([`Driver::announce_committed`](crate::driver::Driver::announce_committed)).
pub(crate) fn due_created<'t>(tasks: &'t [NewTask], done: &[Enqueued]) -> Vec<(&'t str, TaskId)> {
    let mut out: Vec<(&str, TaskId)> = Vec::new();
    for (task, e) in tasks.iter().zip(done) {
        if e.created && task.due_in().is_zero() && !out.iter().any(|(t, _)| *t == task.event_type())
        {
            out.push((task.event_type(), e.id));
        }
    }
    out
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

/// Check a list of ids is not over [`MAX_BATCH`].
pub(crate) fn check_ids(operation: &'static str, ids: &[TaskId]) -> Result<()> {
    if ids.len() > MAX_BATCH {
        return Err(Error::invalid_input(
            operation,
            format!("at most {MAX_BATCH} ids per call, got {}", ids.len()),
        ));
    }
    Ok(())
}

/// Check a list of leases (heartbeat) is not over [`MAX_LEASES`].
pub(crate) fn check_leases(operation: &'static str, leases: &[Lease]) -> Result<()> {
    if leases.len() > MAX_LEASES {
        return Err(Error::invalid_input(
            operation,
            format!("at most {MAX_LEASES} leases per call, got {}", leases.len()),
        ));
    }
    Ok(())
}

/// Check a batch of marks: at most [`MAX_LEASES`], retry delays at most [`MAX_INTERVAL`](limits::MAX_INTERVAL).
pub(crate) fn check_marks(operation: &'static str, marks: &[Mark]) -> Result<()> {
    if marks.len() > MAX_LEASES {
        return Err(Error::invalid_input(
            operation,
            format!("at most {MAX_LEASES} marks per call, got {}", marks.len()),
        ));
    }
    for m in marks {
        match &m.action {
            MarkAction::Retry { delay, .. } => {
                limits::check_duration(operation, "retry delay", *delay)?
            }
            MarkAction::Snooze { delay, .. } => {
                limits::check_duration(operation, "snooze delay", *delay)?
            }
            _ => {}
        }
    }
    Ok(())
}

/// A saga start checked against the store's limits: its input as a payload is (at most
/// `max_payload_bytes`), and each task of its first group as `enqueue` checks it. The
/// definition and key were checked when it was made ([`SagaDef::start`](crate::SagaDef::start)).
pub(crate) fn check_start<'s>(
    config: &StoreConfig,
    start: &'s crate::model::SagaStart,
) -> Result<Checked<&'s crate::model::SagaStart>> {
    const OP: &str = "start_saga";
    if start.input().len() > config.max_payload_bytes {
        return Err(Error::invalid_input(
            OP,
            format!(
                "the saga's input is {} bytes; the store's limit is {}",
                start.input().len(),
                config.max_payload_bytes
            ),
        ));
    }
    for task in start.first_tasks() {
        task.validate(config.max_payload_bytes)
            .map_err(|e| e.with_operation(OP))?;
    }
    Ok(Checked::new(start))
}

/// A step's report checked against the store's limits: a step of `def`, the saga's key
/// as [`SagaDef::start`](crate::SagaDef::start) checks it, the output (JSON) at most
/// `max_payload_bytes`, a reason cut to [`MAX_ERROR_BYTES`](crate::limits::MAX_ERROR_BYTES).
pub(crate) fn check_report(
    config: &StoreConfig,
    def: &crate::model::SagaDef,
    report: &crate::model::StepReport,
) -> Result<crate::model::StepReport> {
    use crate::model::StepOutcome;
    const OP: &str = "saga_step";
    if def.find_step(&report.step).is_none() {
        return Err(Error::invalid_input(
            OP,
            format!("saga {:?} has no step {:?}", def.name(), report.step),
        ));
    }
    crate::limits::check_key(
        OP,
        "saga key",
        &report.key,
        crate::limits::MAX_SAGA_KEY_BYTES,
    )?;
    let mut report = report.clone();
    match &mut report.outcome {
        StepOutcome::Done { output } => {
            if output.len() > config.max_payload_bytes {
                return Err(Error::invalid_input(
                    OP,
                    format!(
                        "step {:?}'s output is {} bytes; the store's limit is {}",
                        report.step,
                        output.len(),
                        config.max_payload_bytes
                    ),
                ));
            }
            if let Err(e) = serde_json::from_str::<serde::de::IgnoredAny>(output) {
                return Err(Error::invalid_input(
                    OP,
                    format!("step {:?}'s output is not valid JSON: {e}", report.step),
                ));
            }
        }
        StepOutcome::Refused { reason } | StepOutcome::Exhausted { reason, .. } => {
            let cut = crate::limits::bounded_error(reason).to_owned();
            *reason = cut;
        }
        StepOutcome::Compensated => {}
    }
    Ok(report)
}
