//! A saga's start as statements without I/O ([`SagaStartPlan`]): its state row and the
//! tasks of its first group, in one transaction, idempotent by the saga's key.

use super::enqueue::nested_next;
use super::statement::{applied, column, row, wrong_answer};
use super::{Answer, Checked, EnqueuePlan, EnqueueSql, EnqueueStep, Statement, TxPlan};
use crate::error::{Error, ErrorKind, Result};
use crate::model::{SagaStart, SagaStarted, SagaStatus};

/// The start of one saga ([`SagaStart`]) as statements of a backend's [`EnqueueSql`]: a
/// [`TxPlan`] whose output is what the start did.
///
/// 1. Insert the state row, skipped when a saga of the name and key exists.
/// 2. Only when it inserted: enqueue the first group's tasks ([`EnqueuePlan`] each).
/// 3. Read the saga's id and status.
///
/// Two starts of one key racing insert the same unique row: the database makes the
/// second wait for the first's commit, and it answers the first's saga without writing.
/// A rolled-back start leaves nothing.
pub struct SagaStartPlan<'a> {
    sql: &'a dyn EnqueueSql,
    start: &'a SagaStart,
    step: Step,
    created: bool,
    enqueue: Option<EnqueuePlan<'a>>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Step {
    Insert,
    /// Enqueue the first group's task at this index.
    Task(usize),
    Read,
    Done(SagaStarted),
}

impl<'a> SagaStartPlan<'a> {
    /// The plan of `start` in `sql`'s statements.
    pub fn new(sql: &'a dyn EnqueueSql, start: Checked<&'a SagaStart>) -> Self {
        SagaStartPlan {
            sql,
            start: start.into_inner(),
            step: Step::Insert,
            created: false,
            enqueue: None,
        }
    }

    fn next(&mut self) -> Result<Option<Statement<'a>>> {
        loop {
            if self.enqueue.is_some() {
                match nested_next(&mut self.enqueue)? {
                    Ok(statement) => return Ok(Some(statement)),
                    Err(_) => continue,
                }
            }
            let step = match self.step {
                Step::Insert => EnqueueStep::SagaInsert(self.start),
                Step::Task(i) => match self.start.first_tasks().get(i) {
                    Some(task) => {
                        // checked with the start (`check_start`)
                        self.enqueue = Some(EnqueuePlan::new(self.sql, Checked::new(task)));
                        self.step = Step::Task(i + 1);
                        continue;
                    }
                    None => {
                        self.step = Step::Read;
                        continue;
                    }
                },
                Step::Read => EnqueueStep::SagaRead(self.start),
                Step::Done(_) => return Ok(None),
            };
            let params = step.params(self.sql.run_at());
            return Ok(Some(self.sql.statement(step, params)));
        }
    }
}

impl<'a> TxPlan for SagaStartPlan<'a> {
    type Output = SagaStarted;

    fn next_statement(&mut self) -> Result<Option<Statement<'_>>> {
        self.next()
    }

    fn answer(&mut self, answer: Answer) -> Result<()> {
        if let Some(plan) = &mut self.enqueue {
            return plan.answer(answer);
        }
        self.step = match self.step {
            Step::Insert => {
                self.created = applied(&answer, "saga insert")?;
                if self.created {
                    Step::Task(0)
                } else {
                    Step::Read
                }
            }
            Step::Read => {
                let Some(r) = row(&answer)? else {
                    return Err(unexpected("the saga's row was not there to read"));
                };
                let (id, code) = (column(r, 0)?, column(r, 1)?);
                let status = SagaStatus::from_code(code)
                    .ok_or_else(|| unexpected(format!("a saga's status code {code} is unknown")))?;
                Step::Done(SagaStarted::new(id, status, self.created))
            }
            Step::Task(_) | Step::Done(_) => {
                return Err(wrong_answer(&answer, "no answer: no statement is pending"))
            }
        };
        Ok(())
    }

    fn finish(self) -> Result<SagaStarted> {
        match self.step {
            Step::Done(started) if self.enqueue.is_none() => Ok(started),
            _ => Err(unexpected("the start's statements were not all run")),
        }
    }
}

fn unexpected(message: impl Into<String>) -> Error {
    Error::new(ErrorKind::Unexpected, "start_saga", message.into())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::driver::enqueue::tests::Names;
    use crate::{SagaDef, SagaStep};

    fn def() -> SagaDef {
        SagaDef::builder("order")
            .parallel([SagaStep::new("stock"), SagaStep::new("coupon")])
            .step(SagaStep::new("pay"))
            .build()
            .unwrap()
    }

    /// The statements a start runs, given each statement's answer.
    fn run(start: &SagaStart, answers: Vec<Answer>) -> (Vec<String>, SagaStarted) {
        let mut plan = SagaStartPlan::new(&Names, Checked::new(start));
        let mut ran = Vec::new();
        let mut answers = answers.into_iter();
        while let Some(s) = plan.next_statement().unwrap() {
            ran.push(s.sql().to_owned());
            plan.answer(answers.next().expect("an answer per statement"))
                .unwrap();
        }
        assert!(answers.next().is_none(), "every answer used");
        (ran, plan.finish().unwrap())
    }

    #[test]
    fn a_new_saga_inserts_its_row_then_its_first_group_then_reads_its_id() {
        let start = def().start("o-1", &1).unwrap();
        let (ran, started) = run(
            &start,
            vec![
                Answer::Row(Some(vec![1])),
                Answer::Row(Some(vec![10])),
                Answer::Row(Some(vec![11])),
                Answer::Row(Some(vec![7, 0])),
            ],
        );
        assert_eq!(ran, ["saga insert", "insert", "insert", "saga read"]);
        assert_eq!(started, SagaStarted::new(7, SagaStatus::Running, true));
    }

    #[test]
    fn a_key_started_before_writes_nothing_and_answers_its_saga() {
        let start = def().start("o-1", &1).unwrap();
        let (ran, started) = run(
            &start,
            vec![Answer::Row(None), Answer::Row(Some(vec![7, 2]))],
        );
        assert_eq!(ran, ["saga insert", "saga read"]);
        assert_eq!(started, SagaStarted::new(7, SagaStatus::Completed, false));
    }

    #[test]
    fn a_missing_row_or_an_unknown_status_is_an_error_not_a_guess() {
        let start = def().start("o-1", &1).unwrap();
        for read in [Answer::Row(None), Answer::Row(Some(vec![7, 9]))] {
            let mut plan = SagaStartPlan::new(&Names, Checked::new(&start));
            plan.next_statement().unwrap();
            plan.answer(Answer::Row(None)).unwrap();
            plan.next_statement().unwrap();
            let e = plan.answer(read).unwrap_err();
            assert_eq!(
                (e.kind(), e.operation()),
                (ErrorKind::Unexpected, "start_saga")
            );
        }
        let plan = SagaStartPlan::new(&Names, Checked::new(&start));
        assert!(
            plan.finish().is_err(),
            "no answer before the statements ran"
        );
    }
}
