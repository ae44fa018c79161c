//! Graceful shutdown.

use super::*;

/// shutdown under load: claiming stops, in-flight work finishes, queued work is released
/// (no attempt spent); nothing is left running.
pub async fn engine_shutdown_under_load_leaves_nothing_running<H: Harness>(ctx: &Ctx<H>) {
    const TASKS: usize = 300;
    for i in 0..TASKS {
        ctx.store
            .enqueue(NewTask::new("WORK", format!("k{i}")))
            .await
            .unwrap();
    }
    let calls = Calls::default();
    let handler = sleepy(calls.clone(), Duration::from_millis(10));
    let engine = Engine::builder(ctx.store.clone())
        .config(fast_config())
        .handler("WORK", handler, opts().concurrency(2).queue_capacity(30))
        .start()
        .unwrap();
    eventually("some tasks to finish", || async {
        engine.counters().succeeded >= 20
    })
    .await;
    engine.shutdown().await;
    let (enq, run) = engine.enqueue(NewTask::new("WORK", "after")).await.unwrap();
    assert_eq!(run, RunAhead::ShuttingDown);
    let s = ctx.store.stats().await.unwrap();
    assert_eq!(s.count(Status::Running), 0, "nothing left running");
    assert_eq!(s.count(Status::Failed), 0);
    let c = engine.counters();
    assert_eq!(s.count(Status::Succeeded), c.succeeded);
    assert!(c.released > 0, "queued tasks were given back: {c:?}");
    let all = ctx
        .store
        .list(&backstop_core::TaskFilter::default().limit(1000))
        .await
        .unwrap();
    for t in all {
        match t.status {
            Status::Succeeded => assert_eq!(t.attempts, 1),
            Status::Pending => assert_eq!(t.attempts, 0, "task {} spent an attempt", t.id),
            other => panic!("task {} is {other}", t.id),
        }
        assert!(calls.count(&t.biz_key) <= 1);
    }
    assert_eq!(ctx.task(enq.id).await.status, Status::Pending);
}

/// past the grace period, shutdown interrupts a handler and releases its task.
pub async fn engine_shutdown_interrupts_after_grace_and_releases<H: Harness>(ctx: &Ctx<H>) {
    let started = Calls::default();
    let handler = sleepy(started.clone(), HOUR);
    let engine = Engine::builder(ctx.store.clone())
        .config(no_poll_config().shutdown_grace(Duration::from_millis(200)))
        .handler("STUCK", handler, opts().timeout(2 * HOUR))
        .start()
        .unwrap();
    let (enq, _) = engine.enqueue(engine.task("STUCK", "k")).await.unwrap();
    eventually("the handler to start", || async { started.count("k") == 1 }).await;
    let t0 = Instant::now();
    engine.shutdown().await;
    assert!(t0.elapsed() < Duration::from_secs(10));
    let t = ctx.task(enq.id).await;
    assert_eq!((t.status, t.attempts, t.owner), (Status::Pending, 0, None));
    assert_eq!(engine.counters().released, 1);
}

/// Wait until `engine` has begun shutting down (it answers a run-ahead with
/// `ShuttingDown`; a duplicate's run-ahead touches no store while it runs). The probe is
/// the duplicate enqueue of a task of a type no engine handles.
async fn until_shutting_down<S: TaskStore + Clone>(engine: &Engine<S>) {
    let store = engine.store();
    store.enqueue(NewTask::new("PROBE", "probe")).await.unwrap();
    let probe = store.enqueue(NewTask::new("PROBE", "probe")).await.unwrap();
    assert!(!probe.created);
    eventually("shutdown to begin", || async {
        engine.run_now(&probe).await == RunAhead::ShuttingDown
    })
    .await;
}

/// Task `id` was given back untouched: pending, no attempt spent, no owner, never started.
async fn assert_given_back<H: Harness>(ctx: &Ctx<H>, id: TaskId, calls: &Calls) {
    let t = ctx.task(id).await;
    assert_eq!(
        (t.status, t.attempts, t.owner.as_deref()),
        (Status::Pending, 0, None),
        "task {id}"
    );
    assert_eq!(calls.count(&t.biz_key), 0, "task {id} was started");
}

/// Shut `engine` down while a claim is held at `gate`: once shutdown has begun, open the
/// gate, and wait for shutdown to end.
async fn shut_down_across_the_gate<S: TaskStore + Clone>(engine: &Engine<Gate<S>>, gate: &Gate<S>) {
    let stopping = tokio::spawn({
        let engine = engine.clone();
        async move { engine.shutdown().await }
    });
    until_shutting_down(engine).await;
    gate.open();
    tokio::time::timeout(PATIENCE, stopping)
        .await
        .expect("shutdown to end once the claim is back")
        .unwrap();
}

/// a poll already on its way to the database when shutdown begins is waited for, and
/// what it claims is given back (pending, no attempt spent, never started) through the
/// flushers — not left running until `dead_after`.
pub async fn engine_shutdown_waits_for_a_poll_in_flight_and_releases_its_claim<H: Harness>(
    ctx: &Ctx<H>,
) {
    const TASKS: usize = 5;
    let mut ids = Vec::new();
    for i in 0..TASKS {
        ids.push(
            ctx.store
                .enqueue(NewTask::new("WORK", format!("k{i}")))
                .await
                .unwrap()
                .id,
        );
    }
    let calls = Calls::default();
    let gate = Gate::shut(ctx.store.clone(), Gated::ClaimBatch);
    let engine = Engine::builder(gate.clone())
        .config(fast_config().first_poll_delay(Duration::ZERO))
        .handler("WORK", succeeding(&calls), opts())
        .start()
        .unwrap();
    gate.arrived(1).await;
    shut_down_across_the_gate(&engine, &gate).await;
    for id in ids {
        assert_given_back(ctx, id, &calls).await;
    }
    let c = engine.counters();
    assert_eq!(
        (c.polled, c.released),
        (TASKS as u64, TASKS as u64),
        "{c:?}"
    );
}

/// the same for a run-ahead claim on its way when shutdown begins: shutdown waits for it,
/// and the task it claimed is given back.
pub async fn engine_shutdown_waits_for_a_run_ahead_claim_in_flight<H: Harness>(ctx: &Ctx<H>) {
    let calls = Calls::default();
    let gate = Gate::shut(ctx.store.clone(), Gated::ClaimById);
    let engine = Engine::builder(gate.clone())
        .config(no_poll_config())
        .handler("WORK", succeeding(&calls), opts())
        .start()
        .unwrap();
    let enq = ctx.store.enqueue(engine.task("WORK", "k")).await.unwrap();
    let running_ahead = tokio::spawn({
        let (engine, enq) = (engine.clone(), enq.clone());
        async move { engine.run_now(&enq).await }
    });
    gate.arrived(1).await;
    shut_down_across_the_gate(&engine, &gate).await;
    assert_eq!(running_ahead.await.unwrap(), RunAhead::Started);
    assert_given_back(ctx, enq.id, &calls).await;
    let c = engine.counters();
    assert_eq!((c.run_ahead, c.released), (1, 1), "{c:?}");
}
