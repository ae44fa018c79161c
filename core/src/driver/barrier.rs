//! The participant barrier's protocol (dtm's sub-transaction barrier, the source
//! articles' TCC control table): which statements decide a [`BranchCall`]'s
//! [`Barrier`] on the participant's transaction. I/O-free: a backend supplies the SQL
//! ([`EnqueueStep::BarrierInsert`], [`EnqueueStep::BarrierRead`]), any
//! [`TxConnection`] runs it.
//!
//! # The rules
//!
//! The barrier table holds one row per `(gid, branch_id, op)`, unique, with the
//! operation that wrote it (`reason`). A call inserts its rows, skipping those that
//! exist, on the participant's transaction, so the rows commit or roll back with its
//! business writes:
//!
//! 1. A compensation or cancel first inserts the row of the forward call it undoes
//!    ([`BranchOp::undoes`]), with itself as the reason. When that insert makes a row,
//!    the forward call never ran: an **empty compensation** (nothing to undo).
//! 2. Every call inserts its own row. When the row exists, the call is a **duplicate**
//!    (its reason is the call itself) or **hanging** (a forward call whose row its
//!    compensation wrote first: refused, or it would reserve what nobody releases).
//! 3. Otherwise the call **runs**.
//!
//! Two racing calls of one branch (a try and its cancel, two deliveries) insert the
//! same unique row: the database makes the second wait for the first's commit, so
//! exactly one legal outcome follows — the try runs and the cancel undoes it, or the
//! cancel is empty and the try hangs. A rolled-back call leaves no row.

use super::statement::{applied, wrong_answer};
use super::{Answer, EnqueueSql, EnqueueStep, Statement, TxPlan};
use crate::error::{Error, ErrorKind, Result};
use crate::model::{Barrier, BranchCall, BranchOp};

/// The statements deciding one call's [`Barrier`], in order, and the verdict: a
/// [`TxPlan`] whose output is the verdict.
pub struct BarrierPlan<'a> {
    sql: &'a dyn EnqueueSql,
    call: &'a BranchCall,
    step: Step,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Step {
    /// Insert the row of the forward call this one undoes.
    Undone(BranchOp),
    /// Insert the call's own row; `undone_inserted`: step 1 made a row.
    Own {
        undone_inserted: bool,
    },
    /// Read whether the call's row was written by the call itself.
    Read,
    Done(Barrier),
}

impl<'a> BarrierPlan<'a> {
    /// The plan of `call` in `sql`'s statements.
    pub fn new(sql: &'a dyn EnqueueSql, call: &'a BranchCall) -> Self {
        let step = match call.op().undoes() {
            Some(forward) => Step::Undone(forward),
            None => Step::Own {
                undone_inserted: false,
            },
        };
        BarrierPlan { sql, call, step }
    }
}

impl<'a> TxPlan for BarrierPlan<'a> {
    type Output = Barrier;

    /// The next statement to run, or `None` when the verdict is known.
    fn next_statement(&mut self) -> Result<Option<Statement<'_>>> {
        let step = match self.step {
            Step::Undone(op) => EnqueueStep::BarrierInsert {
                call: self.call,
                op,
            },
            Step::Own { .. } => EnqueueStep::BarrierInsert {
                call: self.call,
                op: self.call.op(),
            },
            Step::Read => EnqueueStep::BarrierRead(self.call),
            Step::Done(_) => return Ok(None),
        };
        let params = step.params(self.sql.run_at());
        Ok(Some(self.sql.statement(step, params)))
    }

    /// The answer of the statement [`next_statement`](Self::next_statement) gave last.
    fn answer(&mut self, answer: Answer) -> Result<()> {
        self.step = match self.step {
            Step::Undone(_) => Step::Own {
                undone_inserted: applied(&answer, "barrier insert")?,
            },
            Step::Own { undone_inserted } => {
                match (undone_inserted, applied(&answer, "barrier insert")?) {
                    (true, _) => Step::Done(Barrier::EmptyCompensation),
                    (false, true) => Step::Done(Barrier::Run),
                    // the row exists: who wrote it?
                    (false, false) => Step::Read,
                }
            }
            Step::Read => Step::Done(match answer {
                // written by another operation: the compensation that came first
                Answer::Row(Some(row)) if row.first() == Some(&0) => Barrier::Hanging,
                // written by this operation before (or purged since: nothing to run)
                Answer::Row(_) => Barrier::Duplicate,
                other => return Err(wrong_answer(&other, "a row of one integer")),
            }),
            Step::Done(_) => {
                return Err(Error::new(
                    ErrorKind::Unexpected,
                    "barrier",
                    "an answer with no statement pending",
                ))
            }
        };
        Ok(())
    }

    /// The verdict, once every statement is answered; counted in
    /// `backstop_barrier_total{op, verdict}` (the transaction may still roll back: the
    /// count is of verdicts given).
    fn finish(self) -> Result<Barrier> {
        match self.step {
            Step::Done(verdict) => {
                metrics::counter!(
                    "backstop_barrier_total",
                    "op" => self.call.op().as_str(),
                    "verdict" => verdict.as_str(),
                )
                .increment(1);
                Ok(verdict)
            }
            _ => Err(Error::new(
                ErrorKind::Unexpected,
                "barrier",
                "the barrier's statements did not all run",
            )),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::driver::enqueue::tests::Names;

    /// The statements a call runs, given the answers of its inserts (and read).
    fn decide(op: BranchOp, answers: &[Answer]) -> (Vec<String>, Barrier) {
        let call = BranchCall::new("g", "b", op).unwrap();
        let mut plan = BarrierPlan::new(&Names, &call);
        let mut ran = Vec::new();
        let mut answers = answers.iter().cloned();
        while let Some(s) = plan.next_statement().unwrap() {
            let params: Vec<String> = s.params().iter().map(|v| format!("{v:?}")).collect();
            ran.push(format!("{} {}", s.sql(), params.join(" ")));
            plan.answer(answers.next().expect("an answer per statement"))
                .unwrap();
        }
        (ran, plan.finish().unwrap())
    }

    #[test]
    fn each_verdict_follows_from_the_rows_inserted() {
        let (yes, no) = (Answer::RowsAffected(1), Answer::RowsAffected(0));
        let text = |s: &str| format!("Text(Some({s:?}))");
        let insert = |op: &str, reason: &str| {
            format!(
                "barrier insert {} {} {} {}",
                text("g"),
                text("b"),
                text(op),
                text(reason)
            )
        };
        let (ran, v) = decide(BranchOp::Try, std::slice::from_ref(&yes));
        assert_eq!((ran, v), (vec![insert("try", "try")], Barrier::Run));
        // a cancel inserts its try's row (reason cancel), then its own
        let (ran, v) = decide(BranchOp::Cancel, &[yes.clone(), yes.clone()]);
        assert_eq!(ran, [insert("try", "cancel"), insert("cancel", "cancel")]);
        assert_eq!(v, Barrier::EmptyCompensation);
        let (_, v) = decide(BranchOp::Cancel, &[no.clone(), yes.clone()]);
        assert_eq!(v, Barrier::Run);
        // an existing row: read who wrote it
        let (ran, v) = decide(
            BranchOp::Cancel,
            &[no.clone(), no.clone(), Answer::Row(Some(vec![1]))],
        );
        let read = format!(
            "barrier read {} {} {}",
            text("g"),
            text("b"),
            text("cancel")
        );
        assert_eq!((ran.len(), &ran[2], v), (3, &read, Barrier::Duplicate));
        let (_, v) = decide(BranchOp::Try, &[no.clone(), Answer::Row(Some(vec![0]))]);
        assert_eq!(v, Barrier::Hanging);
        let (_, v) = decide(BranchOp::Action, &[no.clone(), Answer::Row(Some(vec![1]))]);
        assert_eq!(v, Barrier::Duplicate);
        let (_, v) = decide(BranchOp::Confirm, &[no, Answer::Row(None)]);
        assert_eq!(v, Barrier::Duplicate);
        // PostgreSQL answers its inserts with a row, or none when skipped
        let (_, v) = decide(
            BranchOp::Compensate,
            &[Answer::Row(None), Answer::Row(Some(vec![1]))],
        );
        assert_eq!(v, Barrier::Run);
    }

    #[test]
    fn a_wrong_answer_is_an_error() {
        let call = BranchCall::new("g", "b", BranchOp::Try).unwrap();
        let mut plan = BarrierPlan::new(&Names, &call);
        assert!(plan.answer(Answer::Rows(vec![])).is_err());
        let plan = BarrierPlan::new(&Names, &call);
        assert!(plan.finish().is_err());
    }
}
