//! The saga reconciler's half of the runner: the periodic tick that finds sagas stuck
//! in an intermediate state (past their deadline, unchanged past `stuck_after`) and
//! resolves each by policy, and the nudge that brings a stuck saga's step back.

use super::*;
use crate::model::{SagaStep, Status};

/// The periodic task of `def`'s reconciler: every `stuck_after` (or deadline, if
/// shorter), at most a minute, at least a second.
pub(crate) fn reconciler(def: &SagaDef) -> Result<Periodic> {
    let every = def
        .deadline()
        .map_or(def.stuck_after(), |d| d.min(def.stuck_after()))
        .clamp(Duration::from_secs(1), Duration::from_secs(60));
    let tick = ReconcileTask {
        saga: def.name().to_owned(),
        reconcile: true,
    };
    Ok(Periodic::new(
        def.reconciler_name(),
        Schedule::every(every)?,
        NewTask::new(def.event_type(), "-").json(&tick),
    ))
}

/// The pages of sagas a reconciler's tick reads at most, per status and finding.
const RECONCILE_PAGES: usize = 10;

impl SagaRunner {
    /// A reconciler's tick: park the sagas past their deadline, nudge the stuck ones.
    pub(super) async fn reconcile(
        &self,
        cx: &Context,
        tick: ReconcileTask,
    ) -> std::result::Result<(), HandlerError> {
        let (store, def) = (cx.store(), &self.def);
        if tick.saga != def.name() {
            return Err(HandlerError::fail(format!(
                "a reconciler's tick of saga {:?} reached the runner of {:?}",
                tick.saga,
                def.name()
            )));
        }
        let mut findings = Vec::new();
        for status in [SagaStatus::Running, SagaStatus::Compensating] {
            let base = SagaFilter::default()
                .name(def.name())
                .status(status)
                .limit(crate::limits::MAX_BATCH);
            if let Some(deadline) = def.deadline() {
                for saga in pages(store, base.clone().started_older_than(deadline)).await? {
                    findings.push((saga, true));
                }
            }
            for saga in pages(store, base.older_than(def.stuck_after())).await? {
                if !findings.iter().any(|(s, _)| s.id == saga.id) {
                    findings.push((saga, false));
                }
            }
        }
        for (saga, late) in findings {
            let finding = if late { "late" } else { "stuck" };
            metrics::counter!("backstop_saga_findings_total", "saga" => def.name().to_owned(), "finding" => finding)
                .increment(1);
            if late {
                let deadline = def.deadline().unwrap_or_default();
                let audit = crate::model::Audit::new(
                    "reconciler",
                    format!("past its deadline of {deadline:?}"),
                );
                match store.command_saga(saga.id, SagaCommand::Park, &audit).await {
                    // moved on meanwhile: nothing to do
                    Err(e) if e.kind() == ErrorKind::Conflict => {}
                    other => {
                        other.map_err(|e| store_failed("parking a late saga", e))?;
                        tracing::warn!(saga = saga.id, key = %saga.key, "saga past its deadline: parked");
                    }
                }
            } else {
                match look(store, def, &saga).await? {
                    Look::Park(why) => {
                        // waiting in vain: park it for an operator (whose retry resets
                        // the task)
                        let audit = crate::model::Audit::new("reconciler", why);
                        match store.command_saga(saga.id, SagaCommand::Park, &audit).await {
                            Err(e) if e.kind() == ErrorKind::Conflict => {}
                            other => {
                                other.map_err(|e| {
                                    store_failed("parking a saga whose step failed", e)
                                })?;
                                tracing::warn!(saga = saga.id, key = %saga.key, reason = %audit.reason, "saga parked");
                            }
                        }
                    }
                    Look::Nudge => {
                        let stuck = crate::model::Audit::new(
                            "reconciler",
                            format!("unchanged for over {:?}: pushed forward", def.stuck_after()),
                        );
                        store
                            .nudge_saga(def, saga.id, &saga.key, Some(&stuck))
                            .await
                            .map_err(|e| store_failed("nudging a stuck saga", e))?;
                        tracing::info!(saga = saga.id, key = %saga.key, "stuck saga nudged");
                    }
                    Look::Waiting => {}
                }
            }
        }
        Ok(())
    }

    /// Enqueue what the nudged saga's state calls for.
    pub(super) async fn nudge(
        &self,
        cx: &Context,
        nudge: NudgeTask,
    ) -> std::result::Result<(), HandlerError> {
        if nudge.saga != self.def.name() {
            return Err(HandlerError::fail(format!(
                "a nudge of saga {:?} reached the runner of {:?}",
                nudge.saga,
                self.def.name()
            )));
        }
        let store = cx.store();
        let Some(saga) = store
            .saga(&nudge.saga, &nudge.key)
            .await
            .map_err(|e| store_failed("reading the saga", e))?
        else {
            return Err(HandlerError::fail(format!(
                "saga {:?} key {:?} has no state row",
                nudge.saga, nudge.key
            )));
        };
        let applied = store
            .nudge_saga(&self.def, saga.id, &nudge.key, None)
            .await
            .map_err(|e| store_failed("nudging the saga", e))?;
        for task in applied.iter().flat_map(|a| &a.tasks).filter(|t| t.created) {
            cx.run_ahead(task).await;
        }
        Ok(())
    }
}

/// What a saga found unchanged past `stuck_after` calls for, by [`look`].
#[derive(Debug)]
enum Look {
    /// It waits in vain: park it, for this reason.
    Park(String),
    /// A nudge would change something: a step task is missing, or the saga moves on.
    Nudge,
    /// Its group's tasks are all there and unfinished: it waits its turn (a backlog, a
    /// slow step, a compensation retrying). Nothing to do.
    Waiting,
}

/// What a saga found unchanged calls for, read without locking anything: a nudge
/// locks the saga's row and takes a locking read of each task it would enqueue, and
/// under a backlog every saga waiting its turn looks stuck (the MariaDB outage lane
/// counted 2 897 nudges of sagas whose compensations were merely retrying, each
/// waiting on the rows its workers held). A stale read costs one tick: a saga read as
/// waiting is looked at again at the next, and a nudge decides under the lock. Each
/// task is read by its business key (an index lookup on every backend; a prefix is
/// not).
///
/// - **Park**: a task of its group failed with no report reaching the saga. The runner
///   reports a step task's last attempt (the saga parks at once), but an attempt can
///   end without its runner: its worker died or stopped past its lease on the last
///   attempt and the sweep failed the task ([`TaskStore::recycle_dead`]), or an
///   operator failed it. Its step's row then shows nothing of it: an action's task
///   failed while the step has no row, or a compensation's while the step is still
///   done (`needs_undo`). Parked with the task's last error rather than nudged forever
///   (the task exists: a nudge adds nothing); an operator's retry resets the task.
/// - **Nudge**: what [`SagaProgress::nudge`](crate::driver::SagaProgress::nudge)
///   decides on the rows read moves the saga or names a task that does not exist.
/// - **Waiting** otherwise: every task the nudge would enqueue is there, none failed.
///   (A nudge of a compensating saga also gives back its failed tasks; a failed task
///   of the saga's group parks it first, and no other group's task can have failed
///   then: the groups before it finished their actions and have no compensation task
///   yet, and the saga came down to it only once every group after it had settled.)
async fn look(
    store: &Arc<dyn TaskStore>,
    def: &SagaDef,
    saga: &Saga,
) -> std::result::Result<Look, HandlerError> {
    let Some(group) = usize::try_from(saga.group)
        .ok()
        .and_then(|g| def.groups().get(g))
    else {
        return Ok(Look::Nudge);
    };
    let rows = store
        .saga_steps(saga.id)
        .await
        .map_err(|e| store_failed("reading the saga's steps", e))?;
    let task_of = |step: &SagaStep, phase: StepPhase| {
        let filter = crate::model::TaskFilter::default()
            .event_type(def.event_type())
            .biz_key(def.step_key(&saga.key, step, phase))
            .limit(1);
        async move {
            let tasks = store
                .list(&filter)
                .await
                .map_err(|e| store_failed("reading the saga's step tasks", e))?;
            Ok::<_, HandlerError>(tasks.into_iter().next())
        }
    };
    // the tasks read: step, phase, whether there is one
    let mut seen: Vec<(&str, StepPhase, bool)> = Vec::new();
    for step in group {
        let row = rows.iter().find(|r| r.step == step.name()).map(|r| r.state);
        let phase = match row {
            None => StepPhase::Action,
            Some(st)
                if saga.status == SagaStatus::Compensating
                    && crate::driver::needs_undo(step, st) =>
            {
                StepPhase::Compensate
            }
            Some(_) => continue,
        };
        let task = task_of(step, phase).await?;
        seen.push((step.name(), phase, task.is_some()));
        if let Some(failed) = task.filter(|t| t.status == Status::Failed) {
            return Ok(Look::Park(format!(
                "the {} of step {:?} failed with no report: {}",
                match phase {
                    StepPhase::Action => "action",
                    StepPhase::Compensate => "compensation",
                },
                step.name(),
                failed.last_error.as_deref().unwrap_or("no error recorded")
            )));
        }
    }
    let named: Vec<(String, StepState)> = rows
        .iter()
        .filter(|r| group.iter().any(|s| s.name() == r.step))
        .map(|r| (r.step.clone(), r.state))
        .collect();
    let decision = crate::driver::SagaProgress::new(def).nudge(saga.status, saga.group, &named);
    if decision
        .saga
        .as_ref()
        .is_some_and(|c| (c.status, c.group) != (saga.status, saga.group))
    {
        return Ok(Look::Nudge);
    }
    for (name, phase) in &decision.enqueue {
        let Some((_, _, step)) = def.find_step(name) else {
            return Ok(Look::Nudge);
        };
        let there = match seen.iter().find(|(s, p, _)| *s == name && p == phase) {
            Some((_, _, there)) => *there,
            None => task_of(step, *phase).await?.is_some(),
        };
        if !there {
            return Ok(Look::Nudge);
        }
    }
    Ok(Look::Waiting)
}

/// Every saga of `filter`, page after page, at most [`RECONCILE_PAGES`] pages.
async fn pages(
    store: &Arc<dyn TaskStore>,
    filter: SagaFilter,
) -> std::result::Result<Vec<Saga>, HandlerError> {
    let mut all = Vec::new();
    let mut filter = filter;
    for _ in 0..RECONCILE_PAGES {
        let page = store
            .sagas(&filter)
            .await
            .map_err(|e| store_failed("listing sagas", e))?;
        let full = page.len() == filter.limit;
        if let Some(last) = page.last() {
            filter = filter.after_id(last.id);
        }
        all.extend(page);
        if !full {
            break;
        }
    }
    Ok(all)
}
