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

/// An engine handling `PAY` with `calls`' handler, under `config`.
fn pay_engine<H: Harness>(ctx: &Ctx<H>, calls: &Calls, config: EngineConfig) -> Engine<H::Store> {
    Engine::builder(ctx.store.clone())
        .config(config)
        .handler("PAY", flaky(calls.clone(), 0), opts())
        .start()
        .unwrap()
}

/// Enqueue `task` along `path` with a business row keyed `biz_row`, claim it on that
/// transaction through `claims` (`Engine::claim_in`), commit or roll back: the enqueue's
/// answer and the claim's.
async fn claimed_in_tx<H: Harness>(
    ctx: &Ctx<H>,
    claims: &Arc<crate::EngineClaims<H::Store>>,
    path: crate::TxPath,
    biz_row: &str,
    task: NewTask,
    commit: bool,
) -> (backstop_core::Enqueued, backstop_core::Claimed) {
    let e = ctx
        .enqueue_claimed_in_tx_via(path, biz_row, task, claims.clone(), commit)
        .await
        .unwrap_or_else(|e| panic!("{path}: {e}"));
    let [claimed] = <[_; 1]>::try_from(claims.take()).unwrap();
    assert_eq!(claimed.task_id(), e.id, "{path}");
    (e, claimed)
}

/// The claim inside the enqueue's transaction (`Engine::claim_in`), along every path: the
/// task commits running under this engine (attempt 1, lease 1) with its business row,
/// and `run_claimed` runs it once, the poller never involved. A rolled-back claim runs
/// nothing; a delayed task, a duplicate, and a type this engine does not handle are
/// answered as `run_now` answers them, the row left pending.
pub async fn engine_claims_in_the_enqueue_transaction_and_runs_after_commit<H: Harness>(
    ctx: &Ctx<H>,
) {
    let calls = Calls::default();
    let engine = pay_engine(ctx, &calls, no_poll_config());
    let claims = crate::EngineClaims::new(&engine);
    for path in crate::TxPath::ALL {
        let key = format!("{path}-a");
        let (e, claimed) = claimed_in_tx(
            ctx,
            &claims,
            path,
            &format!("{path}-1"),
            engine.task("PAY", &key),
            true,
        )
        .await;
        assert_eq!(
            claimed.lease(),
            Some(backstop_core::Lease {
                task_id: e.id,
                token: 1
            }),
            "{path}"
        );
        // committed running under this engine, before anything ran
        let t = ctx.task(e.id).await;
        assert_eq!(
            (t.status, t.attempts, t.lease, t.owner.as_deref()),
            (Status::Running, 1, 1, Some(engine.owner().as_str())),
            "{path}"
        );
        assert_eq!(calls.count(&key), 0);
        assert_eq!(
            engine.run_claimed(claimed).await,
            RunAhead::Started,
            "{path}"
        );
        let t = wait_status(&ctx.store, e.id, Status::Succeeded).await;
        assert_eq!((t.attempts, t.lease), (1, 1), "{path}");
        assert_eq!(calls.count(&key), 1, "{path}");

        // rolled back: claimed inside, nothing to run after
        let rb_key = format!("{path}-rb");
        let (_, claimed) = claimed_in_tx(
            ctx,
            &claims,
            path,
            &format!("{path}-2"),
            engine.task("PAY", &rb_key),
            false,
        )
        .await;
        assert!(claimed.lease().is_some(), "{path}");
        assert_eq!(
            engine.run_claimed(claimed).await,
            RunAhead::NotClaimed,
            "{path}"
        );

        // not claimed, as run_now would not: delayed, duplicate, not handled here
        let cases = [
            (
                engine.task("PAY", format!("{path}-later")).delay(HOUR),
                RunAhead::NotClaimed,
            ),
            // the delayed task is still pending: a duplicate
            (
                engine.task("PAY", format!("{path}-later")),
                RunAhead::Duplicate,
            ),
            (NewTask::new("ELSEWHERE", &key), RunAhead::NoHandler),
        ];
        for (n, (task, expected)) in cases.into_iter().enumerate() {
            let (e, claimed) =
                claimed_in_tx(ctx, &claims, path, &format!("{path}-n{n}"), task, true).await;
            assert_eq!(claimed.lease(), None, "{path}: {expected:?} {e:?}");
            assert_eq!(engine.run_claimed(claimed).await, expected, "{path}");
            let t = ctx.task(e.id).await;
            if expected != RunAhead::Duplicate {
                assert_eq!(
                    (t.status, t.attempts, t.lease, t.owner),
                    (Status::Pending, 0, 0, None),
                    "{path}: {expected:?}"
                );
            }
        }
    }
    assert_eq!(calls.count("native-rb") + calls.count("sqlx-rb"), 0);
    let c = engine.counters();
    assert_eq!((c.run_ahead, c.polled, c.succeeded), (3, 0, 3));
    engine.shutdown().await;
}

/// `claim_in` reserves a place in the executor before its statement: with the executor
/// full it claims nothing (`Rejected`, counted; the task pending, no attempt spent); an
/// answer dropped unrun (after a rollback) frees its place for the next claim.
pub async fn engine_claim_in_reserves_the_executor_and_frees_it_when_dropped<H: Harness>(
    ctx: &Ctx<H>,
) {
    let gate = Arc::new(Semaphore::new(0));
    let calls = Calls::default();
    let engine = Engine::builder(ctx.store.clone())
        .config(no_poll_config())
        .handler(
            "SLOW",
            gated(calls.clone(), &gate),
            opts().concurrency(1).queue_capacity(0),
        )
        .start()
        .unwrap();
    let claims = crate::EngineClaims::new(&engine);
    let path = crate::TxPath::Native;
    // a claim on a transaction that rolls back holds the only place until dropped
    let (_, held) = claimed_in_tx(ctx, &claims, path, "r1", engine.task("SLOW", "x"), false).await;
    assert!(held.lease().is_some());
    let (y, rejected) =
        claimed_in_tx(ctx, &claims, path, "r2", engine.task("SLOW", "y"), true).await;
    assert_eq!(rejected.lease(), None);
    assert_eq!(engine.run_claimed(rejected).await, RunAhead::Rejected);
    let t = ctx.task(y.id).await;
    assert_eq!((t.status, t.attempts, t.lease), (Status::Pending, 0, 0));
    assert_eq!(engine.counters().rejected, 1);
    drop(held);
    let (z, claimed) =
        claimed_in_tx(ctx, &claims, path, "r3", engine.task("SLOW", "z"), true).await;
    assert!(
        claimed.lease().is_some(),
        "the dropped answer freed its place"
    );
    assert_eq!(engine.run_claimed(claimed).await, RunAhead::Started);
    eventually("z to start", || async { calls.count("z") == 1 }).await;
    gate.add_permits(1);
    let t = wait_status(&ctx.store, z.id, Status::Succeeded).await;
    assert_eq!(t.attempts, 1);
    assert_eq!(calls.count("x"), 0);
    assert_eq!(ctx.task(y.id).await.status, Status::Pending);
    engine.shutdown().await;
}

/// The trade-off of the claim inside the transaction: an answer never run (the process
/// died after the commit) leaves the task running under its engine, which does not
/// heartbeat it; once its lease is older than `dead_after`, another instance's sweep
/// gives it back and runs it — once, as attempt 2.
pub async fn engine_claimed_task_never_run_waits_for_the_sweep<H: Harness>(ctx: &Ctx<H>) {
    let calls = Calls::default();
    let first = pay_engine(ctx, &calls, no_poll_config());
    let claims = crate::EngineClaims::new(&first);
    let (e, claimed) = claimed_in_tx(
        ctx,
        &claims,
        crate::TxPath::Native,
        "lost-1",
        first.task("PAY", "lost"),
        true,
    )
    .await;
    // the process "dies" before run_claimed: the answer is dropped
    drop(claimed);
    let claimed_at = ctx.task(e.id).await.updated_at;
    tokio::time::sleep(Duration::from_millis(400)).await; // two heartbeats of `first`
    let t = ctx.task(e.id).await;
    assert_eq!(
        (t.status, t.attempts, t.lease, t.owner.as_deref()),
        (Status::Running, 1, 1, Some(first.owner().as_str()))
    );
    assert_eq!(
        t.updated_at, claimed_at,
        "a task never handed over is not heartbeated by its engine"
    );
    ctx.backdate(e.id, TimeColumn::UpdatedAt, Duration::from_secs(120))
        .await;
    let second = Engine::builder(ctx.new_store().await)
        .config(fast_config().first_poll_delay(Duration::ZERO))
        .handler("PAY", flaky(calls.clone(), 0), opts())
        .start()
        .unwrap(); // on a store of its own: another process
    let t = wait_status(&ctx.store, e.id, Status::Succeeded).await;
    assert_eq!(
        (t.attempts, t.owner.as_deref()),
        (2, Some(second.owner().as_str()))
    );
    assert_eq!(calls.count("lost"), 1);
    assert_eq!(first.counters().run_ahead, 0);
    second.shutdown().await;
    first.shutdown().await;
}

/// An engine shut down between the commit and `run_claimed` gives the task back:
/// pending, its attempt not counted, for a live instance.
pub async fn engine_gives_back_a_claimed_task_when_shut_down_before_running_it<H: Harness>(
    ctx: &Ctx<H>,
) {
    let calls = Calls::default();
    let engine = pay_engine(ctx, &calls, no_poll_config());
    let claims = crate::EngineClaims::new(&engine);
    let (e, claimed) = claimed_in_tx(
        ctx,
        &claims,
        crate::TxPath::Native,
        "late-1",
        engine.task("PAY", "late"),
        true,
    )
    .await;
    engine.shutdown().await;
    assert_eq!(engine.run_claimed(claimed).await, RunAhead::ShuttingDown);
    let t = ctx.task(e.id).await;
    assert_eq!((t.status, t.attempts, t.owner), (Status::Pending, 0, None));
    assert_eq!(calls.count("late"), 0);
}

/// Claims inside transactions race two engines' pollers: 6 producers × 10 tasks, each
/// claimed on its transaction by one of the two engines and run after its commit, while
/// both pollers poll every 20 ms. The pollers never see a claimable row (uncommitted, then
/// running): every task runs exactly once, ahead.
pub async fn engine_claims_in_transactions_race_pollers_and_each_task_runs_once<H: Harness>(
    ctx: &Ctx<H>,
) {
    let calls = Calls::default();
    let engines: Vec<_> = [0, 1]
        .iter()
        .map(|_| pay_engine(ctx, &calls, fast_config().first_poll_delay(Duration::ZERO)))
        .collect();
    let producers = (0..6).map(|p| {
        let engine = engines[p % 2].clone();
        async move {
            let claims = crate::EngineClaims::new(&engine);
            let path = crate::TxPath::ALL[p % 3];
            let mut ids = Vec::new();
            for i in 0..10 {
                let (e, claimed) = claimed_in_tx(
                    ctx,
                    &claims,
                    path,
                    &format!("race-{p}-{i}"),
                    engine.task("PAY", format!("k{p}-{i}")),
                    true,
                )
                .await;
                assert_eq!(engine.run_claimed(claimed).await, RunAhead::Started);
                ids.push(e.id);
            }
            ids
        }
    });
    let ids: Vec<TaskId> =
        tokio::time::timeout(PATIENCE, futures_util::future::join_all(producers))
            .await
            .expect("producers within the deadline")
            .into_iter()
            .flatten()
            .collect();
    for id in &ids {
        let t = wait_status(&ctx.store, *id, Status::Succeeded).await;
        assert_eq!(t.attempts, 1, "task {id}");
    }
    for p in 0..6 {
        for i in 0..10 {
            assert_eq!(calls.count(&format!("k{p}-{i}")), 1, "k{p}-{i} ran once");
        }
    }
    let run_ahead: u64 = engines.iter().map(|e| e.counters().run_ahead).sum();
    let polled: u64 = engines.iter().map(|e| e.counters().polled).sum();
    assert_eq!((run_ahead, polled), (60, 0));
    for e in &engines {
        e.shutdown().await;
    }
}
