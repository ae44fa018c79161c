//! The writes to a saga's rows as statements without I/O, each in one transaction
//! ([`saga_write_on`], [`saga_write_blocking`]): a step's report (the step's task
//! completed or failed, its row written, the saga moved on and the next steps' tasks
//! enqueued), an operator's command, and a nudge.
//!
//! Two plans run back to back on the transaction, with a decision between them:
//!
//! 1. [`ReadPlan`]: the saga row's lock; for a report, the fence (the task's
//!    completion, or its failure, under the report's lease: no row changed and the
//!    report is refused); the step rows of the group concerned (none for a report of a step
//!    alone in its group: it has no sibling to join);
//! 2. the decision: [`SagaProgress::decide`] for a report, [`SagaProgress::nudge`] for a
//!    nudge, the command's own rules for a command;
//! 3. [`WritePlan`]: the step's row, the saga's row, the failed tasks reset, the
//!    operators' log, and an [`EnqueuePlan`] per task to start.
//!
//! Writes to one saga serialize on its row, and every write takes its locks in one order:
//! the saga's row first, then task rows. Two siblings of a parallel group finishing at
//! once take turns, and the second sees the first's step row (the join). A report that
//! fenced its task first (locking the task's row, then waiting for the saga's) would
//! deadlock with a nudge or a command that holds the saga's row and enqueues that same
//! step's task (its insert waits for the fenced row): the chaos lane's PostgreSQL log
//! showed 126 such deadlocks in one run, each a second's stall (`deadlock_timeout`)
//! that held up the heartbeats queued behind the rows.

use super::checks::{check_task, enqueued};
use super::enqueue::nested_next;
use super::statement::{applied, column, row};
use super::{
    Answer, BlockingTxConnection, Checked, EnqueuePlan, EnqueueSql, EnqueueStep, Inserted,
    Statement, TxConnection, TxPlan,
};
use super::{Decision, SagaAdvance, SagaProgress, StepEvent};
use crate::error::{Error, ErrorKind, Result};
use crate::limits::StoreConfig;
use crate::model::{
    Audit, NewTask, NudgeTask, SagaCommand, SagaDef, SagaId, SagaStatus, StepApplied, StepOutcome,
    StepReport, StepState,
};

/// A write to a saga's rows, run as statements in one transaction
/// ([`Driver::saga_write`](crate::driver::Driver::saga_write)).
#[derive(Debug, Clone)]
#[non_exhaustive]
pub enum SagaWrite {
    /// A step's report ([`TaskStore::saga_step_many`](crate::TaskStore::saga_step_many)).
    Step {
        /// The saga's definition.
        def: SagaDef,
        /// The report.
        report: StepReport,
    },
    /// An operator's command ([`TaskStore::command_saga`](crate::TaskStore::command_saga)).
    Command {
        /// The saga.
        id: SagaId,
        /// Its definition's name.
        name: String,
        /// Its key.
        key: String,
        /// The command.
        command: SagaCommand,
        /// Who asks, and why.
        audit: Audit,
    },
    /// A nudge ([`TaskStore::nudge_saga`](crate::TaskStore::nudge_saga)).
    Nudge {
        /// The saga's definition.
        def: SagaDef,
        /// The saga.
        id: SagaId,
        /// Its key.
        key: String,
        /// Who nudges, and why: logged when the nudge changes something.
        audit: Option<Audit>,
    },
}

/// What a [`SagaWrite`] did.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum SagaWritten {
    /// It applied: where the saga stands now, and how many tasks it enqueued (or, for
    /// a retry, reset).
    Applied(StepApplied),
    /// No saga has the id (a command or a nudge).
    Missing,
    /// The saga is in a status the command may not be given in.
    Refused(SagaStatus),
}

const OP: &str = "saga_write";

/// Run `write` ([`SagaWrite`]) on the transaction `conn` (the store's own, or the
/// caller's): read (the saga row's lock, a report's fence, the group's step rows),
/// decide, write (the step row, the saga row, a retry's reset, the operators' log, the
/// tasks). A report is `Conflict` when the step's task no longer runs under its lease,
/// `Unexpected` when its saga's row is missing. On an error, roll the transaction back.
pub async fn saga_write_on<C: TxConnection + ?Sized>(
    sql: &dyn EnqueueSql,
    config: &StoreConfig,
    conn: &mut C,
    write: Checked<&SagaWrite>,
) -> Result<SagaWritten> {
    let write = write.into_inner();
    let found = ReadPlan::new(sql, write)?.run(conn).await?;
    let Some(found) = found else {
        return missing(write);
    };
    let next = match Next::decide(write, found)? {
        Ok(next) => next,
        Err(status) => return Ok(SagaWritten::Refused(status)),
    };
    let tasks = next.checked(config)?;
    let done = WritePlan::new(sql, write, &next, tasks).run(conn).await?;
    next.answer(done)
}

/// [`saga_write_on`] on a blocking driver's connection.
pub fn saga_write_blocking<C: BlockingTxConnection + ?Sized>(
    sql: &dyn EnqueueSql,
    config: &StoreConfig,
    conn: &mut C,
    write: Checked<&SagaWrite>,
) -> Result<SagaWritten> {
    let write = write.into_inner();
    let found = ReadPlan::new(sql, write)?.run_blocking(conn)?;
    let Some(found) = found else {
        return missing(write);
    };
    let next = match Next::decide(write, found)? {
        Ok(next) => next,
        Err(status) => return Ok(SagaWritten::Refused(status)),
    };
    let tasks = next.checked(config)?;
    let done = WritePlan::new(sql, write, &next, tasks).run_blocking(conn)?;
    next.answer(done)
}

/// A step's report as a saga write, checked as `saga_step` checks it.
pub(crate) fn step_write(
    config: &StoreConfig,
    def: &SagaDef,
    report: &StepReport,
) -> Result<SagaWrite> {
    let report = super::checks::check_report(config, def, report)?;
    Ok(SagaWrite::Step {
        def: def.clone(),
        report,
    })
}

/// A report as a [`SagaAdvance`], when it is the common case: the action of a step alone
/// in its group done. The decision is the one the general write would make on a saga
/// running at the step's group (no step rows to read: a lone step has no sibling);
/// `None` for any other report, or a decision that sets a reason.
pub(crate) fn step_advance(config: &StoreConfig, write: &SagaWrite) -> Result<Option<SagaAdvance>> {
    let SagaWrite::Step { def, report } = write else {
        return Ok(None);
    };
    let StepOutcome::Done { output } = &report.outcome else {
        return Ok(None);
    };
    let at = locate(def, &report.step)?;
    if !alone(def, at.group) {
        return Ok(None);
    }
    let found = Found {
        status: SagaStatus::Running,
        group: at.group,
        rows: Vec::new(),
    };
    let next = Next::step(def, report, found)?;
    let (Some(record), Some((status, next_group, None))) = (&next.record, &next.set) else {
        return Ok(None);
    };
    next.checked(config)?;
    Ok(Some(SagaAdvance {
        saga: report.saga,
        lease: report.lease,
        group: at.group,
        position: record.position,
        step: report.step.clone(),
        state: record.state,
        output: output.clone(),
        status: *status,
        next_group: *next_group,
        tasks: next.tasks,
        claim: report.claim.as_ref().map(|o| o.as_str().to_owned()),
    }))
}

/// What a report's write answers: what it applied; any other answer is a bug.
pub(crate) fn step_applied(written: SagaWritten) -> Result<StepApplied> {
    match written {
        SagaWritten::Applied(applied) => Ok(applied),
        other => Err(Error::new(
            ErrorKind::Unexpected,
            "saga_step",
            format!("a report was answered {other:?}"),
        )),
    }
}

/// No saga row: an error for a report (its task's saga must exist), an answer otherwise.
fn missing(write: &SagaWrite) -> Result<SagaWritten> {
    match write {
        SagaWrite::Step { report, .. } => Err(unexpected(format!(
            "saga {} has no row to lock",
            report.saga
        ))),
        _ => Ok(SagaWritten::Missing),
    }
}

/// Whether group `group` of `def` has one step: its report has no sibling to join or
/// wait for, so no step rows to read.
fn alone(def: &SagaDef, group: u32) -> bool {
    usize::try_from(group)
        .ok()
        .and_then(|g| def.groups().get(g))
        .is_some_and(|steps| steps.len() == 1)
}

/// Where a reported step is in its definition.
#[derive(Debug, Clone, Copy)]
struct At {
    group: u32,
    position: u32,
}

fn locate(def: &SagaDef, step: &str) -> Result<At> {
    def.find_step(step)
        .map(|(group, position, _)| At { group, position })
        .ok_or_else(|| {
            Error::invalid_input(OP, format!("saga {:?} has no step {step:?}", def.name()))
        })
}

/// What the read found: the saga's status and group, and the step rows of the group
/// concerned (position, state).
#[derive(Debug, Clone, PartialEq, Eq)]
struct Found {
    status: SagaStatus,
    group: u32,
    rows: Vec<(u32, StepState)>,
}

/// A step row to write.
struct Record<'a> {
    position: u32,
    step: &'a str,
    group: u32,
    state: StepState,
    output: Option<&'a str>,
}

/// What the write plan writes, decided on what was read.
struct Next<'a> {
    record: Option<Record<'a>>,
    /// The saga row's status, group and (when set) reason.
    set: Option<(SagaStatus, u32, Option<String>)>,
    /// Reset the saga's failed step tasks (a retry): the event type and key prefix.
    reset: Option<(String, String)>,
    /// The operators' log entry: action, operator, reason.
    log: Option<(&'static str, &'a Audit)>,
    /// A log entry written after the tasks, only when the write changed something (the
    /// saga's row, or a task it created): a nudge's.
    log_if_changed: Option<(&'static str, &'a Audit)>,
    tasks: Vec<NewTask>,
    /// The saga's status and group after the write.
    after: (SagaStatus, u32),
}

impl<'a> Next<'a> {
    /// The decision on `found`, or the status a command may not be given in.
    fn decide(
        write: &'a SagaWrite,
        found: Found,
    ) -> Result<std::result::Result<Next<'a>, SagaStatus>> {
        match write {
            SagaWrite::Step { def, report } => Ok(Ok(Next::step(def, report, found)?)),
            SagaWrite::Nudge {
                def, key, audit, ..
            } => Ok(Ok(Next::nudge(def, key, found, audit.as_ref())?)),
            SagaWrite::Command {
                name,
                key,
                command,
                audit,
                ..
            } => Ok(Next::command(name, key, *command, audit, found)),
        }
    }

    fn step(def: &'a SagaDef, report: &'a StepReport, found: Found) -> Result<Next<'a>> {
        let at = locate(def, &report.step)?;
        let rows = named(def, &found.rows);
        let (step, group) = (report.step.clone(), at.group);
        let event = match &report.outcome {
            StepOutcome::Done { .. } => StepEvent::ActionDone { step, group },
            StepOutcome::Refused { reason } => StepEvent::ActionRefused {
                step,
                group,
                reason: reason.clone(),
            },
            StepOutcome::Compensated => StepEvent::Compensated { step, group },
            StepOutcome::Exhausted { phase, reason } => StepEvent::Exhausted {
                step,
                group,
                phase: *phase,
                reason: reason.clone(),
            },
        };
        let decision = SagaProgress::new(def).decide(found.status, found.group, &rows, &event);
        let mut next = Next::from_decision(def, &report.key, &found, &decision)?;
        next.record = Some(Record {
            position: at.position,
            step: &report.step,
            group: at.group,
            state: decision.record.1,
            output: match &report.outcome {
                StepOutcome::Done { output } => Some(output),
                _ => None,
            },
        });
        // every report updates the row (its version and time), changed or not
        let reason = decision.saga.as_ref().and_then(|c| c.reason.clone());
        next.set = Some((next.after.0, next.after.1, reason));
        Ok(next)
    }

    fn nudge(
        def: &'a SagaDef,
        key: &str,
        found: Found,
        audit: Option<&'a Audit>,
    ) -> Result<Next<'a>> {
        let rows = named(def, &found.rows);
        let decision = SagaProgress::new(def).nudge(found.status, found.group, &rows);
        let mut next = Next::from_decision(def, key, &found, &decision)?;
        // A change to where the saga is already (compensating the group it compensates:
        // its compensations asked again) is no change: the row, its version and its
        // reason are left, and nothing is logged.
        if let Some(change) = decision
            .saga
            .as_ref()
            .filter(|c| (c.status, c.group) != (found.status, found.group))
        {
            next.set = Some((change.status, change.group, change.reason.clone()));
        }
        // A compensating saga whose group has not settled waits for actions without a
        // row: one whose task failed without reporting (a store error on its last
        // attempt, say) would never settle it, its key held by the failed task. Such an
        // action is refused unrun once it runs (the saga compensates), so its failed
        // task is given back to run: a compensation an operator asks of a saga parked
        // with an unreported failure then finishes.
        let unsettled = decision
            .enqueue
            .iter()
            .any(|(_, phase)| *phase == crate::model::StepPhase::Action);
        if found.status == SagaStatus::Compensating && unsettled {
            next.reset = Some((def.event_type().to_owned(), format!("{key}/")));
        }
        // logged only when it does something: a healthy saga nudged (its tasks all
        // there) adds no entry
        next.log_if_changed = audit.map(|a| ("nudge", a));
        Ok(next)
    }

    /// The tasks and the status after `decision`, nothing written yet.
    fn from_decision(
        def: &SagaDef,
        key: &str,
        found: &Found,
        decision: &Decision,
    ) -> Result<Next<'a>> {
        let mut tasks = Vec::with_capacity(decision.enqueue.len());
        for (step, phase) in &decision.enqueue {
            let (_, _, step) = def.find_step(step).ok_or_else(|| {
                unexpected(format!(
                    "the decision names a step {step:?} the saga does not have"
                ))
            })?;
            tasks.push(def.step_task(key, step, *phase));
        }
        let after = match &decision.saga {
            Some(change) => (change.status, change.group),
            None => (found.status, found.group),
        };
        Ok(Next {
            record: None,
            set: None,
            reset: None,
            log: None,
            log_if_changed: None,
            tasks,
            after,
        })
    }

    /// An operator's command on what was found, or the status it may not be given in.
    fn command(
        name: &str,
        key: &str,
        command: SagaCommand,
        audit: &'a Audit,
        found: Found,
    ) -> std::result::Result<Next<'a>, SagaStatus> {
        let has = |state: StepState| found.rows.iter().any(|(_, s)| *s == state);
        let said = |what: &str| {
            let mut reason = format!("{what} by {}", audit.operator);
            if !audit.reason.is_empty() {
                reason.push_str(": ");
                reason.push_str(&audit.reason);
            }
            reason
        };
        let mut next = Next {
            record: None,
            set: None,
            reset: None,
            log: Some((command.as_str(), audit)),
            log_if_changed: None,
            tasks: Vec::new(),
            after: (found.status, found.group),
        };
        match (command, found.status) {
            (SagaCommand::Retry, SagaStatus::Parked) => {
                let compensating = has(StepState::CompensationFailed)
                    || has(StepState::Compensated)
                    || has(StepState::Refused);
                let status = match compensating {
                    true => SagaStatus::Compensating,
                    false => SagaStatus::Running,
                };
                next.after = (status, found.group);
                next.set = Some((status, found.group, None));
                next.reset = Some((format!("saga:{name}"), format!("{key}/")));
            }
            (SagaCommand::Compensate, SagaStatus::Running)
            | (SagaCommand::Compensate, SagaStatus::Parked)
                if !has(StepState::CompensationFailed) && !has(StepState::Compensated) =>
            {
                next.after = (SagaStatus::Compensating, found.group);
                next.set = Some((
                    SagaStatus::Compensating,
                    found.group,
                    Some(said("compensated")),
                ));
                let nudge = NudgeTask {
                    saga: name.to_owned(),
                    key: key.to_owned(),
                    nudge: true,
                };
                next.tasks.push(
                    NewTask::new(format!("saga:{name}"), format!("{key}/~nudge")).json(&nudge),
                );
            }
            (
                SagaCommand::Resolve(status @ (SagaStatus::Completed | SagaStatus::Compensated)),
                SagaStatus::Running | SagaStatus::Compensating | SagaStatus::Parked,
            ) => {
                next.after = (status, found.group);
                next.set = Some((status, found.group, Some(said("resolved"))));
            }
            (SagaCommand::Park, SagaStatus::Running | SagaStatus::Compensating) => {
                next.after = (SagaStatus::Parked, found.group);
                next.set = Some((SagaStatus::Parked, found.group, Some(said("parked"))));
            }
            (_, status) => return Err(status),
        }
        Ok(next)
    }

    /// The tasks, checked as an enqueue checks them (a store with a tiny payload limit
    /// refuses them here, before anything is written).
    fn checked(&self, config: &StoreConfig) -> Result<Vec<Checked<&NewTask>>> {
        self.tasks.iter().map(|t| check_task(config, t)).collect()
    }

    /// The answer, given how many failed tasks a retry reset and what the enqueues did.
    fn answer(&self, (reset, inserted): (u64, Vec<Inserted>)) -> Result<SagaWritten> {
        // a retry answers the tasks it reset; a nudge that also reset some, its enqueues
        let count = match (&self.reset, self.tasks.is_empty()) {
            (Some(_), true) => usize::try_from(reset).unwrap_or(usize::MAX),
            _ => self.tasks.len(),
        };
        let tasks = inserted
            .into_iter()
            .zip(&self.tasks)
            .map(|(i, task)| enqueued(i, task))
            .collect::<Result<Vec<_>>>()?;
        Ok(SagaWritten::Applied(
            StepApplied::new(self.after.0, self.after.1, count).with_tasks(tasks),
        ))
    }
}

/// The rows' steps by name (a position `def` does not have is left out).
fn named(def: &SagaDef, rows: &[(u32, StepState)]) -> Vec<(String, StepState)> {
    let steps: Vec<&str> = def.groups().iter().flatten().map(|s| s.name()).collect();
    rows.iter()
        .filter_map(|(p, state)| {
            let p = usize::try_from(*p).ok()?;
            steps.get(p).map(|n| ((*n).to_owned(), *state))
        })
        .collect()
}

/// The first half of a write: lock, fence (a report), read.
struct ReadPlan<'a> {
    sql: &'a dyn EnqueueSql,
    write: &'a SagaWrite,
    saga: SagaId,
    /// The group whose rows to read: the reported step's, or (`None`) the saga's.
    group: Option<u32>,
    /// Whether to read them: a report of a step alone in its group needs none (no
    /// sibling to join or wait for).
    rows_needed: bool,
    stage: Read,
    found: Option<(SagaStatus, u32)>,
    rows: Vec<(u32, StepState)>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Read {
    Fence,
    Lock,
    Rows,
    Done,
}

impl<'a> ReadPlan<'a> {
    fn new(sql: &'a dyn EnqueueSql, write: &'a SagaWrite) -> Result<Self> {
        let (saga, group, rows_needed, stage) = match write {
            SagaWrite::Step { def, report } => {
                let group = locate(def, &report.step)?.group;
                (report.saga, Some(group), !alone(def, group), Read::Lock)
            }
            SagaWrite::Command { id, .. } | SagaWrite::Nudge { id, .. } => {
                (*id, None, true, Read::Lock)
            }
        };
        Ok(ReadPlan {
            sql,
            write,
            saga,
            group,
            rows_needed,
            stage,
            found: None,
            rows: Vec::new(),
        })
    }

    /// After the lock (and a report's fence): the group's rows when the saga has a row
    /// and they are needed.
    fn after_lock(&self) -> Read {
        match (self.found, self.rows_needed) {
            (Some(_), true) => Read::Rows,
            _ => Read::Done,
        }
    }
}

impl TxPlan for ReadPlan<'_> {
    type Output = Option<Found>;

    fn next_statement(&mut self) -> Result<Option<Statement<'_>>> {
        let step = match (self.stage, self.write) {
            (Read::Fence, SagaWrite::Step { report, .. }) => match &report.outcome {
                StepOutcome::Exhausted { reason, .. } => EnqueueStep::Fail {
                    lease: report.lease,
                    error: reason,
                },
                _ => EnqueueStep::Complete(report.lease),
            },
            (Read::Fence, _) => return Err(unexpected("a fence without a report")),
            (Read::Lock, _) => EnqueueStep::SagaLock(self.saga),
            (Read::Rows, _) => EnqueueStep::StepRows {
                saga: self.saga,
                group: self.group.or(self.found.map(|f| f.1)).unwrap_or_default(),
            },
            (Read::Done, _) => return Ok(None),
        };
        let params = step.params(self.sql.run_at());
        Ok(Some(self.sql.statement(step, params)))
    }

    fn answer(&mut self, answer: Answer) -> Result<()> {
        self.stage = match self.stage {
            Read::Fence => {
                if !applied(&answer, "fence")? {
                    return Err(lease_gone(self.write));
                }
                self.after_lock()
            }
            Read::Lock => {
                if let Some(r) = row(&answer)? {
                    let code = column(r, 0)?;
                    let status = SagaStatus::from_code(code).ok_or_else(|| {
                        unexpected(format!("a saga's status code {code} is unknown"))
                    })?;
                    self.found = Some((status, to_u32(column(r, 1)?)?));
                }
                match self.write {
                    // a report's fence even when the saga's row is missing: a lease gone
                    // is the report's answer before a missing row
                    SagaWrite::Step { .. } => Read::Fence,
                    _ => self.after_lock(),
                }
            }
            Read::Rows => {
                let Answer::Rows(rows) = answer else {
                    return Err(super::statement::wrong_answer(&answer, "rows"));
                };
                for r in rows {
                    let code = column(&r, 1)?;
                    let state = StepState::from_code(code).ok_or_else(|| {
                        unexpected(format!("a step's state code {code} is unknown"))
                    })?;
                    self.rows.push((to_u32(column(&r, 0)?)?, state));
                }
                Read::Done
            }
            Read::Done => return Err(unexpected("an answer with no statement pending")),
        };
        Ok(())
    }

    fn finish(self) -> Result<Option<Found>> {
        match (self.stage, self.found) {
            (Read::Done, found) => Ok(found.map(|(status, group)| Found {
                status,
                group,
                rows: self.rows,
            })),
            _ => Err(unexpected("the write's reads were not all run")),
        }
    }
}

/// The `Conflict` of a report whose task no longer runs under its lease.
fn lease_gone(write: &SagaWrite) -> Error {
    let lease = match write {
        SagaWrite::Step { report, .. } => report.lease,
        _ => return unexpected("a fence without a report"),
    };
    Error::new(
        ErrorKind::Conflict,
        OP,
        format!(
            "task {} is no longer running under lease {} (cancelled, reset or recycled): the \
             step's report is refused",
            lease.task_id, lease.token
        ),
    )
}

/// The second half of a write: the step's row, the saga's row, the reset, the log, the
/// tasks.
struct WritePlan<'a> {
    sql: &'a dyn EnqueueSql,
    saga: SagaId,
    next: &'a Next<'a>,
    tasks: std::vec::IntoIter<Checked<&'a NewTask>>,
    stage: Write,
    enqueue: Option<EnqueuePlan<'a>>,
    reset: u64,
    /// What each task's enqueue did, in order.
    inserted: Vec<Inserted>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Write {
    Record,
    Saga,
    Reset,
    Log,
    Tasks,
    /// After the tasks: [`Next::log_if_changed`].
    Changed,
    Done,
}

impl<'a> WritePlan<'a> {
    fn new(
        sql: &'a dyn EnqueueSql,
        write: &'a SagaWrite,
        next: &'a Next<'a>,
        tasks: Vec<Checked<&'a NewTask>>,
    ) -> Self {
        let saga = match write {
            SagaWrite::Step { report, .. } => report.saga,
            SagaWrite::Command { id, .. } | SagaWrite::Nudge { id, .. } => *id,
        };
        WritePlan {
            sql,
            saga,
            next,
            tasks: tasks.into_iter(),
            stage: Write::Record,
            enqueue: None,
            reset: 0,
            inserted: Vec::new(),
        }
    }

    /// The statement of the current stage, or `None` when the write has nothing for it.
    fn stage_statement(&self) -> Option<EnqueueStep<'a>> {
        let next = self.next;
        match self.stage {
            Write::Record => next.record.as_ref().map(|r| EnqueueStep::StepRecord {
                saga: self.saga,
                position: r.position,
                step: r.step,
                group: r.group,
                state: r.state,
                output: r.output,
            }),
            Write::Saga => next
                .set
                .as_ref()
                .map(|(status, group, reason)| EnqueueStep::SagaSet {
                    saga: self.saga,
                    status: *status,
                    group: *group,
                    reason: reason.as_deref(),
                }),
            Write::Reset => next
                .reset
                .as_ref()
                .map(|(event_type, prefix)| EnqueueStep::ResetFailed { event_type, prefix }),
            Write::Log => next.log.map(|(action, audit)| EnqueueStep::SagaLog {
                saga: self.saga,
                action,
                audit,
            }),
            Write::Changed => {
                let changed =
                    next.set.is_some() || self.reset > 0 || self.inserted.iter().any(|i| i.created);
                next.log_if_changed
                    .filter(|_| changed)
                    .map(|(action, audit)| EnqueueStep::SagaLog {
                        saga: self.saga,
                        action,
                        audit,
                    })
            }
            Write::Tasks | Write::Done => None,
        }
    }

    fn advance(stage: Write) -> Write {
        match stage {
            Write::Record => Write::Saga,
            Write::Saga => Write::Reset,
            Write::Reset => Write::Log,
            Write::Log => Write::Tasks,
            Write::Tasks => Write::Changed,
            Write::Changed | Write::Done => Write::Done,
        }
    }

    fn next(&mut self) -> Result<Option<Statement<'a>>> {
        loop {
            if self.enqueue.is_some() {
                match nested_next(&mut self.enqueue)? {
                    Ok(statement) => return Ok(Some(statement)),
                    Err(inserted) => {
                        self.inserted.extend(inserted);
                        continue;
                    }
                }
            }
            match self.stage {
                Write::Done => return Ok(None),
                Write::Tasks => match self.tasks.next() {
                    Some(task) => {
                        self.enqueue = Some(EnqueuePlan::new(self.sql, task));
                        continue;
                    }
                    None => {
                        self.stage = Write::Changed;
                        continue;
                    }
                },
                _ => {}
            }
            match self.stage_statement() {
                Some(step) => {
                    let params = step.params(self.sql.run_at());
                    return Ok(Some(self.sql.statement(step, params)));
                }
                None => self.stage = WritePlan::advance(self.stage),
            }
        }
    }
}

impl TxPlan for WritePlan<'_> {
    /// How many failed tasks a reset reset, and what each task's enqueue did.
    type Output = (u64, Vec<Inserted>);

    fn next_statement(&mut self) -> Result<Option<Statement<'_>>> {
        self.next()
    }

    fn answer(&mut self, answer: Answer) -> Result<()> {
        if let Some(plan) = &mut self.enqueue {
            return plan.answer(answer);
        }
        match self.stage {
            // upserts and inserts: any count (MySQL counts an upsert's update twice)
            Write::Record | Write::Log | Write::Changed => match answer {
                Answer::Row(_) | Answer::RowsAffected(_) => {}
                other => return Err(super::statement::wrong_answer(&other, "a count")),
            },
            Write::Saga => {
                if !applied(&answer, "saga set")? {
                    return Err(unexpected(format!(
                        "saga {}'s row was not updated",
                        self.saga
                    )));
                }
            }
            Write::Reset => {
                self.reset = match answer {
                    Answer::RowsAffected(n) => n,
                    ref other => row(other)?
                        .map(|r| column(r, 0))
                        .transpose()?
                        .map_or(0, |n| u64::try_from(n).unwrap_or(0)),
                };
            }
            Write::Tasks | Write::Done => {
                return Err(unexpected("an answer with no statement pending"))
            }
        }
        self.stage = WritePlan::advance(self.stage);
        Ok(())
    }

    fn finish(self) -> Result<(u64, Vec<Inserted>)> {
        match self.stage {
            Write::Done if self.enqueue.is_none() => Ok((self.reset, self.inserted)),
            _ => Err(unexpected("the write's statements were not all run")),
        }
    }
}

fn to_u32(n: i64) -> Result<u32> {
    u32::try_from(n).map_err(|_| unexpected(format!("a group or position {n} out of range")))
}

fn unexpected(message: impl Into<String>) -> Error {
    Error::new(ErrorKind::Unexpected, OP, message.into())
}

#[cfg(test)]
#[path = "saga_write_tests.rs"]
mod tests;
