//! The saga reconciler's half of the runner: the periodic tick that finds sagas stuck
//! in an intermediate state (past their deadline, unchanged past `stuck_after`) and
//! resolves each by policy, and the nudge that brings a stuck saga's step back.

use super::*;

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
            } else if let Some(why) = unreported_failure(store, def, &saga).await? {
                // waiting in vain: park it for an operator (whose retry resets the task)
                let audit = crate::model::Audit::new("reconciler", why);
                match store.command_saga(saga.id, SagaCommand::Park, &audit).await {
                    Err(e) if e.kind() == ErrorKind::Conflict => {}
                    other => {
                        other.map_err(|e| store_failed("parking a saga whose step failed", e))?;
                        tracing::warn!(saga = saga.id, key = %saga.key, reason = %audit.reason, "saga parked");
                    }
                }
            } else {
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

/// Why a stuck saga waits in vain, if it does: a task of its group that failed with no
/// report reaching the saga. The runner reports a step task's last attempt (the saga
/// parks at once), but an attempt can end without its runner: its worker died or
/// stopped past its lease on the last attempt and the sweep failed the task
/// ([`TaskStore::recycle_dead`]), or an operator failed it. Its step's row then shows
/// nothing of it: an action's task failed while the step has no row, or a
/// compensation's while the step is still done (`needs_undo`). The reconciler parks
/// such a saga with the task's last error rather than nudging it forever (the task
/// exists: a nudge adds nothing); an operator's retry resets the task.
async fn unreported_failure(
    store: &Arc<dyn TaskStore>,
    def: &SagaDef,
    saga: &Saga,
) -> std::result::Result<Option<String>, HandlerError> {
    let Some(group) = usize::try_from(saga.group)
        .ok()
        .and_then(|g| def.groups().get(g))
    else {
        return Ok(None);
    };
    let rows = store
        .saga_steps(saga.id)
        .await
        .map_err(|e| store_failed("reading the saga's steps", e))?;
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
        let filter = crate::model::TaskFilter::default()
            .event_type(def.event_type())
            .biz_key(def.step_key(&saga.key, step, phase))
            .status(crate::model::Status::Failed)
            .limit(1);
        let failed = store
            .list(&filter)
            .await
            .map_err(|e| store_failed("reading the saga's step tasks", e))?;
        if let Some(task) = failed.first() {
            return Ok(Some(format!(
                "the {} of step {:?} failed with no report: {}",
                match phase {
                    StepPhase::Action => "action",
                    StepPhase::Compensate => "compensation",
                },
                step.name(),
                task.last_error.as_deref().unwrap_or("no error recorded")
            )));
        }
    }
    Ok(None)
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
