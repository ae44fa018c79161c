//! Leases: heartbeats, dead workers, stale completions.

use super::*;

/// heartbeats keep a task that runs longer than `dead_after` alive: it is never recycled
/// or run twice while its instance lives.
pub async fn engine_heartbeats_keep_a_long_task_alive<H: Harness>(ctx: &Ctx<H>) {
    let calls = Calls::default();
    let long = |calls: Calls| sleepy(calls, Duration::from_millis(2500));
    let config = fast_config()
        .dead_after(Duration::from_secs(1))
        .heartbeat_interval(Duration::from_millis(100));
    // two instances: either may run the task; both poll and recycle meanwhile
    let engine = Engine::builder(ctx.store.clone())
        .config(config.clone())
        .handler("LONG", long(calls.clone()), opts())
        .start()
        .unwrap();
    let other = Engine::builder(ctx.new_store().await)
        .config(config)
        .handler("LONG", long(calls.clone()), opts())
        .start()
        .unwrap();
    let (enq, _) = engine.enqueue(engine.task("LONG", "long")).await.unwrap();
    let t = wait_status(&ctx.store, enq.id, Status::Succeeded).await;
    assert_eq!(t.attempts, 1);
    assert_eq!(
        calls.count("long"),
        1,
        "run once, never recycled while alive"
    );
    assert!(
        (t.updated_at - t.created_at) >= chrono_dur(Duration::from_millis(2500)),
        "the task outlived dead_after"
    );
    let (a, b) = (engine.counters(), other.counters());
    assert_eq!(a.recycled + b.recycled, 0);
    assert_eq!(a.stale_completions + b.stale_completions, 0);
    assert_eq!(a.succeeded + b.succeeded, 1);
    engine.shutdown().await;
    other.shutdown().await;
}

/// an outage longer than `dead_after` (heartbeats and sweeps fail) does not make the
/// engine's own running task look dead to its own first sweep after the store comes back:
/// the sweep refreshes the instance's leases first, so the task runs once, attempt 1,
/// never recycled. A second instance that saw the same outage waits a heartbeat interval
/// before sweeping, so the first one's task is not taken either.
pub async fn engine_refreshes_its_own_leases_after_an_outage_before_sweeping<H: Harness>(
    ctx: &Ctx<H>,
) {
    let calls = Calls::default();
    // the heartbeat interval is long next to the sweep's (dead_after / 8): without the
    // refresh, the first sweep after the outage comes before the next heartbeat
    let config = fast_config()
        .dead_after(Duration::from_millis(1200))
        .heartbeat_interval(Duration::from_millis(600));
    let gate = Gate::shut(ctx.store.clone(), Gated::Nothing);
    let engine = long_runner(gate.clone(), config.clone(), &calls, 4000);
    let other_gate = Gate::shut(ctx.new_store().await, Gated::Nothing);
    let other = long_runner(other_gate.clone(), config, &calls, 4000);
    let (enq, before) = start_long(ctx, &engine, &calls).await;
    // the outage: longer than dead_after, so the lease is older than it when it ends
    gate.outage(true);
    other_gate.outage(true);
    tokio::time::sleep(Duration::from_millis(1800)).await;
    gate.outage(false);
    other_gate.outage(false);
    let t = wait_status(&ctx.store, enq.id, Status::Succeeded).await;
    assert_eq!(
        (t.attempts, t.lease, calls.count("long")),
        (1, before.lease, 1),
        "run once under its first lease: never recycled"
    );
    let (a, b) = (engine.counters(), other.counters());
    assert_eq!(a.recycled + b.recycled, 0, "nothing recycled");
    assert_eq!(a.stale_completions + b.stale_completions, 0);
    assert!(a.store_errors > 0, "the outage was seen");
    engine.shutdown().await;
    other.shutdown().await;
}

/// A heartbeat that stalls on the store (held before it reaches it, as a Galera cluster
/// holds every statement while it waits out a node that died) past `dead_after` does not
/// make the engine's own running task look dead to its own sweep, which does not wait on
/// the store meanwhile: once the last refresh the store applied began `stall_after` ago
/// (here `dead_after` 1 s less two 200 ms intervals: 600 ms), the sweep refreshes the
/// leases first (after the stalled refresh) and sweeps a heartbeat interval later. The
/// task runs once, attempt 1, under its first lease, never recycled.
pub async fn engine_sweep_waits_out_its_own_stalled_heartbeat<H: Harness>(ctx: &Ctx<H>) {
    let calls = Calls::default();
    let config = one_second_leases();
    let gate = Gate::shut(ctx.store.clone(), Gated::Heartbeat);
    let engine = long_runner(gate.clone(), config, &calls, 3500);
    let (enq, before) = start_long(ctx, &engine, &calls).await;
    gate.arrived(1).await;
    // the stall: past dead_after widened by the sweep's lag allowance (at most another
    // dead_after), with the sweep running every 125 ms meanwhile
    tokio::time::sleep(Duration::from_millis(2600)).await;
    let during = ctx.task(enq.id).await;
    assert_eq!(
        (
            during.status,
            during.attempts,
            during.lease,
            calls.count("long")
        ),
        (Status::Running, 1, before.lease, 1),
        "not recycled while its heartbeat stalled"
    );
    gate.open();
    let t = wait_status(&ctx.store, enq.id, Status::Succeeded).await;
    assert_eq!(
        (t.attempts, t.lease, calls.count("long")),
        (1, before.lease, 1),
        "run once under its first lease: never recycled"
    );
    assert_eq!(engine.counters().recycled, 0, "nothing recycled");
    engine.shutdown().await;
}

/// An instance back from an outage waits a heartbeat interval before it sweeps even when
/// its heartbeat loop got through first (clearing its own leases' flag): another
/// instance's refresh still on its way after the same outage must land first. Here the
/// sweeper's loop is held in its key sweep through the outage while its heartbeats fail,
/// its heartbeats then get through, and only then is its sweep let go; the other
/// instance's heartbeat, held all along (its lease older than `dead_after`), lands
/// 150 ms later. Its task runs once under its first lease; nothing is recycled.
pub async fn engine_sweeps_an_interval_after_an_outage_its_heartbeats_ended<H: Harness>(
    ctx: &Ctx<H>,
) {
    let calls = Calls::default();
    let config = fast_config()
        .dead_after(Duration::from_millis(1200))
        .heartbeat_interval(Duration::from_millis(600));
    // a type each, so each task runs on the instance that enqueued it
    let start = |gate: Gate<H::Store>, event_type: &str| {
        Engine::builder(gate)
            .config(config.clone())
            .handler(
                event_type,
                sleepy(calls.clone(), Duration::from_millis(5000)),
                opts(),
            )
            .start()
            .unwrap()
    };
    let holder_gate = Gate::shut(ctx.store.clone(), Gated::Nothing);
    let holder = start(holder_gate.clone(), "HELD");
    let sweeper_gate = Gate::shut(ctx.new_store().await, Gated::Nothing);
    let sweeper = start(sweeper_gate.clone(), "OWN");
    let (held, _) = holder.enqueue(holder.task("HELD", "held")).await.unwrap();
    sweeper.enqueue(sweeper.task("OWN", "own")).await.unwrap();
    eventually("both tasks to start", || async {
        calls.count("held") == 1 && calls.count("own") == 1
    })
    .await;
    let before = ctx.task(held.id).await;
    // the holder's heartbeats wait (its lease ages past dead_after); the sweeper's loop
    // waits in its key sweep while its heartbeats fail
    holder_gate.faults.hold(&[Op::Heartbeat], Phase::Before);
    sweeper_gate.faults.hold(&[Op::OrderKeys], Phase::Before);
    sweeper_gate.outage(true);
    tokio::time::sleep(Duration::from_millis(1800)).await;
    let seen = sweeper_gate.heartbeats_so_far();
    sweeper_gate.outage(false);
    // two heartbeats answered after the outage: the sweeper's loop got through first
    sweeper_gate.heartbeats(seen + 2).await;
    sweeper_gate.faults.release();
    tokio::time::sleep(Duration::from_millis(150)).await;
    holder_gate.faults.release();
    let t = wait_status(&ctx.store, held.id, Status::Succeeded).await;
    assert_eq!(
        (t.attempts, t.lease, calls.count("held")),
        (1, before.lease, 1),
        "the held task ran once under its first lease: never recycled"
    );
    let (a, b) = (holder.counters(), sweeper.counters());
    assert_eq!(a.recycled + b.recycled, 0, "nothing recycled");
    assert!(b.store_errors > 0, "the sweeper saw the outage");
    holder.shutdown().await;
    sweeper.shutdown().await;
}

/// A store slow enough that a live instance's heartbeats land further apart than
/// `dead_after` (each waits 1.5 s on it: a lease as old as 1.7 s before its refresh
/// lands, `dead_after` 1 s) does not make its tasks look dead to another instance whose
/// sweeps wait on the same store (0.9 s each): the sweep takes a lease as dead only
/// after `dead_after` plus the longest its own recent calls waited (at most another
/// `dead_after`). The task runs once, under its first lease, nothing recycled.
pub async fn engine_sweep_allows_for_the_store_answering_slowly<H: Harness>(ctx: &Ctx<H>) {
    let calls = Calls::default();
    let config = one_second_leases();
    let holder_gate = Gate::shut(ctx.store.clone(), Gated::Nothing);
    let holder = Engine::builder(holder_gate.clone())
        .config(config.clone())
        .handler(
            "HELD",
            sleepy(calls.clone(), Duration::from_millis(8000)),
            opts(),
        )
        .start()
        .unwrap();
    let sweeper_gate = Gate::shut(ctx.new_store().await, Gated::Nothing);
    let sweeper = Engine::builder(sweeper_gate.clone())
        .config(config)
        .handler("OWN", sleepy(calls.clone(), Duration::ZERO), opts())
        .start()
        .unwrap();
    let (held, _) = holder.enqueue(holder.task("HELD", "held")).await.unwrap();
    eventually("the task to start", || async { calls.count("held") == 1 }).await;
    let before = ctx.task(held.id).await;
    // the store slows down: the sweeper's sweeps first (so it has measured the store
    // before the holder's leases age), then the holder's heartbeats
    sweeper_gate.faults.delay(
        &[Op::RecycleDead],
        Phase::Before,
        Duration::from_millis(900),
    );
    tokio::time::sleep(Duration::from_millis(2000)).await;
    holder_gate
        .faults
        .delay(&[Op::Heartbeat], Phase::Before, Duration::from_millis(1500));
    let t = wait_status(&ctx.store, held.id, Status::Succeeded).await;
    assert_eq!(
        (t.attempts, t.lease, calls.count("held")),
        (1, before.lease, 1),
        "the task ran once under its first lease: never recycled"
    );
    let (a, b) = (holder.counters(), sweeper.counters());
    assert_eq!(a.recycled + b.recycled, 0, "nothing recycled");
    holder_gate.faults.clear(&[Op::Heartbeat]);
    sweeper_gate.faults.clear(&[Op::RecycleDead]);
    holder.shutdown().await;
    sweeper.shutdown().await;
}

/// an outcome whose mark fails through an outage longer than `dead_after` is written
/// once the store answers again, not given up on: the task, held and heartbeated
/// meanwhile, succeeds under its first lease after one run, never recycled.
pub async fn engine_writes_an_outcome_held_up_by_an_outage<H: Harness>(ctx: &Ctx<H>) {
    let calls = Calls::default();
    let config = fast_config()
        .dead_after(Duration::from_millis(1200))
        .heartbeat_interval(Duration::from_millis(300));
    let gate = Gate::shut(ctx.store.clone(), Gated::Nothing);
    let release = Arc::new(Semaphore::new(0));
    let handler = {
        let release = Arc::clone(&release);
        recording(calls.clone(), move |_, _| {
            let release = Arc::clone(&release);
            async move {
                let _ = release.acquire().await;
                Ok(())
            }
        })
    };
    let engine = Engine::builder(gate.clone())
        .config(config)
        .handler("SLOW", handler, opts())
        .start()
        .unwrap();
    let (enq, _) = engine.enqueue(engine.task("SLOW", "k")).await.unwrap();
    eventually("the task to start", || async { calls.count("k") == 1 }).await;
    let before = ctx.task(enq.id).await;
    // the store goes away; the attempt ends during the outage, so its mark fails and
    // keeps failing for longer than dead_after
    gate.outage(true);
    release.add_permits(1);
    tokio::time::sleep(Duration::from_millis(2500)).await;
    assert_eq!(
        ctx.task(enq.id).await.status,
        Status::Running,
        "nothing was written during the outage"
    );
    gate.outage(false);
    let t = wait_status(&ctx.store, enq.id, Status::Succeeded).await;
    assert_eq!(
        (t.attempts, t.lease, calls.count("k")),
        (1, before.lease, 1),
        "run once, its outcome written under its first lease"
    );
    let c = engine.counters();
    assert_eq!((c.recycled, c.stale_completions, c.succeeded), (0, 0, 1));
    assert!(c.store_errors > 0, "the outage was seen");
    engine.shutdown().await;
}

/// a claimed task that waited for a runner past `dead_after` while its heartbeats failed
/// (a stopped process, an outage) and was recycled and claimed by another instance
/// meanwhile is not started when its runner frees up: its lease is checked first. It
/// runs once, under the successor's claim.
pub async fn engine_does_not_start_a_task_recycled_while_it_waited<H: Harness>(ctx: &Ctx<H>) {
    let calls = Calls::default();
    let config = fast_config()
        .dead_after(Duration::from_millis(1000))
        .heartbeat_interval(Duration::from_millis(300));
    let gate = Gate::shut(ctx.store.clone(), Gated::Nothing);
    let hold = Arc::new(Semaphore::new(0));
    let handler = {
        let hold = Arc::clone(&hold);
        recording(calls.clone(), move |_, task| {
            let hold = Arc::clone(&hold);
            async move {
                if task.biz_key == "first" {
                    let _ = hold.acquire().await;
                }
                Ok(())
            }
        })
    };
    // one runner: "second" waits in the executor's queue behind "first"
    let engine = Engine::builder(gate.clone())
        .config(config)
        .handler("ONE", handler, opts().concurrency(1))
        .start()
        .unwrap();
    let first = ctx.enqueue("ONE", "first").await;
    eventually("the first task to start", || async {
        calls.count("first") == 1
    })
    .await;
    let second = ctx.enqueue("ONE", "second").await;
    eventually("the second task to be claimed", || async {
        ctx.task(second).await.status == Status::Running
    })
    .await;
    // the engine loses the store for longer than dead_after; meanwhile another instance
    // recycles both and claims the second
    gate.outage(true);
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let r = ctx
        .store
        .recycle_dead(Duration::from_millis(1000), 10)
        .await
        .unwrap();
    assert_eq!(r.to_pending, 2, "both leases went stale");
    let successor = ctx
        .store
        .claim_by_id(second, &Owner::new("successor").unwrap())
        .await
        .unwrap()
        .expect("the successor claims the second task");
    gate.outage(false);
    hold.add_permits(10);
    // the first ends (its mark refused), the second's runner frees up: it is not started
    eventually("the engine to see the second's lease gone", || async {
        engine.counters().leases_lost >= 1
    })
    .await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(calls.count("second"), 0, "not run under its stale lease");
    let t = ctx.task(second).await;
    assert_eq!(
        (t.status, t.lease, t.owner.as_deref()),
        (Status::Running, successor.lease, Some("successor")),
        "the successor's claim untouched"
    );
    let _ = first;
    engine.shutdown().await;
}

/// the dead-worker sweep recycles a task whose worker died (no heartbeat for longer than
/// `dead_after`) and the poller runs it again: attempt 2, owned by this instance,
/// succeeded, counted as recycled once; a running task that is still fresh is left alone.
pub async fn engine_recycles_a_dead_task_and_runs_it_again<H: Harness>(ctx: &Ctx<H>) {
    let dead = ctx.enqueue("PAY", "dead").await;
    let alive = ctx.enqueue("PAY", "alive").await;
    // both claimed by a worker (ctx.owner) that then dies; one of them long ago
    ctx.claim(dead).await;
    ctx.claim(alive).await;
    let config = fast_config()
        .owner(Some(Owner::new("successor").unwrap()))
        .dead_after(Duration::from_secs(60));
    ctx.backdate(
        dead,
        TimeColumn::UpdatedAt,
        config.dead_after + Duration::from_secs(5),
    )
    .await;
    let calls = Calls::default();
    let engine = Engine::builder(ctx.store.clone())
        .config(config)
        .handler("PAY", flaky(calls.clone(), 0), opts())
        .start()
        .unwrap();
    let t = wait_status(&ctx.store, dead, Status::Succeeded).await;
    assert_eq!(
        t.attempts, 2,
        "the dead attempt counts, the rerun is the second"
    );
    assert_eq!(t.owner.as_deref(), Some("successor"));
    assert_eq!(calls.count("dead"), 1);
    eventually("the recycle to be counted", || async {
        engine.counters().recycled == 1
    })
    .await;
    // a few more polls: the fresh running task is not touched
    tokio::time::sleep(Duration::from_millis(200)).await;
    let a = ctx.task(alive).await;
    assert_eq!((a.status, a.attempts), (Status::Running, 1));
    assert_eq!(a.owner.as_deref(), Some(ctx.owner.as_str()));
    assert_eq!(calls.count("alive"), 0);
    assert_eq!(engine.counters().recycled, 1);
    engine.shutdown().await;
}

/// the dead-worker sweep runs on its own clock: a full batch sweeps again at once, and
/// what it gives back is claimed at once (the sweep wakes the poller), not at the poller's
/// next tick an hour later. The sweep is held until the poller's first round has found
/// nothing to claim, so only the wake-up can bring the poller back.
pub async fn engine_recycler_sweeps_every_dead_task_and_wakes_the_poller<H: Harness>(ctx: &Ctx<H>) {
    const DEAD: usize = 150;
    const SWEEP: usize = 100;
    let config = fast_config()
        .owner(Some(Owner::new("successor").unwrap()))
        .poll_interval(HOUR)
        .first_poll_delay(Duration::ZERO)
        .recycle_batch(SWEEP)
        .dead_after(Duration::from_secs(60));
    let mut ids = Vec::new();
    for i in 0..DEAD {
        let id = ctx.enqueue("PAY", &format!("dead{i}")).await;
        ctx.claim(id).await;
        // dead past the widest `dead_after` a sweep takes: the first sweep's wait at the
        // gate counts as the store's answering time, which widens the next sweep's
        // `dead_after` (by at most `dead_after`); under a loaded server a wait of more
        // than 5 s left the second sweep finding none of the last 50
        ctx.backdate(
            id,
            TimeColumn::UpdatedAt,
            config.dead_after * 2 + Duration::from_secs(5),
        )
        .await;
        ids.push(id);
    }
    let calls = Calls::default();
    let gate = Gate::shut(ctx.store.clone(), Gated::Recycle);
    let engine = Engine::builder(gate.clone())
        .config(config)
        .handler("PAY", flaky(calls.clone(), 0), opts())
        .start()
        .unwrap();
    gate.arrived(1).await;
    gate.claimed(1).await;
    assert_eq!(engine.counters().polled, 0, "every task is still running");
    gate.open();
    eventually("every dead task to run again", || async {
        ctx.store.stats().await.unwrap().count(Status::Succeeded) == DEAD as u64
    })
    .await;
    for id in ids {
        let t = ctx.task(id).await;
        assert_eq!(
            (t.status, t.attempts, t.owner.as_deref()),
            (Status::Succeeded, 2, Some("successor")),
            "task {id}"
        );
        assert_eq!(calls.count(&t.biz_key), 1);
    }
    assert_eq!(engine.counters().recycled, DEAD as u64);
    engine.shutdown().await;
}

/// a dead task the sweep passed over, its row held by another transaction, is swept
/// again soon (not at the next interval, an hour away here) and runs once its row is
/// free; one the sweep waits for (a backend documented to wait) runs once the lock goes.
pub async fn engine_resweeps_soon_for_a_dead_task_it_passed_over<H: Harness>(ctx: &Ctx<H>) {
    let config = fast_config()
        .owner(Some(Owner::new("successor").unwrap()))
        .poll_interval(HOUR)
        .first_poll_delay(Duration::ZERO)
        .dead_after(Duration::from_secs(60));
    let dead = crate::store::two_dead(ctx, "PAY").await;
    let Some(bound) = crate::store::passing_bound(ctx, "no row locks: nothing to pass over") else {
        return;
    };
    let lock = ctx
        .harness
        .lock_row(&ctx.db, &ctx.config.table, dead[0])
        .await;
    let calls = Calls::default();
    let engine = Engine::builder(ctx.store.clone())
        .config(config)
        .handler("PAY", flaky(calls.clone(), 0), opts())
        .start()
        .unwrap();
    if bound.is_some() {
        eventually("the task behind the held one to run", || async {
            calls.count("behind") == 1
        })
        .await;
    }
    // more than one sweep's pause while the row is held: a sweep that passed it over and
    // recycled nothing else sweeps again
    tokio::time::sleep(Duration::from_millis(2500)).await;
    let expected = if bound.is_some() { 1 } else { 0 };
    assert_eq!(calls.count("held"), 0, "the held task waits for its row");
    assert_eq!(engine.counters().recycled, expected);
    drop(lock);
    eventually("the held task to run once its row is free", || async {
        calls.count("held") == 1
    })
    .await;
    for id in dead {
        let t = wait_status(&ctx.store, id, Status::Succeeded).await;
        assert_eq!((t.attempts, t.owner.as_deref()), (2, Some("successor")));
        assert_eq!(calls.count(&t.biz_key), 1);
    }
    assert_eq!(engine.counters().recycled, 2);
    engine.shutdown().await;
}

/// a late completion by a worker whose task was recycled and claimed again is refused by
/// the lease and counted; the successor's claim is untouched.
pub async fn engine_refuses_a_late_completion_after_recycle<H: Harness>(ctx: &Ctx<H>) {
    let gate = Arc::new(Semaphore::new(0));
    let calls = Calls::default();
    let handler = gated(calls.clone(), &gate);
    // heartbeats far apart: the instance looks dead (a long GC pause, a partition)
    let engine = Engine::builder(ctx.store.clone())
        .config(
            no_poll_config()
                .dead_after(2 * HOUR)
                .heartbeat_interval(HOUR),
        )
        .handler("PAY", handler, opts())
        .start()
        .unwrap();
    let (enq, _) = engine.enqueue(engine.task("PAY", "k")).await.unwrap();
    eventually("the handler to start", || async { calls.count("k") == 1 }).await;
    ctx.backdate(enq.id, TimeColumn::UpdatedAt, HOUR).await;
    let r = ctx
        .store
        .recycle_dead(Duration::from_secs(60), 10)
        .await
        .unwrap();
    assert_eq!(r.to_pending, 1);
    let successor = ctx
        .store
        .claim_by_id(enq.id, &Owner::new("successor").unwrap())
        .await
        .unwrap()
        .unwrap();
    gate.add_permits(1);
    eventually("the stale completion to be counted", || async {
        engine.counters().stale_completions == 1
    })
    .await;
    let t = ctx.task(enq.id).await;
    assert_eq!(t.status, Status::Running);
    assert_eq!(t.owner.as_deref(), Some("successor"));
    assert_eq!(t.lease, successor.lease);
    assert_eq!(
        engine.counters().succeeded,
        1,
        "the attempt itself ended well"
    );
    engine.shutdown().await;
}

/// A mark committed but answered late (a slow network, a stalled reply): heartbeats meanwhile
/// find the task's lease gone (it succeeded under that lease), which is no lost lease. No
/// lease is counted lost, no completion is refused, and the engine logs no warning.
pub async fn engine_slow_mark_answers_lose_no_lease<H: Harness>(ctx: &Ctx<H>) {
    const TASKS: usize = 10;
    let logs = crate::logs::capture();
    let calls = Calls::default();
    let gate = Gate::shut(ctx.store.clone(), Gated::MarkAnswer);
    let engine = Engine::builder(gate.clone())
        .config(no_poll_config().heartbeat_interval(Duration::from_millis(30)))
        .handler("PAY", succeeding(&calls), opts())
        .start()
        .unwrap();
    let mut ids = Vec::new();
    for i in 0..TASKS {
        let (enq, run) = engine
            .enqueue(engine.task("PAY", format!("k{i}")))
            .await
            .unwrap();
        assert_eq!(run, RunAhead::Started);
        ids.push(enq.id);
    }
    // a batch of marks committed, its answer held at the gate (the flusher waits for
    // it; the other marks queue behind it)
    gate.arrived(1).await;
    let committed = ctx.store.stats().await.unwrap().count(Status::Succeeded) as usize;
    assert!(committed >= 1);
    // several heartbeats find the leases of those (succeeded) tasks gone meanwhile
    gate.refused(3 * committed).await;
    gate.open();
    engine.shutdown().await;
    for id in ids {
        let t = ctx.task(id).await;
        assert_eq!((t.status, t.attempts), (Status::Succeeded, 1), "task {id}");
        assert_eq!(calls.count(&t.biz_key), 1);
    }
    let c = engine.counters();
    assert_eq!(
        (c.succeeded, c.leases_lost, c.stale_completions),
        (TASKS as u64, 0, 0),
        "{c:?}"
    );
    let warned = logs.of(engine.owner().as_str());
    assert!(warned.is_empty(), "the engine warned: {warned:?}");
}

/// A lease genuinely lost while its handler runs (the task was recycled under it) is
/// counted once and warned about once, however many heartbeats follow; the late
/// completion is then refused and counted once.
pub async fn engine_counts_a_lost_lease_once<H: Harness>(ctx: &Ctx<H>) {
    let logs = crate::logs::capture();
    let gate = Arc::new(Semaphore::new(0));
    let calls = Calls::default();
    let watch = Gate::shut(ctx.store.clone(), Gated::Nothing);
    let engine = Engine::builder(watch.clone())
        .config(no_poll_config().heartbeat_interval(Duration::from_millis(30)))
        .handler("PAY", gated(calls.clone(), &gate), opts())
        .start()
        .unwrap();
    // two long tasks: the one that stays held keeps heartbeats going after the other's
    // lease is lost
    let (lost, _) = engine.enqueue(engine.task("PAY", "lost")).await.unwrap();
    let (kept, _) = engine.enqueue(engine.task("PAY", "kept")).await.unwrap();
    eventually("both handlers to start", || async {
        calls.count("lost") == 1 && calls.count("kept") == 1
    })
    .await;
    // A heartbeat (every 30 ms) may refresh the row between the backdate and the sweep,
    // or hold it while the sweep passes it (SKIP LOCKED): backdate and sweep again until
    // the sweep takes it.
    eventually("the backdated task to be recycled", || async {
        ctx.backdate(lost.id, TimeColumn::UpdatedAt, HOUR).await;
        let r = ctx
            .store
            .recycle_dead(Duration::from_secs(60), 10)
            .await
            .unwrap();
        assert!(r.to_pending <= 1, "only the backdated task is dead: {r:?}");
        r.to_pending == 1
    })
    .await;
    eventually("the lost lease to be counted", || async {
        engine.counters().leases_lost == 1
    })
    .await;
    // many more heartbeats: the lost lease is not sent again, nor counted again
    let after = watch.heartbeats_so_far();
    watch.heartbeats(after + 10).await;
    assert_eq!(engine.counters().leases_lost, 1);
    gate.add_permits(2);
    eventually("the late completion to be refused", || async {
        engine.counters().stale_completions == 1
    })
    .await;
    wait_status(&ctx.store, kept.id, Status::Succeeded).await;
    engine.shutdown().await;
    let c = engine.counters();
    assert_eq!(
        (c.leases_lost, c.stale_completions, c.succeeded),
        (1, 1, 2),
        "{c:?}"
    );
    let t = ctx.task(lost.id).await;
    assert_eq!(
        (t.status, t.attempts, t.owner.as_deref()),
        (Status::Pending, 1, None),
        "the recycle stands; the late success was refused"
    );
    let warned = logs.of(engine.owner().as_str());
    let lost_warnings = warned
        .iter()
        .filter(|m| m.contains("heartbeat found the lease gone"))
        .count();
    assert_eq!(lost_warnings, 1, "{warned:?}");
    assert_eq!(
        warned.len(),
        2,
        "the loss and the refused completion: {warned:?}"
    );
}

/// an operator's cancel of a running task reaches its handler cooperatively: the handler
/// is not interrupted, but at the next heartbeat `lease_lost()` completes inside it (and
/// `is_lease_lost()` turns true); whatever it returns then is refused, so the task stays
/// cancelled, counted as a lost lease and a stale completion.
pub async fn engine_tells_a_running_handler_of_an_operator_cancel<H: Harness>(ctx: &Ctx<H>) {
    let started = Arc::new(tokio::sync::Notify::new());
    let learned: Arc<Mutex<Option<(Duration, bool)>>> = Arc::default();
    let handler = {
        let (started, learned) = (Arc::clone(&started), Arc::clone(&learned));
        handler_fn(move |_task: Task| {
            let (started, learned) = (Arc::clone(&started), Arc::clone(&learned));
            async move {
                assert!(!backstop_core::is_lease_lost());
                started.notify_one();
                let t0 = Instant::now();
                tokio::select! {
                    _ = backstop_core::lease_lost() => {
                        *learned.lock().unwrap() = Some((t0.elapsed(), backstop_core::is_lease_lost()));
                        Ok(()) // a success that must not be applied
                    }
                    _ = tokio::time::sleep(PATIENCE) => Err(HandlerError::retry("never told")),
                }
            }
        })
    };
    let config = fast_config().heartbeat_interval(Duration::from_millis(100));
    let engine = Engine::builder(ctx.store.clone())
        .config(config)
        .handler("LONG", handler, opts())
        .start()
        .unwrap();
    let wait = started.notified();
    let (enq, _) = engine
        .enqueue(engine.task("LONG", "cancel-me"))
        .await
        .unwrap();
    wait.await;
    assert_eq!(ctx.task(enq.id).await.status, Status::Running);
    let t = ctx
        .store
        .cancel(
            enq.id,
            &backstop_core::Audit::new("ops", "stop the mailing"),
        )
        .await
        .unwrap();
    assert_eq!(t.status, Status::Cancelled);
    eventually("the handler to learn of the cancel", || async {
        learned.lock().unwrap().is_some()
    })
    .await;
    let (after, flag) = learned.lock().unwrap().unwrap();
    assert!(flag, "is_lease_lost() is true once lease_lost() completed");
    assert!(
        after < Duration::from_secs(5),
        "learned at a heartbeat, not at the end: {after:?}"
    );
    eventually("the refused completion to be counted", || async {
        engine.counters().stale_completions == 1
    })
    .await;
    assert_eq!(engine.counters().leases_lost, 1);
    let t = ctx.task(enq.id).await;
    assert_eq!(
        (t.status, t.attempts),
        (Status::Cancelled, 1),
        "the outcome was not applied"
    );
    assert!(!backstop_core::is_lease_lost(), "false outside an attempt");
    engine.shutdown().await;
}

/// An engine on `store` whose `LONG` tasks each run `ms` milliseconds, recorded in `calls`.
fn long_runner<S: TaskStore + Clone>(
    store: S,
    config: EngineConfig,
    calls: &Calls,
    ms: u64,
) -> Engine<S> {
    Engine::builder(store)
        .config(config)
        .handler(
            "LONG",
            sleepy(calls.clone(), Duration::from_millis(ms)),
            opts(),
        )
        .start()
        .unwrap()
}

/// Enqueue one `LONG` task (business key `long`) through `engine` and wait until its
/// handler runs: its id, and the task as claimed.
async fn start_long<H: Harness, S: TaskStore + Clone>(
    ctx: &Ctx<H>,
    engine: &Engine<S>,
    calls: &Calls,
) -> (backstop_core::Enqueued, Task) {
    let (enq, _) = engine.enqueue(engine.task("LONG", "long")).await.unwrap();
    eventually("the task to start", || async { calls.count("long") == 1 }).await;
    let before = ctx.task(enq.id).await;
    (enq, before)
}

/// `fast_config` with leases dead after 1 s, refreshed every 200 ms.
fn one_second_leases() -> EngineConfig {
    fast_config()
        .dead_after(Duration::from_millis(1000))
        .heartbeat_interval(Duration::from_millis(200))
}
