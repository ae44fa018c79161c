//! A saga step's report as statements without I/O: the step's task completed (or
//! failed), its row written, the saga moved on and the next steps' tasks enqueued, in
//! one transaction ([`saga_step_on`], [`saga_step_blocking`]).
//!
//! Two plans run back to back on the transaction, with the decision between them:
//!
//! 1. [`StepReadPlan`]: the fence (the task's completion, or its failure, under the
//!    report's lease: no row changed and the report is refused), the saga row's lock,
//!    and the step rows of the step's group;
//! 2. [`SagaProgress::decide`] on what was read;
//! 3. [`StepWritePlan`]: the step's row, the saga's row, and an [`EnqueuePlan`] per
//!    task to start.
//!
//! Reports of one saga serialize on its row: each locks its own task's row, then the
//! saga's, so two siblings of a parallel group finishing at once take turns, and the
//! second sees the first's step row (the join).

use super::checks::check_task;
use super::enqueue::nested_next;
use super::statement::{applied, column, row};
use super::{
    Answer, BlockingTxConnection, Checked, EnqueuePlan, EnqueueSql, EnqueueStep, Statement,
    TxConnection, TxPlan,
};
use super::{Decision, SagaProgress, StepEvent};
use crate::error::{Error, ErrorKind, Result};
use crate::limits::StoreConfig;
use crate::model::{NewTask, SagaDef, SagaStatus, StepApplied, StepOutcome, StepReport, StepState};

const OP: &str = "saga_step";

/// Run `report` of a step of `def` on the transaction `conn` (the store's own, or the
/// caller's): see the [module docs](self). `Conflict` when the step's task no longer
/// runs under the report's lease; `Unexpected` when the saga's row is missing. On an
/// error, roll the transaction back.
pub async fn saga_step_on<C: TxConnection + ?Sized>(
    sql: &dyn EnqueueSql,
    config: &StoreConfig,
    conn: &mut C,
    def: &SagaDef,
    report: Checked<&StepReport>,
) -> Result<StepApplied> {
    let at = locate(def, &report)?;
    let found = StepReadPlan::new(sql, report, at.group).run(conn).await?;
    let next = Next::decide(def, &report, at, found)?;
    let tasks = next.checked(config)?;
    StepWritePlan::new(sql, report, at, &next, tasks)
        .run(conn)
        .await?;
    Ok(next.applied)
}

/// [`saga_step_on`] on a blocking driver's connection.
pub fn saga_step_blocking<C: BlockingTxConnection + ?Sized>(
    sql: &dyn EnqueueSql,
    config: &StoreConfig,
    conn: &mut C,
    def: &SagaDef,
    report: Checked<&StepReport>,
) -> Result<StepApplied> {
    let at = locate(def, &report)?;
    let found = StepReadPlan::new(sql, report, at.group).run_blocking(conn)?;
    let next = Next::decide(def, &report, at, found)?;
    let tasks = next.checked(config)?;
    StepWritePlan::new(sql, report, at, &next, tasks).run_blocking(conn)?;
    Ok(next.applied)
}

/// Where the reported step is in its definition.
#[derive(Debug, Clone, Copy)]
struct At {
    group: u32,
    position: u32,
}

fn locate(def: &SagaDef, report: &StepReport) -> Result<At> {
    def.find_step(&report.step)
        .map(|(group, position, _)| At { group, position })
        .ok_or_else(|| {
            Error::invalid_input(
                OP,
                format!("saga {:?} has no step {:?}", def.name(), report.step),
            )
        })
}

/// What the read found: the saga's status and group, and the step rows of the step's
/// group (position, state).
#[derive(Debug, Clone, PartialEq, Eq)]
struct Found {
    status: SagaStatus,
    group: u32,
    rows: Vec<(u32, StepState)>,
}

/// The decision, its tasks and the answer.
struct Next {
    decision: Decision,
    tasks: Vec<NewTask>,
    applied: StepApplied,
}

impl Next {
    fn decide(def: &SagaDef, report: &StepReport, at: At, found: Found) -> Result<Next> {
        let name = |position: u32| {
            def.groups()
                .iter()
                .flatten()
                .nth(usize::try_from(position).unwrap_or(usize::MAX))
                .map(|s| s.name().to_owned())
        };
        let rows: Vec<(String, StepState)> = found
            .rows
            .iter()
            .filter_map(|(p, state)| name(*p).map(|n| (n, *state)))
            .collect();
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
        let mut tasks = Vec::with_capacity(decision.enqueue.len());
        for (step, phase) in &decision.enqueue {
            let (_, _, step) = def.find_step(step).ok_or_else(|| {
                Error::new(
                    ErrorKind::Unexpected,
                    OP,
                    format!("the decision names a step {step:?} the saga does not have"),
                )
            })?;
            tasks.push(def.step_task(&report.key, step, *phase));
        }
        let (status, group) = match &decision.saga {
            Some(change) => (change.status, change.group),
            None => (found.status, found.group),
        };
        Ok(Next {
            applied: StepApplied::new(status, group, tasks.len()),
            decision,
            tasks,
        })
    }

    /// The tasks, checked as an enqueue checks them (a store with a tiny payload limit
    /// refuses them here, before anything is written).
    fn checked(&self, config: &StoreConfig) -> Result<Vec<Checked<&NewTask>>> {
        self.tasks.iter().map(|t| check_task(config, t)).collect()
    }
}

/// The first half of a report: fence, lock, read.
struct StepReadPlan<'a> {
    sql: &'a dyn EnqueueSql,
    report: &'a StepReport,
    group: u32,
    stage: Read,
    saga: Option<(SagaStatus, u32)>,
    rows: Vec<(u32, StepState)>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Read {
    Fence,
    Lock,
    Rows,
    Done,
}

impl<'a> StepReadPlan<'a> {
    fn new(sql: &'a dyn EnqueueSql, report: Checked<&'a StepReport>, group: u32) -> Self {
        StepReadPlan {
            sql,
            report: report.into_inner(),
            group,
            stage: Read::Fence,
            saga: None,
            rows: Vec::new(),
        }
    }
}

impl TxPlan for StepReadPlan<'_> {
    type Output = Found;

    fn next_statement(&mut self) -> Result<Option<Statement<'_>>> {
        let report = self.report;
        let step = match self.stage {
            Read::Fence => match &report.outcome {
                StepOutcome::Exhausted { reason, .. } => EnqueueStep::Fail {
                    lease: report.lease,
                    error: reason,
                },
                _ => EnqueueStep::Complete(report.lease),
            },
            Read::Lock => EnqueueStep::SagaLock(report.saga),
            Read::Rows => EnqueueStep::StepRows {
                saga: report.saga,
                group: self.group,
            },
            Read::Done => return Ok(None),
        };
        let params = step.params(self.sql.run_at());
        Ok(Some(self.sql.statement(step, params)))
    }

    fn answer(&mut self, answer: Answer) -> Result<()> {
        self.stage = match self.stage {
            Read::Fence => {
                if !applied(&answer, "fence")? {
                    let lease = self.report.lease;
                    return Err(Error::new(
                        ErrorKind::Conflict,
                        OP,
                        format!(
                            "task {} is no longer running under lease {} (cancelled, reset or \
                             recycled): the step's report is refused",
                            lease.task_id, lease.token
                        ),
                    ));
                }
                Read::Lock
            }
            Read::Lock => {
                let Some(r) = row(&answer)? else {
                    return Err(unexpected(format!(
                        "saga {} has no row to lock",
                        self.report.saga
                    )));
                };
                let code = column(r, 0)?;
                let status = SagaStatus::from_code(code)
                    .ok_or_else(|| unexpected(format!("a saga's status code {code} is unknown")))?;
                self.saga = Some((status, to_u32(column(r, 1)?)?));
                Read::Rows
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

    fn finish(self) -> Result<Found> {
        match (self.stage, self.saga) {
            (Read::Done, Some((status, group))) => Ok(Found {
                status,
                group,
                rows: self.rows,
            }),
            _ => Err(unexpected("the report's reads were not all run")),
        }
    }
}

/// The second half of a report: the step's row, the saga's row, the tasks.
struct StepWritePlan<'a> {
    sql: &'a dyn EnqueueSql,
    report: &'a StepReport,
    at: At,
    decision: &'a Decision,
    /// The saga's status and group after the report.
    set: (SagaStatus, u32),
    tasks: std::vec::IntoIter<Checked<&'a NewTask>>,
    stage: Write,
    enqueue: Option<EnqueuePlan<'a>>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Write {
    Record,
    Saga,
    Tasks,
    Done,
}

impl<'a> StepWritePlan<'a> {
    fn new(
        sql: &'a dyn EnqueueSql,
        report: Checked<&'a StepReport>,
        at: At,
        next: &'a Next,
        tasks: Vec<Checked<&'a NewTask>>,
    ) -> Self {
        StepWritePlan {
            sql,
            report: report.into_inner(),
            at,
            decision: &next.decision,
            set: (next.applied.status, next.applied.group),
            tasks: tasks.into_iter(),
            stage: Write::Record,
            enqueue: None,
        }
    }

    fn next(&mut self) -> Result<Option<Statement<'a>>> {
        let report = self.report;
        loop {
            if self.enqueue.is_some() {
                match nested_next(&mut self.enqueue)? {
                    Some(statement) => return Ok(Some(statement)),
                    None => continue,
                }
            }
            let step = match self.stage {
                Write::Record => EnqueueStep::StepRecord {
                    saga: report.saga,
                    position: self.at.position,
                    step: &report.step,
                    group: self.at.group,
                    state: self.decision.record.1,
                    output: match &report.outcome {
                        StepOutcome::Done { output } => Some(output),
                        _ => None,
                    },
                },
                Write::Saga => {
                    // every report updates the row (its version and time), changed or not
                    EnqueueStep::SagaSet {
                        saga: report.saga,
                        status: self.set.0,
                        group: self.set.1,
                        reason: self
                            .decision
                            .saga
                            .as_ref()
                            .and_then(|c| c.reason.as_deref()),
                    }
                }
                Write::Tasks => match self.tasks.next() {
                    Some(task) => {
                        self.enqueue = Some(EnqueuePlan::new(self.sql, task));
                        continue;
                    }
                    None => {
                        self.stage = Write::Done;
                        return Ok(None);
                    }
                },
                Write::Done => return Ok(None),
            };
            let params = step.params(self.sql.run_at());
            return Ok(Some(self.sql.statement(step, params)));
        }
    }
}

impl TxPlan for StepWritePlan<'_> {
    type Output = ();

    fn next_statement(&mut self) -> Result<Option<Statement<'_>>> {
        self.next()
    }

    fn answer(&mut self, answer: Answer) -> Result<()> {
        if let Some(plan) = &mut self.enqueue {
            return plan.answer(answer);
        }
        self.stage = match self.stage {
            Write::Record => {
                // an upsert: any count (MySQL counts an update twice, an unchanged row 0)
                match answer {
                    Answer::Row(_) | Answer::RowsAffected(_) => {}
                    other => return Err(super::statement::wrong_answer(&other, "a count")),
                }
                Write::Saga
            }
            Write::Saga => {
                if !applied(&answer, "saga set")? {
                    return Err(unexpected(format!(
                        "saga {}'s row was not updated",
                        self.report.saga
                    )));
                }
                Write::Tasks
            }
            Write::Tasks | Write::Done => {
                return Err(unexpected("an answer with no statement pending"))
            }
        };
        Ok(())
    }

    fn finish(self) -> Result<()> {
        match self.stage {
            Write::Done if self.enqueue.is_none() => Ok(()),
            _ => Err(unexpected("the report's writes were not all run")),
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
mod tests {
    use super::*;
    use crate::driver::enqueue::tests::Names;
    use crate::model::{Lease, SagaStep, StepPhase};

    fn def() -> SagaDef {
        SagaDef::builder("order")
            .step(SagaStep::new("stock").compensated())
            .parallel([SagaStep::new("coupon"), SagaStep::new("points")])
            .build()
            .unwrap()
    }

    fn report(step: &str, outcome: StepOutcome) -> StepReport {
        let lease = Lease {
            task_id: 5,
            token: 2,
        };
        StepReport::new(lease, 9, "o-1", step, outcome)
    }

    /// Run a report on `Names`, answering each statement from `answers` (an insert of
    /// a task answers with a new id); the statements run.
    fn run(
        def: &SagaDef,
        r: &StepReport,
        answers: Vec<Answer>,
    ) -> Result<(Vec<String>, StepApplied)> {
        struct Scripted(std::vec::IntoIter<Answer>, Vec<String>);
        impl BlockingTxConnection for Scripted {
            fn dialect(&self) -> super::super::Dialect {
                super::super::Dialect::Postgres
            }
            fn run(&mut self, s: &Statement<'_>) -> Result<Answer> {
                self.1.push(s.sql().to_owned());
                Ok(match s.sql() {
                    "insert" => Answer::Row(Some(vec![100])),
                    _ => self.0.next().expect("an answer per statement"),
                })
            }
        }
        let mut conn = Scripted(answers.into_iter(), Vec::new());
        let config = StoreConfig::default();
        let applied = saga_step_blocking(&Names, &config, &mut conn, def, Checked::new(r))?;
        Ok((conn.1, applied))
    }

    #[test]
    fn a_done_step_records_itself_moves_the_saga_and_enqueues_the_next_group() {
        let def = def();
        let r = report(
            "stock",
            StepOutcome::Done {
                output: "{}".into(),
            },
        );
        let (ran, applied) = run(
            &def,
            &r,
            vec![
                Answer::RowsAffected(1),
                Answer::Row(Some(vec![0, 0])),
                Answer::Rows(vec![]),
                Answer::RowsAffected(1),
                Answer::RowsAffected(1),
            ],
        )
        .unwrap();
        assert_eq!(
            ran,
            [
                "complete",
                "saga lock",
                "step rows",
                "step record",
                "saga set",
                "insert",
                "insert"
            ]
        );
        assert_eq!(applied, StepApplied::new(SagaStatus::Running, 1, 2));
    }

    #[test]
    fn the_first_sibling_only_records_and_the_second_joins() {
        let def = def();
        let done = |s: &str| report(s, StepOutcome::Done { output: "1".into() });
        let base = |rows| {
            vec![
                Answer::RowsAffected(1),
                Answer::Row(Some(vec![0, 1])),
                Answer::Rows(rows),
                Answer::RowsAffected(1),
                Answer::RowsAffected(1),
            ]
        };
        let (_, first) = run(&def, &done("points"), base(vec![])).unwrap();
        assert_eq!(first, StepApplied::new(SagaStatus::Running, 1, 0));
        // coupon (position 1) finds points (position 2) done: the saga completes
        let (_, second) = run(&def, &done("coupon"), base(vec![vec![2, 1]])).unwrap();
        assert_eq!(second, StepApplied::new(SagaStatus::Completed, 1, 0));
    }

    #[test]
    fn a_lost_lease_or_a_missing_saga_writes_nothing_more() {
        let def = def();
        let r = report("stock", StepOutcome::Compensated);
        let e = run(&def, &r, vec![Answer::RowsAffected(0)]).unwrap_err();
        assert_eq!((e.kind(), e.operation()), (ErrorKind::Conflict, OP));
        let e = run(&def, &r, vec![Answer::RowsAffected(1), Answer::Row(None)]).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::Unexpected);
        let e = run(&def, &report("nope", StepOutcome::Compensated), vec![]).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::InvalidInput);
    }

    #[test]
    fn an_exhausted_step_fails_its_task_and_parks_the_saga() {
        let def = def();
        let r = report(
            "stock",
            StepOutcome::Exhausted {
                phase: StepPhase::Action,
                reason: "down".into(),
            },
        );
        let (ran, applied) = run(
            &def,
            &r,
            vec![
                Answer::RowsAffected(1),
                Answer::Row(Some(vec![0, 0])),
                Answer::Rows(vec![]),
                Answer::RowsAffected(1),
                Answer::RowsAffected(1),
            ],
        )
        .unwrap();
        assert_eq!(ran[0], "fail");
        assert_eq!(applied, StepApplied::new(SagaStatus::Parked, 0, 0));
    }
}
