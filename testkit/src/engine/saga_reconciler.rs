//! The saga reconciler run by the engine: a saga unchanged past `stuck_after` is
//! pushed forward (a lost step task comes back), parked when past its deadline or when
//! a step task failed with no report, and left alone, with nothing locked, while its
//! group's tasks wait their turn.

use backstop_core::{SagaStatus, TaskFilter};

use super::saga::{engine_of, order_builder, order_steps, step_tasks, wait_saga, Journal};
use super::*;

/// Move saga `id`'s row an hour back: a reconciler's first tick finds it stuck.
async fn unchanged_for_an_hour<H: Harness>(ctx: &Ctx<H>, id: backstop_core::SagaId) {
    let saga_table = format!("{}_saga", ctx.config.table);
    ctx.harness
        .backdate(&ctx.db, &saga_table, id, TimeColumn::UpdatedAt, HOUR)
        .await;
}

/// The id of the task that runs saga `key`'s step `stock` (its action: `<key>/stock:a`).
async fn stock_task<H: Harness>(ctx: &Ctx<H>, key: &str) -> backstop_core::TaskId {
    let filter = TaskFilter::default().biz_key(format!("{key}/stock:a"));
    let found = ctx.store.list(&filter).await.unwrap();
    assert_eq!(found.len(), 1, "{key}'s stock task: {found:?}");
    found[0].id
}

/// The reconciler brings back a step task that was lost (deleted by an operator before
/// any engine ran it): the saga, unchanged for longer than `stuck_after`, is nudged, the
/// task is enqueued again, and the saga completes. The nudge that brought it back is in
/// the saga's log (`nudge` by `reconciler`), once.
pub async fn engine_saga_reconciler_brings_back_a_lost_step<H: Harness>(ctx: &Ctx<H>) {
    let def = order_builder()
        .stuck_after(Duration::from_secs(1))
        .build()
        .unwrap();
    let started = ctx
        .store
        .start_saga(&def.start("o-9", &1).unwrap())
        .await
        .unwrap();
    let lost = step_tasks(&ctx.store).await;
    assert_eq!(lost.len(), 1, "{lost:?}");
    let stock = stock_task(ctx, "o-9").await;
    let audit = backstop_core::Audit::new("ops", "removed by mistake");
    ctx.store.delete(stock, &audit).await.unwrap();
    // unchanged for an hour: the first tick finds it
    unchanged_for_an_hour(ctx, started.id).await;
    let journal = Journal::default();
    let engine = engine_of(
        ctx.store.clone(),
        def,
        order_steps(&journal, |_| async { Ok(()) }),
    );
    let done = wait_saga(&ctx.store, "o-9", SagaStatus::Completed).await;
    engine.shutdown().await;
    assert_eq!(done.id, started.id);
    assert_eq!(journal.count("stock", "action"), 1);
    let tasks = step_tasks(&ctx.store).await;
    assert_eq!(tasks["o-9/stock:a"].0, Status::Succeeded);
    assert!(
        ctx.store.get(stock).await.unwrap().is_none(),
        "a new task, not the old"
    );
    // the push forward is in the saga's log, once: later ticks found nothing to add
    let log = ctx.store.saga_log(started.id).await.unwrap();
    let entries: Vec<(&str, &str)> = log
        .iter()
        .map(|e| (e.action.as_str(), e.operator.as_str()))
        .collect();
    assert_eq!(entries, [("nudge", "reconciler")], "{log:?}");
    assert!(log[0].reason.contains("pushed forward"), "{log:?}");
}

/// The reconciler parks a saga still running past its deadline, for an operator: the
/// reason and the saga's log say so (operator `reconciler`). The step that was running
/// reports when it ends; the parked saga does not move on.
pub async fn engine_saga_reconciler_parks_a_late_saga<H: Harness>(ctx: &Ctx<H>) {
    let def = order_builder()
        .deadline(Duration::from_secs(1))
        .build()
        .unwrap();
    let journal = Journal::default();
    let slow = journal.clone();
    let steps = order_steps(&journal, |_| async { Ok(()) }).action("stock", move |_cx| {
        let journal = slow.clone();
        async move {
            let start = Instant::now();
            tokio::time::sleep(Duration::from_millis(3500)).await;
            journal.note("stock", "action", start);
            Ok(1)
        }
    });
    let engine = engine_of(ctx.store.clone(), def.clone(), steps);
    ctx.store
        .start_saga(&def.start("o-10", &1).unwrap())
        .await
        .unwrap();
    let parked = wait_saga(&ctx.store, "o-10", SagaStatus::Parked).await;
    assert_eq!(
        parked.reason.as_deref(),
        Some("parked by reconciler: past its deadline of 1s")
    );
    let log = ctx.store.saga_log(parked.id).await.unwrap();
    assert_eq!(
        (log[0].action.as_str(), log[0].operator.as_str()),
        ("park", "reconciler")
    );
    // stock ends and reports: recorded, and nothing more
    let deadline = Instant::now() + PATIENCE;
    while ctx.store.saga_steps(parked.id).await.unwrap().is_empty() {
        assert!(Instant::now() < deadline, "stock never reported");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    engine.shutdown().await;
    let saga = ctx.store.saga_by_id(parked.id).await.unwrap().unwrap();
    assert_eq!(saga.status, SagaStatus::Parked);
    let tasks = step_tasks(&ctx.store).await;
    assert_eq!(tasks.len(), 1, "the next group waits: {tasks:?}");
}

/// A step task that fails with no report reaching its saga (its last attempt's worker
/// died and the sweep failed it) does not leave the saga waiting in vain: the
/// reconciler, finding the saga unchanged past `stuck_after`, parks it with the task's
/// last error (operator `reconciler` in its log) instead of nudging it; the operator's
/// retry resets the task, which runs once, and the saga completes.
pub async fn engine_saga_reconciler_parks_an_unreported_failure<H: Harness>(ctx: &Ctx<H>) {
    let def = order_builder()
        .stuck_after(Duration::from_secs(1))
        .build()
        .unwrap();
    let started = ctx
        .store
        .start_saga(&def.start("o-12", &1).unwrap())
        .await
        .unwrap();
    let stock = stock_task(ctx, "o-12").await;
    // three attempts (the step's policy), each claimed by a worker that dies: the sweep
    // gives the first two back and fails the task at the third
    let dead = backstop_core::Owner::new("dead-worker").unwrap();
    for attempt in 1..=3u32 {
        let claimed = ctx.store.claim_by_id(stock, &dead).await.unwrap();
        assert_eq!(claimed.map(|t| t.attempts), Some(attempt));
        ctx.harness
            .backdate(
                &ctx.db,
                &ctx.config.table,
                stock,
                TimeColumn::UpdatedAt,
                HOUR,
            )
            .await;
        let r = ctx
            .store
            .recycle_dead(Duration::from_secs(60), 10)
            .await
            .unwrap();
        assert_eq!(
            (r.to_pending, r.to_failed),
            (u64::from(attempt < 3), u64::from(attempt == 3))
        );
    }
    let failed = ctx.task(stock).await;
    assert_eq!(failed.status, Status::Failed);
    unchanged_for_an_hour(ctx, started.id).await;
    let journal = Journal::default();
    let engine = engine_of(
        ctx.store.clone(),
        def,
        order_steps(&journal, |_| async { Ok(()) }),
    );
    let parked = wait_saga(&ctx.store, "o-12", SagaStatus::Parked).await;
    let reason = parked.reason.clone().unwrap_or_default();
    let want = format!(
        "parked by reconciler: the action of step \"stock\" failed with no report: {}",
        failed.last_error.clone().unwrap_or_default()
    );
    assert_eq!(reason, want);
    assert_eq!(journal.count("stock", "action"), 0, "nothing ran it");
    let log = ctx.store.saga_log(parked.id).await.unwrap();
    let entries: Vec<(&str, &str)> = log
        .iter()
        .map(|e| (e.action.as_str(), e.operator.as_str()))
        .collect();
    assert_eq!(entries, [("park", "reconciler")], "{log:?}");
    // the operator's retry resets the task: it runs once and the saga completes
    let audit = backstop_core::Audit::new("ops", "worker fixed");
    ctx.store
        .command_saga(parked.id, backstop_core::SagaCommand::Retry, &audit)
        .await
        .unwrap();
    let done = wait_saga(&ctx.store, "o-12", SagaStatus::Completed).await;
    engine.shutdown().await;
    assert_eq!(done.id, started.id);
    assert_eq!(journal.count("stock", "action"), 1);
    let tasks = step_tasks(&ctx.store).await;
    assert_eq!(tasks["o-12/stock:a"].0, Status::Succeeded);
    assert_eq!(tasks["o-12/pay:a"].0, Status::Succeeded);
}

/// A saga unchanged past `stuck_after` whose group's task is there and unfinished (a
/// slow worker runs it) waits its turn: the reconciler looks without locking anything
/// and leaves it be, its row, its version and its log untouched, while it nudges the
/// saga beside it whose task was lost. The first saga's task row is locked by another
/// transaction all along (on backends with row locks): a reconciler that nudged it
/// would wait on that row, its tick held, and never reach the second saga.
pub async fn engine_saga_reconciler_leaves_a_waiting_saga_unlocked<H: Harness>(ctx: &Ctx<H>) {
    const CASE: &str = "engine_saga_reconciler_leaves_a_waiting_saga_unlocked";
    let def = order_builder()
        .stuck_after(Duration::from_secs(1))
        .build()
        .unwrap();
    let mut started = Vec::new();
    for key in ["o-30", "o-31"] {
        let saga = ctx.store.start_saga(&def.start(key, &1).unwrap()).await;
        started.push(saga.unwrap().id);
    }
    // o-30's step runs on a slow worker elsewhere; o-31's task was deleted
    let slow_task = stock_task(ctx, "o-30").await;
    let slow = Owner::new("slow-worker").unwrap();
    let running = ctx.store.claim_by_id(slow_task, &slow).await.unwrap();
    assert_eq!(running.map(|t| t.attempts), Some(1));
    let lost = stock_task(ctx, "o-31").await;
    let audit = backstop_core::Audit::new("ops", "removed by mistake");
    ctx.store.delete(lost, &audit).await.unwrap();
    for id in &started {
        unchanged_for_an_hour(ctx, *id).await;
    }
    let before = ctx.store.saga_by_id(started[0]).await.unwrap().unwrap();
    let hold = ctx.hold_row(slow_task, CASE).await;

    let journal = Journal::default();
    let engine = engine_of(
        ctx.store.clone(),
        def,
        order_steps(&journal, |_| async { Ok(()) }),
    );
    wait_saga(&ctx.store, "o-31", SagaStatus::Completed).await;
    // a few more ticks over the waiting saga
    tokio::time::sleep(Duration::from_millis(1500)).await;
    if let Some(hold) = hold {
        hold.release().await;
    }
    engine.shutdown().await;

    let waiting = ctx.store.saga_by_id(started[0]).await.unwrap().unwrap();
    assert_eq!(
        (
            waiting.status,
            waiting.group,
            waiting.version,
            waiting.updated_at
        ),
        (SagaStatus::Running, 0, before.version, before.updated_at),
        "the waiting saga is left as it was"
    );
    let log = ctx.store.saga_log(started[0]).await.unwrap();
    assert!(log.is_empty(), "nothing to push forward: {log:?}");
    let task = ctx.task(slow_task).await;
    assert_eq!(
        (task.status, task.attempts, task.owner.as_deref()),
        (Status::Running, 1, Some("slow-worker")),
        "its task is the slow worker's still"
    );
    let log = ctx.store.saga_log(started[1]).await.unwrap();
    let entries: Vec<(&str, &str)> = log
        .iter()
        .map(|e| (e.action.as_str(), e.operator.as_str()))
        .collect();
    assert_eq!(entries, [("nudge", "reconciler")], "{log:?}");
    assert_eq!(journal.count("stock", "action"), 1, "o-31's, once");
    let tasks = step_tasks(&ctx.store).await;
    assert_eq!(tasks["o-31/pay:a"].0, Status::Succeeded, "{tasks:?}");
}
