//! How a saga moves on when one of its steps' tasks finishes, as a decision without I/O
//! ([`SagaProgress::decide`]): the one state machine of sagas, which the step runner
//! applies in the finishing task's transaction, under the saga row's lock.

pub use crate::model::StepState;
use crate::model::{SagaDef, SagaStatus, SagaStep, StepPhase, StepRole};

/// Whether `step`, its action in `state`, is undone when its group compensates: a
/// saga's compensated step once its action succeeded; a TCC try whatever its try did
/// (refused, out of attempts or not run: the barrier makes that cancel empty) unless
/// cancelled already.
pub(crate) fn needs_undo(step: &SagaStep, state: StepState) -> bool {
    match step.role() {
        StepRole::Try => !matches!(
            state,
            StepState::Compensated | StepState::CompensationFailed
        ),
        _ => step.has_compensation() && state == StepState::Done,
    }
}

/// What a step's task reports when it finishes (the event [`SagaProgress::decide`]
/// decides on).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StepEvent {
    /// The action of step `step` (in group `group`) succeeded.
    ActionDone {
        /// The step's name.
        step: String,
        /// Its group's index.
        group: u32,
    },
    /// The action of step `step` failed for a business reason (insufficient stock): the
    /// completed steps are compensated. A technical failure is not an event: its task
    /// retries.
    ActionRefused {
        /// The step's name.
        step: String,
        /// Its group's index.
        group: u32,
        /// Why, as the step said.
        reason: String,
    },
    /// The compensation of step `step` (in group `group`) succeeded.
    Compensated {
        /// The step's name.
        step: String,
        /// Its group's index.
        group: u32,
    },
    /// The task of `phase` of step `step` (in group `group`) ran out of attempts: the
    /// saga parks for an operator, with the reason.
    Exhausted {
        /// The step's name.
        step: String,
        /// Its group's index.
        group: u32,
        /// Which half failed.
        phase: StepPhase,
        /// The last failure.
        reason: String,
    },
}

/// A change of the saga's row: its status, group and (when it starts compensating)
/// the reason.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SagaChange {
    /// The new status.
    pub status: SagaStatus,
    /// The group it is at now.
    pub group: u32,
    /// Why it compensates: set by the first refusal; `None` keeps the stored reason.
    pub reason: Option<String>,
}

/// What to write, in the finishing task's transaction: the step's row, the saga's row
/// if it changes, and the tasks to enqueue.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Decision {
    /// The finished step and its new state (always written: it is a fact).
    pub record: (String, StepState),
    /// The saga row's change, if any.
    pub saga: Option<SagaChange>,
    /// The tasks to enqueue: each step and the phase its task runs.
    pub enqueue: Vec<(String, StepPhase)>,
}

/// The saga state machine. A saga runs its groups in order; a group's steps run side by
/// side, and the next group starts when every one of them is done (the join). A step
/// refused for a business reason turns the saga to compensating; once every step of its
/// group has finished (a sibling still running may yet succeed), the done steps of that
/// group are compensated, then every compensated step of each earlier group, group by
/// group in reverse order; a group with nothing to compensate is passed; when none is
/// left the saga is compensated. Steps without a compensation count as compensated.
///
/// ```
/// use backstop_core::driver::{Decision, SagaProgress, SagaChange, StepEvent, StepState};
/// use backstop_core::{SagaDef, SagaStatus, SagaStep, StepPhase};
///
/// let def = SagaDef::builder("order")
///     .step(SagaStep::new("stock").compensated())
///     .step(SagaStep::new("pay"))
///     .build()
///     .unwrap();
/// // stock is done: pay starts
/// let event = StepEvent::ActionDone { step: "stock".into(), group: 0 };
/// let d = SagaProgress::new(&def).decide(SagaStatus::Running, 0, &[], &event);
/// assert_eq!(d.saga.unwrap().group, 1);
/// assert_eq!(d.enqueue, [("pay".to_string(), StepPhase::Action)]);
/// // pay is refused: stock is compensated
/// let event = StepEvent::ActionRefused { step: "pay".into(), group: 1, reason: "card".into() };
/// let d = SagaProgress::new(&def).decide(SagaStatus::Running, 1, &[], &event);
/// assert_eq!(d.saga.unwrap().status, SagaStatus::Compensating);
/// assert_eq!(d.enqueue, [("stock".to_string(), StepPhase::Compensate)]);
/// ```
#[derive(Debug, Clone, Copy)]
pub struct SagaProgress<'d> {
    def: &'d SagaDef,
}

impl<'d> SagaProgress<'d> {
    /// The state machine of `def`'s sagas.
    pub fn new(def: &'d SagaDef) -> Self {
        SagaProgress { def }
    }

    /// Decide what `event` does to a saga at `status` and `group`, given the step rows
    /// of the event's group recorded before it (`rows`: each step's name and state).
    ///
    /// An event of another group than the saga's, or of a saga completed, compensated
    /// or parked, changes only the step's row: a late report never moves a saga.
    pub fn decide(
        &self,
        status: SagaStatus,
        group: u32,
        rows: &[(String, StepState)],
        event: &StepEvent,
    ) -> Decision {
        let (step, event_group, state) = match event {
            StepEvent::ActionDone { step, group } => (step, *group, StepState::Done),
            StepEvent::ActionRefused { step, group, .. } => (step, *group, StepState::Refused),
            StepEvent::Compensated { step, group } => (step, *group, StepState::Compensated),
            StepEvent::Exhausted {
                step, group, phase, ..
            } => (
                step,
                *group,
                match phase {
                    StepPhase::Action => StepState::ActionFailed,
                    StepPhase::Compensate => StepState::CompensationFailed,
                },
            ),
        };
        let mut decision = Decision {
            record: (step.clone(), state),
            saga: None,
            enqueue: Vec::new(),
        };
        if event_group != group {
            return decision;
        }
        // the group's rows with this event's applied
        let mut now: Vec<(&str, StepState)> = rows
            .iter()
            .filter(|(s, _)| s != step)
            .map(|(s, st)| (s.as_str(), *st))
            .collect();
        now.push((step.as_str(), state));
        let steps = self.steps_of(group);
        let settled = steps
            .iter()
            .all(|step| now.iter().any(|(s, _)| *s == step.name()));
        // a TCC try out of attempts cancels, as a refusal does: its outcome is unknown
        let try_exhausted = matches!(
            event,
            StepEvent::Exhausted {
                phase: StepPhase::Action,
                ..
            }
        ) && self.role_of(step) == StepRole::Try;
        let refusal = match event {
            StepEvent::ActionRefused { reason, .. } => Some(reason.clone()),
            StepEvent::Exhausted { reason, .. } if try_exhausted => Some(format!(
                "the try of branch {step:?} ran out of attempts: {reason}"
            )),
            _ => None,
        };
        match (status, event) {
            (SagaStatus::Running, StepEvent::ActionDone { .. }) => {
                let all_done = steps.iter().all(|step| {
                    now.iter()
                        .any(|(s, st)| *s == step.name() && *st == StepState::Done)
                });
                if all_done {
                    self.advance(group, &mut decision);
                }
            }
            (SagaStatus::Running, _) if refusal.is_some() => {
                decision.saga = Some(SagaChange {
                    status: SagaStatus::Compensating,
                    group,
                    reason: refusal,
                });
                if settled {
                    self.compensate_group(group, &now, &mut decision);
                }
            }
            // a sibling finishing after the refusal: the group compensates once all of it
            // has finished
            (SagaStatus::Compensating, StepEvent::ActionDone { .. }) if settled => {
                self.compensate_group(group, &now, &mut decision);
            }
            (SagaStatus::Compensating, _) if settled && refusal.is_some() => {
                self.compensate_group(group, &now, &mut decision);
            }
            (SagaStatus::Compensating, StepEvent::Compensated { .. }) => {
                let pending = steps.iter().any(|step| {
                    now.iter()
                        .any(|(s, st)| *s == step.name() && needs_undo(step, *st))
                });
                if !pending {
                    self.descend(group, &mut decision);
                }
            }
            (
                SagaStatus::Running | SagaStatus::Compensating,
                StepEvent::Exhausted { phase, reason, .. },
            ) if !try_exhausted => {
                decision.saga = Some(SagaChange {
                    status: SagaStatus::Parked,
                    group,
                    reason: Some(format!(
                        "the {} of step {step:?} ran out of attempts: {reason}",
                        match phase {
                            StepPhase::Action => "action",
                            StepPhase::Compensate => "compensation",
                        }
                    )),
                });
            }
            _ => {}
        }
        decision
    }

    /// What a saga at `status` and `group` calls for, given its group's step rows
    /// (`rows`), when nothing reported it (a nudge: after an operator's command, or for a
    /// saga found stuck). The tasks it names may exist already: each step's task is
    /// enqueued once per phase ([`Dedup::Forever`](crate::Dedup::Forever)), so asking
    /// again adds nothing.
    ///
    /// - Running: the actions of the group's steps without a row; when every step is
    ///   done, the next group (or completion).
    /// - Compensating: the actions of the group's steps without a row (they are refused
    ///   unrun, settling the group); once settled, the compensations of its done steps;
    ///   with none, the next group down (or compensated).
    /// - Otherwise nothing.
    ///
    /// ```
    /// use backstop_core::driver::{SagaProgress, StepState};
    /// use backstop_core::{SagaDef, SagaStatus, SagaStep, StepPhase};
    ///
    /// let def = SagaDef::builder("order")
    ///     .step(SagaStep::new("stock").compensated())
    ///     .step(SagaStep::new("pay"))
    ///     .build()
    ///     .unwrap();
    /// // an operator asked for compensation of a saga at pay, which never ran
    /// let d = SagaProgress::new(&def).nudge(SagaStatus::Compensating, 1, &[]);
    /// assert_eq!(d.enqueue, [("pay".to_string(), StepPhase::Action)]);
    /// // pay refused (unrun): stock is compensated
    /// let rows = [("pay".to_string(), StepState::Refused)];
    /// let d = SagaProgress::new(&def).nudge(SagaStatus::Compensating, 1, &rows);
    /// assert_eq!(d.enqueue, [("stock".to_string(), StepPhase::Compensate)]);
    /// ```
    pub fn nudge(&self, status: SagaStatus, group: u32, rows: &[(String, StepState)]) -> Decision {
        let mut decision = Decision {
            record: (String::new(), StepState::Done),
            saga: None,
            enqueue: Vec::new(),
        };
        let now: Vec<(&str, StepState)> = rows.iter().map(|(s, st)| (s.as_str(), *st)).collect();
        let steps = self.steps_of(group);
        let missing: Vec<(String, StepPhase)> = steps
            .iter()
            .filter(|step| !now.iter().any(|(s, _)| *s == step.name()))
            .map(|step| (step.name().to_owned(), StepPhase::Action))
            .collect();
        match status {
            SagaStatus::Running if missing.is_empty() => {
                let all_done = now.iter().all(|(_, st)| *st == StepState::Done);
                if all_done {
                    self.advance(group, &mut decision);
                }
            }
            SagaStatus::Compensating if missing.is_empty() => {
                self.compensate_group(group, &now, &mut decision);
            }
            SagaStatus::Running | SagaStatus::Compensating => decision.enqueue = missing,
            _ => {}
        }
        decision
    }

    /// The steps of group `group`.
    fn steps_of(&self, group: u32) -> &'d [SagaStep] {
        usize::try_from(group)
            .ok()
            .and_then(|g| self.def.groups().get(g))
            .map_or(&[], Vec::as_slice)
    }

    /// The role of step `name` (a saga's step when the definition lacks it).
    fn role_of(&self, name: &str) -> StepRole {
        self.def
            .find_step(name)
            .map_or(StepRole::Step, |(_, _, s)| s.role())
    }

    /// Group `group` is done: start the next, or complete the saga.
    fn advance(&self, group: u32, decision: &mut Decision) {
        let next = group + 1;
        let steps = self.steps_of(next);
        if steps.is_empty() {
            decision.saga = Some(SagaChange {
                status: SagaStatus::Completed,
                group,
                reason: None,
            });
            return;
        }
        decision.saga = Some(SagaChange {
            status: SagaStatus::Running,
            group: next,
            reason: None,
        });
        decision.enqueue = steps
            .iter()
            .map(|step| (step.name().to_owned(), StepPhase::Action))
            .collect();
    }

    /// The refused group has finished: compensate its steps that need it, or go down.
    /// A TCC transaction's confirm group is never undone: an operator's compensation
    /// that reaches it is overruled (its confirms ran, as they must once every try
    /// succeeded), and the transaction completes.
    fn compensate_group(&self, group: u32, now: &[(&str, StepState)], decision: &mut Decision) {
        let steps = self.steps_of(group);
        let reason = decision.saga.as_ref().and_then(|c| c.reason.clone());
        if steps.iter().any(|s| s.role() == StepRole::Confirm) {
            let confirmed = steps.iter().all(|step| {
                now.iter()
                    .any(|(s, st)| *s == step.name() && *st == StepState::Done)
            });
            decision.saga = Some(match confirmed {
                true => SagaChange {
                    status: SagaStatus::Completed,
                    group,
                    reason: Some(
                        "confirmed: a TCC transaction that began confirming is not cancelled"
                            .to_owned(),
                    ),
                },
                false => SagaChange {
                    status: SagaStatus::Parked,
                    group,
                    reason: Some(
                        "a TCC transaction that began confirming is not cancelled, and a \
                         confirm of it did not run: resolve it by hand"
                            .to_owned(),
                    ),
                },
            });
            return;
        }
        let undo: Vec<(String, StepPhase)> = steps
            .iter()
            .filter(|step| {
                now.iter()
                    .any(|(s, st)| *s == step.name() && needs_undo(step, *st))
            })
            .map(|step| (step.name().to_owned(), StepPhase::Compensate))
            .collect();
        if undo.is_empty() {
            self.descend(group, decision);
            return;
        }
        decision.saga = Some(SagaChange {
            status: SagaStatus::Compensating,
            group,
            reason,
        });
        decision.enqueue = undo;
    }

    /// Group `group` is compensated: compensate the nearest earlier group with a
    /// compensation (all its steps are done), or end the saga compensated.
    fn descend(&self, group: u32, decision: &mut Decision) {
        let reason = decision.saga.as_ref().and_then(|c| c.reason.clone());
        for earlier in (0..group).rev() {
            let undo: Vec<(String, StepPhase)> = self
                .steps_of(earlier)
                .iter()
                .filter(|step| step.has_compensation())
                .map(|step| (step.name().to_owned(), StepPhase::Compensate))
                .collect();
            if !undo.is_empty() {
                decision.saga = Some(SagaChange {
                    status: SagaStatus::Compensating,
                    group: earlier,
                    reason,
                });
                decision.enqueue = undo;
                return;
            }
        }
        decision.saga = Some(SagaChange {
            status: SagaStatus::Compensated,
            group: 0,
            reason,
        });
        decision.enqueue.clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::SagaStep;
    use SagaStatus::{Compensated, Compensating, Completed, Running};
    use StepPhase::{Action, Compensate};
    use StepState::{Done, Refused};

    /// stock (c), then coupon (c) ∥ points, then pay.
    fn def() -> SagaDef {
        SagaDef::builder("order")
            .step(SagaStep::new("stock").compensated())
            .parallel([
                SagaStep::new("coupon").compensated(),
                SagaStep::new("points"),
            ])
            .step(SagaStep::new("pay"))
            .build()
            .unwrap()
    }

    fn done(step: &str, group: u32) -> StepEvent {
        StepEvent::ActionDone {
            step: step.into(),
            group,
        }
    }

    fn refused(step: &str, group: u32) -> StepEvent {
        StepEvent::ActionRefused {
            step: step.into(),
            group,
            reason: format!("{step} refused"),
        }
    }

    fn undone(step: &str, group: u32) -> StepEvent {
        StepEvent::Compensated {
            step: step.into(),
            group,
        }
    }

    fn rows(r: &[(&str, StepState)]) -> Vec<(String, StepState)> {
        r.iter().map(|(s, st)| (s.to_string(), *st)).collect()
    }

    fn tasks(t: &[(&str, StepPhase)]) -> Vec<(String, StepPhase)> {
        t.iter().map(|(s, p)| (s.to_string(), *p)).collect()
    }

    fn change(status: SagaStatus, group: u32, reason: Option<&str>) -> Option<SagaChange> {
        Some(SagaChange {
            status,
            group,
            reason: reason.map(str::to_owned),
        })
    }

    #[test]
    fn groups_run_in_order_and_a_parallel_group_joins() {
        let def = def();
        let p = SagaProgress::new(&def);
        let d = p.decide(Running, 0, &[], &done("stock", 0));
        assert_eq!(d.record, ("stock".into(), Done));
        assert_eq!(d.saga, change(Running, 1, None));
        assert_eq!(d.enqueue, tasks(&[("coupon", Action), ("points", Action)]));
        // the first of the group to finish waits for its sibling
        let d = p.decide(Running, 1, &[], &done("points", 1));
        assert_eq!((d.saga, d.enqueue.len()), (None, 0));
        let d = p.decide(Running, 1, &rows(&[("points", Done)]), &done("coupon", 1));
        assert_eq!(d.saga, change(Running, 2, None));
        assert_eq!(d.enqueue, tasks(&[("pay", Action)]));
        let d = p.decide(Running, 2, &[], &done("pay", 2));
        assert_eq!(d.saga, change(Completed, 2, None));
        assert!(d.enqueue.is_empty());
    }

    #[test]
    fn a_refusal_compensates_the_done_steps_group_by_group_in_reverse() {
        let def = def();
        let p = SagaProgress::new(&def);
        // pay refused: group 1 has coupon to undo (points has no compensation)
        let d = p.decide(Running, 2, &[], &refused("pay", 2));
        assert_eq!(d.record, ("pay".into(), Refused));
        assert_eq!(d.saga, change(Compensating, 1, Some("pay refused")));
        assert_eq!(d.enqueue, tasks(&[("coupon", Compensate)]));
        // coupon compensated: stock next
        let d = p.decide(Compensating, 1, &[], &undone("coupon", 1));
        assert_eq!(d.saga, change(Compensating, 0, None));
        assert_eq!(d.enqueue, tasks(&[("stock", Compensate)]));
        // stock compensated: nothing left
        let d = p.decide(Compensating, 0, &[], &undone("stock", 0));
        assert_eq!(d.saga, change(Compensated, 0, None));
        assert!(d.enqueue.is_empty());
    }

    #[test]
    fn a_refusal_in_a_parallel_group_waits_for_its_running_sibling() {
        let def = def();
        let p = SagaProgress::new(&def);
        // points refused while coupon still runs: compensating, nothing enqueued yet
        let d = p.decide(Running, 1, &[], &refused("points", 1));
        assert_eq!(d.saga, change(Compensating, 1, Some("points refused")));
        assert!(d.enqueue.is_empty(), "coupon may yet succeed");
        // coupon succeeds late: it is undone, the saga stays at group 1
        let d = p.decide(
            Compensating,
            1,
            &rows(&[("points", Refused)]),
            &done("coupon", 1),
        );
        assert_eq!(d.record, ("coupon".into(), Done));
        assert_eq!(d.saga, change(Compensating, 1, None));
        assert_eq!(d.enqueue, tasks(&[("coupon", Compensate)]));
        // had coupon been refused too, group 1 had nothing to undo: stock next
        let d = p.decide(
            Compensating,
            1,
            &rows(&[("points", Refused)]),
            &refused("coupon", 1),
        );
        assert_eq!(d.saga, change(Compensating, 0, None));
        assert_eq!(d.enqueue, tasks(&[("stock", Compensate)]));
        // a compensation finishing while another of its group is undone still waits
        let two = SagaDef::builder("two")
            .parallel([
                SagaStep::new("a").compensated(),
                SagaStep::new("b").compensated(),
            ])
            .step(SagaStep::new("c"))
            .build()
            .unwrap();
        let p = SagaProgress::new(&two);
        let d = p.decide(Compensating, 0, &rows(&[("b", Done)]), &undone("a", 0));
        assert_eq!(
            (d.saga, d.enqueue.len()),
            (None, 0),
            "b is not compensated yet"
        );
        let d = p.decide(
            Compensating,
            0,
            &rows(&[("a", StepState::Compensated)]),
            &undone("b", 0),
        );
        assert_eq!(d.saga, change(Compensated, 0, None));
    }

    #[test]
    fn a_refusal_with_nothing_to_undo_ends_compensated_at_once() {
        let def = def();
        let p = SagaProgress::new(&def);
        let d = p.decide(Running, 0, &[], &refused("stock", 0));
        assert_eq!(d.saga, change(Compensated, 0, Some("stock refused")));
        assert!(d.enqueue.is_empty());
    }

    #[test]
    fn a_task_out_of_attempts_parks_the_saga_with_the_reason() {
        let def = def();
        let p = SagaProgress::new(&def);
        let event = StepEvent::Exhausted {
            step: "coupon".into(),
            group: 1,
            phase: Compensate,
            reason: "timeout".into(),
        };
        let d = p.decide(Compensating, 1, &[], &event);
        assert_eq!(d.record, ("coupon".into(), StepState::CompensationFailed));
        assert_eq!(
            d.saga,
            change(
                SagaStatus::Parked,
                1,
                Some("the compensation of step \"coupon\" ran out of attempts: timeout")
            )
        );
        assert!(d.enqueue.is_empty());
        // of a finished saga, only recorded
        let d = p.decide(Completed, 2, &[], &event);
        assert_eq!(d.saga, None);
    }

    #[test]
    fn a_late_or_stray_report_only_records_the_step() {
        let def = def();
        let p = SagaProgress::new(&def);
        for (status, group, event) in [
            (Running, 2, done("stock", 0)),
            (Completed, 2, done("pay", 2)),
            (Compensated, 0, undone("stock", 0)),
            (SagaStatus::Parked, 1, done("coupon", 1)),
            (Compensating, 0, done("coupon", 1)),
        ] {
            let d = p.decide(status, group, &[], &event);
            assert_eq!(
                (d.saga, d.enqueue.len()),
                (None, 0),
                "{status} {group} {event:?}"
            );
        }
    }

    /// debit ∥ credit ∥ fee, as a TCC transaction.
    fn tcc() -> SagaDef {
        SagaDef::tcc("transfer")
            .branch(SagaStep::new("debit"))
            .branch(SagaStep::new("credit"))
            .branch(SagaStep::new("fee"))
            .build()
            .unwrap()
    }

    fn try_exhausted(step: &str) -> StepEvent {
        StepEvent::Exhausted {
            step: step.into(),
            group: 0,
            phase: Action,
            reason: "timeout".into(),
        }
    }

    #[test]
    fn tcc_confirms_every_branch_once_every_try_succeeded() {
        let def = tcc();
        let p = SagaProgress::new(&def);
        let d = p.decide(Running, 0, &rows(&[("debit", Done)]), &done("credit", 0));
        assert_eq!((d.saga, d.enqueue.len()), (None, 0), "fee still tries");
        let d = p.decide(
            Running,
            0,
            &rows(&[("debit", Done), ("credit", Done)]),
            &done("fee", 0),
        );
        assert_eq!(d.saga, change(Running, 1, None));
        assert_eq!(
            d.enqueue,
            tasks(&[
                ("debit.confirm", Action),
                ("credit.confirm", Action),
                ("fee.confirm", Action)
            ])
        );
        let d = p.decide(
            Running,
            1,
            &rows(&[("debit.confirm", Done), ("credit.confirm", Done)]),
            &done("fee.confirm", 1),
        );
        assert_eq!(d.saga, change(Completed, 1, None));
        // a confirm out of attempts parks: it cannot cancel
        let d = p.decide(
            Running,
            1,
            &[],
            &StepEvent::Exhausted {
                step: "fee.confirm".into(),
                group: 1,
                phase: Action,
                reason: "timeout".into(),
            },
        );
        assert_eq!(d.saga.map(|c| c.status), Some(SagaStatus::Parked));
    }

    #[test]
    fn tcc_any_failed_try_cancels_every_branch_whatever_it_did() {
        use StepState::{ActionFailed, Compensated as Undone};
        let def = tcc();
        let p = SagaProgress::new(&def);
        // credit refused while debit and fee still try: wait for them
        let d = p.decide(Running, 0, &[], &refused("credit", 0));
        assert_eq!(d.saga, change(Compensating, 0, Some("credit refused")));
        assert!(d.enqueue.is_empty());
        let d = p.decide(
            Compensating,
            0,
            &rows(&[("credit", Refused)]),
            &done("debit", 0),
        );
        assert_eq!((d.saga, d.enqueue.len()), (None, 0), "fee still tries");
        // fee runs out of attempts: every branch is cancelled, the refused and failed too
        let d = p.decide(
            Compensating,
            0,
            &rows(&[("credit", Refused), ("debit", Done)]),
            &try_exhausted("fee"),
        );
        assert_eq!(d.record, ("fee".into(), ActionFailed));
        assert_eq!(d.saga, change(Compensating, 0, None));
        assert_eq!(
            d.enqueue,
            tasks(&[
                ("debit", Compensate),
                ("credit", Compensate),
                ("fee", Compensate)
            ])
        );
        // cancelled one by one; the last ends the transaction compensated
        let d = p.decide(
            Compensating,
            0,
            &rows(&[
                ("debit", Undone),
                ("credit", Refused),
                ("fee", ActionFailed),
            ]),
            &undone("credit", 0),
        );
        assert_eq!(
            (d.saga, d.enqueue.len()),
            (None, 0),
            "fee is not cancelled yet"
        );
        let d = p.decide(
            Compensating,
            0,
            &rows(&[("debit", Undone), ("credit", Undone)]),
            &undone("fee", 0),
        );
        assert_eq!(d.saga, change(Compensated, 0, None));
        // a try out of attempts, its siblings done: cancel at once, with the reason
        let d = p.decide(
            Running,
            0,
            &rows(&[("debit", Done), ("credit", Done)]),
            &try_exhausted("fee"),
        );
        assert_eq!(
            d.saga,
            change(
                Compensating,
                0,
                Some("the try of branch \"fee\" ran out of attempts: timeout")
            )
        );
        assert_eq!(d.enqueue.len(), 3);
    }

    #[test]
    fn tcc_confirming_is_never_cancelled() {
        let def = tcc();
        let p = SagaProgress::new(&def);
        // an operator compensates while confirms run: the missing confirms still run
        let confirmed = rows(&[("debit.confirm", Done)]);
        let d = p.nudge(Compensating, 1, &confirmed);
        assert_eq!(
            d.enqueue,
            tasks(&[("credit.confirm", Action), ("fee.confirm", Action)])
        );
        // once they did, the transaction completes: no try is cancelled
        let d = p.decide(
            Compensating,
            1,
            &rows(&[("debit.confirm", Done), ("credit.confirm", Done)]),
            &done("fee.confirm", 1),
        );
        assert!(d.enqueue.is_empty());
        let change = d.saga.unwrap();
        assert_eq!(change.status, Completed);
        assert!(change.reason.unwrap().contains("not cancelled"));
        // a confirm recorded refused (not run) leaves it parked for an operator
        let d = p.nudge(
            Compensating,
            1,
            &rows(&[
                ("debit.confirm", Done),
                ("credit.confirm", Refused),
                ("fee.confirm", Done),
            ]),
        );
        assert_eq!(d.saga.map(|c| c.status), Some(SagaStatus::Parked));
        assert!(d.enqueue.is_empty());
    }
}
