//! Run ahead: a task runs right after commit, in-process.

use super::*;

/// run ahead: committed with a business row, claimed by id and run at once — the poller
/// never gets to it.
pub async fn engine_runs_a_task_ahead_right_after_commit<H: Harness>(ctx: &Ctx<H>) {
    let calls = Calls::default();
    let engine = Engine::builder(ctx.store.clone())
        .config(no_poll_config())
        .handler("PAY", flaky(calls.clone(), 0), opts())
        .start()
        .unwrap();
    let enq = ctx
        .enqueue_in_tx("order-1", engine.task("PAY", "o1"), true)
        .await
        .unwrap();
    assert_eq!(engine.run_now(&enq).await, RunAhead::Started);
    let t = wait_status(&ctx.store, enq.id, Status::Succeeded).await;
    assert_eq!(t.attempts, 1);
    assert_eq!(t.owner.as_deref(), Some(engine.owner().as_str()));
    assert_eq!(calls.count("o1"), 1);
    let c = engine.counters();
    assert_eq!((c.run_ahead, c.polled, c.succeeded), (1, 0, 1));
    // the convenience: enqueue + run ahead
    let (e2, run) = engine.enqueue(engine.task("PAY", "o2")).await.unwrap();
    assert_eq!(run, RunAhead::Started);
    wait_status(&ctx.store, e2.id, Status::Succeeded).await;
    assert_eq!(engine.counters().enqueued, 1);
    engine.shutdown().await;
}

/// a full executor rejects a run-ahead: the task stays pending with no attempt spent, and
/// the poller runs it once there is room. Isolation: another event type is unaffected.
pub async fn engine_rejects_run_ahead_when_executor_full_and_polls_it_later<H: Harness>(
    ctx: &Ctx<H>,
) {
    let gate = Arc::new(Semaphore::new(0));
    let calls = Calls::default();
    let blocking = gated(calls.clone(), &gate);
    let other_calls = Calls::default();
    let engine = Engine::builder(ctx.store.clone())
        .config(fast_config().poll_interval(Duration::from_millis(50)))
        .handler("SLOW", blocking, opts().concurrency(1).queue_capacity(0))
        .handler("FAST", flaky(other_calls.clone(), 0), opts())
        .start()
        .unwrap();
    let (a, run_a) = engine.enqueue(engine.task("SLOW", "a")).await.unwrap();
    assert_eq!(run_a, RunAhead::Started);
    eventually("a to start", || async { calls.count("a") == 1 }).await;
    let (b, run_b) = engine.enqueue(engine.task("SLOW", "b")).await.unwrap();
    assert_eq!(run_b, RunAhead::Rejected);
    let tb = ctx.task(b.id).await;
    assert_eq!((tb.status, tb.attempts, tb.lease), (Status::Pending, 0, 0));
    assert_eq!(engine.counters().rejected, 1);
    // another event type still runs ahead
    let (f, run_f) = engine.enqueue(engine.task("FAST", "f")).await.unwrap();
    assert_eq!(run_f, RunAhead::Started);
    wait_status(&ctx.store, f.id, Status::Succeeded).await;
    // the poller cannot take b while a holds the only slot
    assert_eq!(ctx.task(b.id).await.status, Status::Pending);
    gate.add_permits(2);
    wait_status(&ctx.store, a.id, Status::Succeeded).await;
    let tb = wait_status(&ctx.store, b.id, Status::Succeeded).await;
    assert_eq!(tb.attempts, 1);
    assert_eq!(calls.count("b"), 1);
    assert!(engine.counters().polled >= 1);
    engine.shutdown().await;
}

/// a duplicate enqueue never runs the task twice; once the task finished, the same key
/// runs again only when the enqueue's dedup rule allows a new task.
pub async fn engine_duplicate_enqueue_never_runs_twice<H: Harness>(ctx: &Ctx<H>) {
    let calls = Calls::default();
    let engine = Engine::builder(ctx.store.clone())
        .config(no_poll_config())
        .handler("PAY", flaky(calls.clone(), 0), opts())
        .start()
        .unwrap();
    let (first, r1) = engine.enqueue(engine.task("PAY", "k")).await.unwrap();
    wait_status(&ctx.store, first.id, Status::Succeeded).await;
    let forever = engine.task("PAY", "k").dedup(backstop_core::Dedup::Forever);
    let (second, r2) = engine.enqueue(forever).await.unwrap();
    assert_eq!((r1, r2), (RunAhead::Started, RunAhead::Duplicate));
    assert_eq!(
        (second.id, second.created, second.status),
        (first.id, false, Status::Succeeded)
    );
    assert_eq!(calls.count("k"), 1);
    // the default rule: unique while pending or running, so a finished key runs again
    let (third, r3) = engine.enqueue(engine.task("PAY", "k")).await.unwrap();
    assert!(third.created && third.id != first.id, "{third:?}");
    assert_eq!(r3, RunAhead::Started);
    wait_status(&ctx.store, third.id, Status::Succeeded).await;
    assert_eq!(calls.count("k"), 2);
    // even while the first is still pending (not yet run)
    let p = ctx.store.enqueue(NewTask::new("PAY", "k2")).await.unwrap();
    let dup = ctx.store.enqueue(NewTask::new("PAY", "k2")).await.unwrap();
    assert_eq!(engine.run_now(&dup).await, RunAhead::Duplicate);
    assert_eq!(engine.run_now(&p).await, RunAhead::Started);
    wait_status(&ctx.store, p.id, Status::Succeeded).await;
    assert_eq!(engine.run_now(&p).await, RunAhead::NotClaimed);
    assert_eq!((calls.count("k"), calls.count("k2")), (2, 1));
    engine.shutdown().await;
}

/// a delayed task is not run ahead; it runs when due.
pub async fn engine_delayed_task_waits_for_its_time<H: Harness>(ctx: &Ctx<H>) {
    let calls = Calls::default();
    let engine = Engine::builder(ctx.store.clone())
        .config(fast_config())
        .handler("PAY", flaky(calls.clone(), 0), opts())
        .start()
        .unwrap();
    let (enq, run) = engine
        .enqueue(engine.task("PAY", "later").delay(HOUR))
        .await
        .unwrap();
    assert_eq!(run, RunAhead::NotClaimed);
    assert_eq!(ctx.task(enq.id).await.attempts, 0);
    ctx.backdate(enq.id, TimeColumn::NextRunAt, HOUR).await;
    let t = wait_status(&ctx.store, enq.id, Status::Succeeded).await;
    assert_eq!(t.attempts, 1);
    engine.shutdown().await;
}

/// run-ahead is best effort: a claim that fails after the caller's commit (here the
/// table is briefly away) is logged and counted, answered `Deferred` (never an error of
/// the caller's request), and the poller runs the task once the database is back.
pub async fn engine_run_ahead_that_fails_defers_to_the_poller<H: Harness>(ctx: &Ctx<H>) {
    let calls = Calls::default();
    let engine = Engine::builder(ctx.store.clone())
        .config(fast_config())
        .handler("PAY", succeeding(&calls), opts())
        .start()
        .unwrap();
    let e = ctx.store.enqueue(engine.task("PAY", "o1")).await.unwrap();
    let table = &ctx.config.table;
    ctx.harness
        .execute(
            &ctx.db,
            &format!("ALTER TABLE {table} RENAME TO {table}_away"),
        )
        .await;
    let run = engine.run_now(&e).await;
    ctx.harness
        .execute(
            &ctx.db,
            &format!("ALTER TABLE {table}_away RENAME TO {table}"),
        )
        .await;
    assert_eq!(run, RunAhead::Deferred);
    assert!(
        engine.counters().store_errors >= 1,
        "{:?}",
        engine.counters()
    );
    let t = wait_status(&ctx.store, e.id, Status::Succeeded).await;
    assert_eq!((t.attempts, calls.count("o1")), (1, 1));
    engine.shutdown().await;
}

/// `Engine::enqueue_many`: the batch's handled tasks due now start though the poller is
/// an hour away (the batch wakes it), each once; its delayed task and another type's tasks
/// stay pending, unclaimed. (40 tasks, under the batch size: the woken round's one claim
/// takes them all.)
pub async fn engine_enqueue_many_wakes_its_poller_for_the_batch<H: Harness>(ctx: &Ctx<H>) {
    let calls = Calls::default();
    let engine = Engine::builder(ctx.store.clone())
        .config(fast_config().first_poll_delay(HOUR).poll_interval(HOUR))
        .handler("PAY", succeeding(&calls), opts())
        .start()
        .unwrap();
    let mut tasks: Vec<NewTask> = (0..40)
        .map(|i| engine.task("PAY", format!("p{i}")))
        .collect();
    tasks.extend((0..10).map(|i| engine.task("OTHER", format!("o{i}"))));
    tasks.push(engine.task("PAY", "later").delay(HOUR));
    let got = engine.enqueue_many(&tasks).await.unwrap();
    assert!(got.iter().all(|e| e.created));
    eventually("the batch's 40 PAY tasks ran", || {
        let calls = calls.clone();
        async move { (0..40).all(|i| calls.count(&format!("p{i}")) >= 1) }
    })
    .await;
    for e in &got[..40] {
        let t = wait_status(&ctx.store, e.id, Status::Succeeded).await;
        assert_eq!(t.attempts, 1, "{t:?}");
    }
    engine.shutdown().await;
    for i in 0..40 {
        assert_eq!(calls.count(&format!("p{i}")), 1, "p{i} ran once");
    }
    assert_eq!(calls.count("later"), 0);
    for e in &got[40..] {
        let t = ctx.task(e.id).await;
        assert_eq!((t.status, t.attempts), (Status::Pending, 0), "{t:?}");
    }
}
