//! TCC transactions (try, confirm, cancel) as definitions of the saga engine: every
//! branch's try side by side, then every branch's confirm; any try failing cancels
//! every branch. Built with [`SagaDef::tcc`].

use std::time::Duration;

use crate::error::{Error, Result};
use crate::limits;
use crate::model::saga::{check_name, StepRole};
use crate::model::{SagaDef, SagaStep};

/// Builds a TCC transaction's definition ([`SagaDef::tcc`]).
#[derive(Debug, Clone)]
#[must_use]
pub struct TccDefBuilder {
    name: String,
    branches: Vec<SagaStep>,
    stuck_after: Option<Duration>,
    deadline: Option<Duration>,
}

impl SagaDef {
    /// The suffix of a TCC branch's confirm step: branch `debit` confirms as step
    /// `debit.confirm`.
    pub const CONFIRM_SUFFIX: &'static str = ".confirm";

    /// A TCC transaction named `name` (named as a saga is): the try of every branch
    /// runs side by side; when every try succeeded, the confirm of every branch runs;
    /// when any try fails, for a business reason or out of attempts, the cancel of
    /// every branch runs, whatever its try did. Confirms and cancels retry until they
    /// succeed (each branch's [`compensation_retry`](SagaStep::compensation_retry)
    /// policy; out of attempts, the transaction parks for an operator). Its state row,
    /// operators' commands and reconciler are a saga's; it ends
    /// [`Completed`](crate::SagaStatus::Completed) (confirmed) or
    /// [`Compensated`](crate::SagaStatus::Compensated) (cancelled).
    ///
    /// Guard each participant's try, confirm and cancel with the barrier
    /// ([`StepContext::branch`](crate::StepContext::branch)): a cancel may come for a
    /// try that never ran (empty), and a try delayed past its cancel must not reserve
    /// (hanging).
    ///
    /// ```
    /// use backstop_core::{SagaDef, SagaStep, StepRole};
    /// let transfer = SagaDef::tcc("transfer")
    ///     .branch(SagaStep::new("debit"))
    ///     .branch(SagaStep::new("credit"))
    ///     .build()
    ///     .unwrap();
    /// let groups = transfer.groups();
    /// assert_eq!(groups.len(), 2);
    /// assert_eq!(groups[0][1].name(), "credit");
    /// assert_eq!(groups[0][1].role(), StepRole::Try);
    /// assert_eq!(groups[1][1].name(), "credit.confirm");
    /// assert_eq!(groups[1][1].role(), StepRole::Confirm);
    /// // no branch, or a branch named as a confirm, is refused
    /// assert!(SagaDef::tcc("transfer").build().is_err());
    /// assert!(SagaDef::tcc("t").branch(SagaStep::new("a.confirm")).build().is_err());
    /// ```
    pub fn tcc(name: impl Into<String>) -> TccDefBuilder {
        TccDefBuilder {
            name: name.into(),
            branches: Vec::new(),
            stuck_after: None,
            deadline: None,
        }
    }

    /// The name of branch `branch`'s confirm step: `<branch>.confirm`.
    pub fn confirm_step(branch: &str) -> String {
        format!("{branch}{}", SagaDef::CONFIRM_SUFFIX)
    }

    /// The TCC branch a step of this definition belongs to: its own name for a try, the
    /// name without [`CONFIRM_SUFFIX`](Self::CONFIRM_SUFFIX) for a confirm; the step's
    /// name for a saga's step.
    pub fn branch_of<'s>(&self, step: &'s SagaStep) -> &'s str {
        match step.role() {
            StepRole::Confirm => step
                .name()
                .strip_suffix(SagaDef::CONFIRM_SUFFIX)
                .unwrap_or(step.name()),
            _ => step.name(),
        }
    }
}

impl TccDefBuilder {
    /// Add a branch: its name (at most
    /// [`MAX_STEP_NAME_BYTES`](limits::MAX_STEP_NAME_BYTES) less the confirm suffix),
    /// how its try retries ([`retry`](SagaStep::retry)), how its confirm and cancel
    /// retry ([`compensation_retry`](SagaStep::compensation_retry)) and the timeout of
    /// each attempt. Whether it is [`compensated`](SagaStep::compensated) does not
    /// matter: every branch has a cancel.
    pub fn branch(mut self, branch: SagaStep) -> Self {
        self.branches.push(branch);
        self
    }

    /// As [`SagaDefBuilder::stuck_after`](crate::SagaDefBuilder::stuck_after).
    pub fn stuck_after(mut self, after: Duration) -> Self {
        self.stuck_after = Some(after);
        self
    }

    /// As [`SagaDefBuilder::deadline`](crate::SagaDefBuilder::deadline).
    pub fn deadline(mut self, deadline: Duration) -> Self {
        self.deadline = Some(deadline);
        self
    }

    /// The definition, checked as a saga's is, and: at least one branch, no branch
    /// name ending in the confirm suffix or too long to carry it.
    pub fn build(self) -> Result<SagaDef> {
        const OP: &str = "tcc_definition";
        if self.branches.is_empty() {
            return Err(Error::invalid_input(
                OP,
                format!("TCC transaction {:?} has no branches", self.name),
            ));
        }
        let max = limits::MAX_STEP_NAME_BYTES - SagaDef::CONFIRM_SUFFIX.len();
        for branch in &self.branches {
            check_name(OP, "branch name", branch.name(), max)?;
            if branch.name().ends_with(SagaDef::CONFIRM_SUFFIX) {
                return Err(Error::invalid_input(
                    OP,
                    format!(
                        "TCC transaction {:?}: branch {:?} ends in {:?}, which names \
                         confirm steps",
                        self.name,
                        branch.name(),
                        SagaDef::CONFIRM_SUFFIX
                    ),
                ));
            }
        }
        let tries: Vec<SagaStep> = self
            .branches
            .iter()
            .map(|b| b.clone().compensated().with_role(StepRole::Try))
            .collect();
        let confirms: Vec<SagaStep> = self
            .branches
            .iter()
            .map(|b| {
                let (_, finish) = b.policies();
                let confirm = SagaStep::new(SagaDef::confirm_step(b.name()))
                    .retry(finish)
                    .with_role(StepRole::Confirm);
                match b.attempt_timeout() {
                    Some(t) => confirm.timeout(t),
                    None => confirm,
                }
            })
            .collect();
        let mut def = SagaDef::builder(self.name)
            .parallel(tries)
            .parallel(confirms);
        if let Some(after) = self.stuck_after {
            def = def.stuck_after(after);
        }
        if let Some(deadline) = self.deadline {
            def = def.deadline(deadline);
        }
        def.build()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::RetryPolicy;
    use crate::ErrorKind;

    #[test]
    fn branches_become_tries_then_confirms_with_their_policies() {
        let fast = RetryPolicy::fixed(2, Duration::from_millis(5));
        let slow = RetryPolicy::fixed(9, Duration::from_secs(1));
        let def = SagaDef::tcc("transfer")
            .branch(
                SagaStep::new("debit")
                    .retry(fast)
                    .compensation_retry(slow)
                    .timeout(Duration::from_secs(3)),
            )
            .branch(SagaStep::new("credit"))
            .deadline(Duration::from_secs(60))
            .build()
            .unwrap();
        assert_eq!(def.event_type(), "saga:transfer");
        assert_eq!(def.deadline(), Some(Duration::from_secs(60)));
        let [tries, confirms] = def.groups() else {
            panic!("two groups: {:?}", def.groups())
        };
        assert!(tries
            .iter()
            .all(|s| s.role() == StepRole::Try && s.has_compensation()));
        assert!(confirms
            .iter()
            .all(|s| s.role() == StepRole::Confirm && !s.has_compensation()));
        assert_eq!(tries[0].policies(), (fast, slow));
        // a confirm retries as the branch's cancel does, with the branch's timeout
        assert_eq!(confirms[0].policies().0, slow);
        assert_eq!(confirms[0].attempt_timeout(), Some(Duration::from_secs(3)));
        assert_eq!(def.branch_of(&confirms[1]), "credit");
        assert_eq!(def.branch_of(&tries[1]), "credit");
        assert_eq!(
            def.find_step("debit.confirm").map(|(g, pos, _)| (g, pos)),
            Some((1, 2))
        );
    }

    #[test]
    fn bad_branches_are_refused_naming_what_is_wrong() {
        let long = "b".repeat(limits::MAX_STEP_NAME_BYTES - SagaDef::CONFIRM_SUFFIX.len() + 1);
        for (builder, says) in [
            (SagaDef::tcc("t"), "no branches"),
            (
                SagaDef::tcc("t").branch(SagaStep::new("x.confirm")),
                "ends in",
            ),
            (
                SagaDef::tcc("t").branch(SagaStep::new(long)),
                "branch name must be",
            ),
            (SagaDef::tcc("t").branch(SagaStep::new("a b")), "contains"),
            (
                SagaDef::tcc("t")
                    .branch(SagaStep::new("a"))
                    .branch(SagaStep::new("a")),
                "twice",
            ),
            (
                SagaDef::tcc("bad name").branch(SagaStep::new("a")),
                "saga name",
            ),
        ] {
            let e = builder.build().unwrap_err();
            assert_eq!(e.kind(), ErrorKind::InvalidInput);
            assert!(e.to_string().contains(says), "{e} lacks {says:?}");
        }
    }
}
