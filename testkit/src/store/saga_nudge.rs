//! A nudge ([`TaskStore::nudge_saga`]): what a saga's state calls for, enqueued under its
//! row's lock, including the way out of a group an unreported failure holds.

use backstop_core::{
    Audit, SagaCommand, SagaDef, SagaId, SagaStatus, SagaStep, Status, StepOutcome, StepReport,
    StepState, Task, TaskFilter, TaskStore, TaskStoreExt,
};

use crate::{Ctx, Harness};

/// Claim the task of `biz` in saga `def`'s event type.
async fn claim<H: Harness>(ctx: &Ctx<H>, def: &SagaDef, biz: &str) -> Task {
    let task = ctx
        .store
        .list(
            &TaskFilter::default()
                .event_type(def.event_type())
                .limit(1000),
        )
        .await
        .unwrap()
        .into_iter()
        .find(|t| t.biz_key == biz)
        .unwrap_or_else(|| panic!("no task {biz}"));
    ctx.store
        .claim_by_id(task.id, &ctx.owner)
        .await
        .unwrap()
        .unwrap_or_else(|| panic!("{biz} is not claimable: {:?}", task.status))
}

/// Saga `name` of two steps, `a` (compensated) then `b`, started under `key` with step
/// `a` run and reported done: the definition, the saga's id, `a`'s task and `b`'s,
/// claimed.
async fn a_done_b_claimed<H: Harness>(
    ctx: &Ctx<H>,
    name: &str,
    key: &str,
) -> (SagaDef, SagaId, Task, Task) {
    let def = SagaDef::builder(name)
        .step(SagaStep::new("a").compensated())
        .step(SagaStep::new("b"))
        .build()
        .unwrap();
    let started = ctx
        .store
        .start_saga(&def.start(key, &1).unwrap())
        .await
        .unwrap();
    let a = claim(ctx, &def, &format!("{key}/a:a")).await;
    let done = StepOutcome::Done { output: "1".into() };
    let report = StepReport::new(a.lease(), started.id, key, "a", done);
    ctx.store.saga_step(&def, &report).await.unwrap();
    let b = claim(ctx, &def, &format!("{key}/b:a")).await;
    (def, started.id, a, b)
}

/// A step whose task fails without reporting (a store error on its last attempt) holds
/// its group: the saga waits at it. An operator parks it and asks for compensation; the
/// nudge that follows gives the failed task back (pending, attempts 0), which, run, is
/// refused unrun; the group settles and the done steps below are compensated, so the
/// saga ends compensated rather than compensating for ever.
pub async fn saga_nudge_gives_back_an_action_that_failed_unreported<H: Harness>(ctx: &Ctx<H>) {
    let (def, id, a, b) = a_done_b_claimed(ctx, "halt", "h-1").await;
    let report =
        |task: &Task, step: &str, outcome| StepReport::new(task.lease(), id, "h-1", step, outcome);
    assert!(ctx.store.mark_fail(b.lease(), "store gone").await.unwrap());

    let op = Audit::new("op", "stuck on b");
    ctx.store
        .command_saga(id, SagaCommand::Park, &op)
        .await
        .unwrap();
    let saga = ctx
        .store
        .command_saga(id, SagaCommand::Compensate, &op)
        .await
        .unwrap();
    assert_eq!((saga.status, saga.group), (SagaStatus::Compensating, 1));
    let failed = ctx.store.get(b.id).await.unwrap().unwrap();
    assert_eq!(failed.status, Status::Failed, "a command resets nothing");

    ctx.store
        .nudge_saga(&def, id, "h-1", None)
        .await
        .unwrap()
        .unwrap();
    let back = ctx.store.get(b.id).await.unwrap().unwrap();
    assert_eq!(
        (back.status, back.attempts, back.owner.as_deref()),
        (Status::Pending, 0, None),
        "the failed action's task is given back"
    );
    let a_task = ctx.store.get(a.id).await.unwrap().unwrap();
    assert_eq!(
        a_task.status,
        Status::Succeeded,
        "a finished task is left alone"
    );

    // run, it is refused unrun (what the engine's runner reports), and a is compensated
    let b = claim(ctx, &def, "h-1/b:a").await;
    let refused = StepOutcome::Refused {
        reason: "not run: the saga was compensating".into(),
    };
    let applied = ctx
        .store
        .saga_step(&def, &report(&b, "b", refused))
        .await
        .unwrap();
    assert_eq!(applied.status, SagaStatus::Compensating);
    let undo = claim(ctx, &def, "h-1/a:c").await;
    let applied = ctx
        .store
        .saga_step(&def, &report(&undo, "a", StepOutcome::Compensated))
        .await
        .unwrap();
    assert_eq!(applied.status, SagaStatus::Compensated);
    let rows = ctx.store.saga_steps(id).await.unwrap();
    let states: Vec<(&str, StepState)> = rows.iter().map(|r| (r.step.as_str(), r.state)).collect();
    assert_eq!(
        states,
        vec![("a", StepState::Compensated), ("b", StepState::Refused)]
    );
}

/// A nudge of a saga that waits for its compensations (enqueued, not finished) changes
/// nothing: the saga's row keeps its version, time and reason, no compensation is
/// enqueued twice, and an audited nudge writes no entry to the saga's log (its
/// contract: only a nudge that changes something is logged).
pub async fn saga_nudge_of_a_saga_waiting_for_its_compensations_changes_nothing<H: Harness>(
    ctx: &Ctx<H>,
) {
    let (def, id, _, b) = a_done_b_claimed(ctx, "wait", "w-1").await;
    let report =
        |task: &Task, step: &str, outcome| StepReport::new(task.lease(), id, "w-1", step, outcome);
    let refused = StepOutcome::Refused {
        reason: "no funds".into(),
    };
    let applied = ctx
        .store
        .saga_step(&def, &report(&b, "b", refused))
        .await
        .unwrap();
    assert_eq!(
        (applied.status, applied.group),
        (SagaStatus::Compensating, 0)
    );
    let before = ctx.store.saga_by_id(id).await.unwrap().unwrap();
    assert!(before.reason.is_some(), "a refusal gives its reason");

    let stuck = Audit::new("reconciler", "unchanged: pushed forward");
    let nudged = ctx
        .store
        .nudge_saga(&def, id, "w-1", Some(&stuck))
        .await
        .unwrap()
        .unwrap();
    assert_eq!((nudged.status, nudged.group), (SagaStatus::Compensating, 0));
    assert!(
        nudged.tasks.iter().all(|t| !t.created),
        "the compensation is there already: {nudged:?}"
    );
    let after = ctx.store.saga_by_id(id).await.unwrap().unwrap();
    assert_eq!(
        (after.version, after.updated_at, after.reason.as_deref()),
        (before.version, before.updated_at, before.reason.as_deref()),
        "the saga's row is left as it was"
    );
    let log = ctx.store.saga_log(id).await.unwrap();
    assert!(log.is_empty(), "nothing changed, nothing logged: {log:?}");
    let undo: Vec<Task> = ctx
        .store
        .list(
            &TaskFilter::default()
                .event_type(def.event_type())
                .biz_key("w-1/a:c"),
        )
        .await
        .unwrap();
    assert_eq!(undo.len(), 1, "{undo:?}");
    assert_eq!(undo[0].status, Status::Pending);
}
