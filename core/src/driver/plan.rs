//! The one shape of every protocol core runs on a connection: a plan of statements
//! without I/O ([`TxPlan`]), and the two loops that run any plan, on an async or a
//! blocking connection.

use async_trait::async_trait;

use super::{Answer, BlockingTxConnection, Statement, TxConnection};
use crate::error::Result;

/// A protocol as statements in a backend's SQL, without I/O: take the
/// [`next_statement`](Self::next_statement), run it, [`answer`](Self::answer) with what
/// it returned, until there is none; then [`finish`](Self::finish). The enqueue
/// ([`EnqueuePlan`](super::EnqueuePlan), [`EnqueueBatch`](super::EnqueueBatch)), the
/// order key's release ([`KeyReleasePlan`](super::KeyReleasePlan),
/// [`KeysReleasePlan`](super::KeysReleasePlan)) and the participant barrier
/// ([`BarrierPlan`](super::BarrierPlan)) are plans; a new protocol is one more, and
/// every connection runs it with [`run`](Self::run) or [`run_blocking`](Self::run_blocking).
///
/// # Contract
///
/// - The statements run in order inside one transaction, which the caller owns: a plan
///   neither begins nor commits.
/// - An error from [`answer`](Self::answer) or from the connection ends the plan; the
///   caller rolls its transaction back.
/// - [`finish`](Self::finish) before [`next_statement`](Self::next_statement) answered
///   `None` is an `Unexpected` error, never a partial result.
#[async_trait]
pub trait TxPlan: Send + Sized {
    /// What the plan answers once every statement ran.
    type Output: Send;

    /// The next statement to run, or `None` when the plan is done.
    fn next_statement(&mut self) -> Result<Option<Statement<'_>>>;

    /// The answer of the statement [`next_statement`](Self::next_statement) gave last.
    fn answer(&mut self, answer: Answer) -> Result<()>;

    /// What the plan did, once [`next_statement`](Self::next_statement) said it is done.
    fn finish(self) -> Result<Self::Output>;

    /// Run the plan on `conn`.
    async fn run<C: TxConnection + ?Sized>(mut self, conn: &mut C) -> Result<Self::Output> {
        loop {
            let answer = match self.next_statement()? {
                Some(statement) => conn.run(&statement).await?,
                None => break,
            };
            self.answer(answer)?;
        }
        self.finish()
    }

    /// Run the plan on a blocking driver's `conn`.
    fn run_blocking<C: BlockingTxConnection + ?Sized>(
        mut self,
        conn: &mut C,
    ) -> Result<Self::Output> {
        loop {
            let answer = match self.next_statement()? {
                Some(statement) => conn.run(&statement)?,
                None => break,
            };
            self.answer(answer)?;
        }
        self.finish()
    }
}
