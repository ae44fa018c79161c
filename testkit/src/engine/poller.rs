//! The poller: the safety net, across instances, bounded while marks stall.

use super::*;

/// a crash between commit and run_now loses nothing: the poller finds the task.
pub async fn engine_poller_finds_a_task_committed_before_a_crash<H: Harness>(ctx: &Ctx<H>) {
    let enq = ctx
        .enqueue_in_tx("order-9", NewTask::new("PAY", "o9"), true)
        .await
        .unwrap();
    // ... the process died here, before run_now. A new instance starts:
    let calls = Calls::default();
    let engine = Engine::builder(ctx.new_store().await)
        .config(fast_config())
        .handler("PAY", flaky(calls.clone(), 0), opts())
        .start()
        .unwrap();
    let t = wait_status(&ctx.store, enq.id, Status::Succeeded).await;
    assert_eq!(t.attempts, 1);
    assert_eq!(calls.count("o9"), 1);
    let c = engine.counters();
    assert_eq!((c.run_ahead, c.polled), (0, 1));
    engine.shutdown().await;
}

/// the poller claims only event types this instance handles.
pub async fn engine_only_claims_event_types_it_handles<H: Harness>(ctx: &Ctx<H>) {
    let other = ctx.store.enqueue(NewTask::new("OTHER", "x")).await.unwrap();
    let calls = Calls::default();
    let engine = Engine::builder(ctx.store.clone())
        .config(fast_config())
        .handler("MINE", flaky(calls.clone(), 0), opts())
        .start()
        .unwrap();
    assert_eq!(engine.run_now(&other).await, RunAhead::NoHandler);
    let mine = ctx.store.enqueue(NewTask::new("MINE", "x")).await.unwrap();
    wait_status(&ctx.store, mine.id, Status::Succeeded).await;
    // several more poll rounds
    let polled = engine.counters().polled;
    let mine2 = ctx.store.enqueue(NewTask::new("MINE", "y")).await.unwrap();
    wait_status(&ctx.store, mine2.id, Status::Succeeded).await;
    assert!(engine.counters().polled > polled);
    let t = ctx.task(other.id).await;
    assert_eq!((t.status, t.attempts, t.lease), (Status::Pending, 0, 0));
    engine.shutdown().await;
}

/// two engine instances, 2,000 tasks: every task's effect applied exactly once, and no
/// task ever run by two instances at the same time.
pub async fn engine_two_instances_run_each_task_exactly_once<H: Harness>(ctx: &Ctx<H>) {
    const TASKS: usize = 2000;
    let mut producers = Vec::new();
    for p in 0..4 {
        let s = ctx.store.clone();
        producers.push(tokio::spawn(async move {
            for i in (p..TASKS).step_by(4) {
                let et = if i % 2 == 0 { "A" } else { "B" };
                s.enqueue(NewTask::new(et, format!("k{i}"))).await.unwrap();
            }
        }));
    }
    crate::joined("the producers", producers).await;
    let effects: Arc<Mutex<HashMap<String, usize>>> = Arc::default();
    let running: Arc<Mutex<HashSet<String>>> = Arc::default();
    let overlaps = Arc::new(AtomicUsize::new(0));
    let make = |instance: usize| {
        let effects = Arc::clone(&effects);
        let running = Arc::clone(&running);
        let overlaps = Arc::clone(&overlaps);
        handler_fn(move |task: Task| {
            let effects = Arc::clone(&effects);
            let running = Arc::clone(&running);
            let overlaps = Arc::clone(&overlaps);
            async move {
                if !running.lock().unwrap().insert(task.biz_key.clone()) {
                    overlaps.fetch_add(1, Ordering::SeqCst);
                }
                tokio::task::yield_now().await;
                // the idempotent effect: keyed on the business key
                *effects
                    .lock()
                    .unwrap()
                    .entry(task.biz_key.clone())
                    .or_default() += 1;
                running.lock().unwrap().remove(&task.biz_key);
                let _ = instance;
                Ok(())
            }
        })
    };
    let mut engines = Vec::new();
    for i in 0..2 {
        let store = ctx.new_store().await;
        let engine = Engine::builder(store)
            .config(fast_config())
            .handler("A", make(i), opts().concurrency(8))
            .handler("B", make(i), opts().concurrency(8))
            .start()
            .unwrap();
        engines.push(engine);
    }
    all_succeed(&ctx.store, TASKS as u64).await;
    for e in &engines {
        e.shutdown().await;
    }
    let effects = effects.lock().unwrap();
    assert_eq!(effects.len(), TASKS);
    assert!(
        effects.values().all(|n| *n == 1),
        "a handler ran twice: {:?}",
        effects
            .iter()
            .filter(|(_, n)| **n > 1)
            .take(5)
            .collect::<Vec<_>>()
    );
    assert_eq!(
        overlaps.load(Ordering::SeqCst),
        0,
        "no task ran concurrently twice"
    );
    let c0 = engines[0].counters();
    let c1 = engines[1].counters();
    assert_eq!(c0.succeeded + c1.succeeded, TASKS as u64);
    assert_eq!(c0.stale_completions + c1.stale_completions, 0);
}

/// Finished attempts waiting for their marks are bounded: while the store's marks stall,
/// the poller claims until `max_unmarked` attempts wait (plus what the executor held when
/// it last claimed: at most its capacity) and then no more — the rest stay pending,
/// untouched; once marks flow again every task completes, each run once.
pub async fn engine_stops_claiming_while_marks_stall<H: Harness>(ctx: &Ctx<H>) {
    const MAX_UNMARKED: usize = 300;
    const BATCH: usize = 20;
    const CAPACITY: usize = 16 + 48;
    let total = MAX_UNMARKED + 2 * CAPACITY;
    enqueue_bulk(ctx, "BULK", total).await;
    let ran = Arc::new(AtomicUsize::new(0));
    let handler = counting(&ran);
    let gate = Gate::shut(ctx.store.clone(), Gated::Mark);
    let engine = Engine::builder(gate.clone())
        .config(
            fast_config()
                .batch_size(BATCH)
                .max_unmarked(MAX_UNMARKED)
                .first_poll_delay(Duration::ZERO),
        )
        .handler("BULK", handler, opts().concurrency(16).queue_capacity(48))
        .start()
        .unwrap();
    eventually("claims to reach the bound", || async {
        ran.load(Ordering::SeqCst) >= MAX_UNMARKED
    })
    .await;
    // several poll intervals: the poller must not claim past the bound
    tokio::time::sleep(fast_config().poll_interval * 10).await;
    let stalled = ran.load(Ordering::SeqCst);
    assert!(
        stalled < MAX_UNMARKED + CAPACITY,
        "ran {stalled} while marks stalled; the bound is {MAX_UNMARKED} + the executor's {CAPACITY}"
    );
    let s = ctx.store.stats().await.unwrap();
    assert_eq!(s.count(Status::Running), stalled as u64, "claimed = ran");
    assert_eq!(
        s.count(Status::Pending),
        (total - stalled) as u64,
        "the rest untouched"
    );
    assert_eq!(s.count(Status::Succeeded), 0, "no mark applied yet");
    gate.open();
    eventually("every task to succeed", || async {
        ctx.store.stats().await.unwrap().count(Status::Succeeded) == total as u64
    })
    .await;
    assert_eq!(ran.load(Ordering::SeqCst), total, "each task ran once");
    assert_eq!(engine.counters().succeeded, total as u64);
    engine.shutdown().await;
}

/// An engine whose handlers outrun its store's writes claims no further ahead of them
/// than about a second of the pace its marks are written at (at least 512 waiting, two
/// batches of marks), not up to `max_unmarked` (4096 here, the default): with every
/// `mark` call taking 1 s (256 marks a second at most), at no time are more of 1200
/// instant tasks claimed than 512 + the executor's room (64) + one claim (50) + slack;
/// every task succeeds, each run once.
pub async fn engine_claims_about_a_second_of_marks_ahead<H: Harness>(ctx: &Ctx<H>) {
    const TOTAL: usize = 1200;
    const BATCH: usize = 50;
    const CAPACITY: usize = 16 + 48;
    const BOUND: u64 = (512 + CAPACITY + BATCH + 50) as u64;
    enqueue_bulk(ctx, "PACE", TOTAL).await;
    let ran = Arc::new(AtomicUsize::new(0));
    let handler = counting(&ran);
    let faults = Faults::new();
    faults.delay(&[Op::Mark], Phase::Before, Duration::from_secs(1));
    let engine = Engine::builder(ctx.store.clone().layer(FaultLayer::new(faults)))
        .config(
            fast_config()
                .batch_size(BATCH)
                .first_poll_delay(Duration::ZERO),
        )
        .handler("PACE", handler, opts().concurrency(16).queue_capacity(48))
        .start()
        .unwrap();
    let mut most = 0;
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let s = ctx.store.stats().await.unwrap();
        most = most.max(s.count(Status::Running));
        if s.count(Status::Succeeded) == TOTAL as u64 {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "every task to succeed within 60 s"
        );
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    assert!(
        most <= BOUND,
        "{most} claimed at once; the bound is 512 + the executor's {CAPACITY} + a claim of {BATCH} (+ 50)"
    );
    assert_eq!(ran.load(Ordering::SeqCst), TOTAL, "each task ran once");
    assert_eq!(engine.counters().succeeded, TOTAL as u64);
    engine.shutdown().await;
}

/// an engine registers the event types it handles; tasks of a type no engine handles
/// are reported (a warning; `backstop_unhandled_tasks`), not left waiting silently.
pub async fn engine_reports_tasks_no_engine_can_run<H: Harness>(ctx: &Ctx<H>) {
    let logs = crate::logs::capture();
    let calls = Calls::default();
    let engine = Engine::builder(ctx.store.clone())
        .config(
            fast_config()
                .first_poll_delay(Duration::ZERO)
                .gauge_interval(Duration::from_millis(50)),
        )
        .handler("KNOWN", succeeding(&calls), opts())
        .start()
        .unwrap();
    eventually("the engine to register its event types", || async {
        ctx.store
            .event_types()
            .await
            .unwrap()
            .iter()
            .any(|t| t.event_type == "KNOWN")
    })
    .await;
    ctx.store
        .enqueue(NewTask::new("KNOWN_TYPO", "lost"))
        .await
        .unwrap();
    let owner = engine.owner().to_string();
    eventually("a warning about the unhandled event type", || async {
        logs.of(&owner)
            .iter()
            .any(|m| m.contains("no engine has a handler for"))
    })
    .await;
    let warned = logs
        .of(&owner)
        .iter()
        .filter(|m| m.contains("no engine has a handler for"))
        .count();
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_eq!(
        logs.of(&owner)
            .iter()
            .filter(|m| m.contains("no engine has a handler for"))
            .count(),
        warned,
        "warned once, not at every refresh"
    );
    engine.shutdown().await;
}

/// An idle engine polls every event type it handles with one claim per tick (the
/// probe), not one per type: the database load of polling does not grow with the types
/// an engine handles. Six types, nothing due: every claim names all six.
pub async fn engine_polls_idle_types_with_one_claim_per_tick<H: Harness>(ctx: &Ctx<H>) {
    let gate = Gate::shut(ctx.store.clone(), Gated::Nothing);
    let calls = Calls::default();
    let mut builder = Engine::builder(gate.clone()).config(
        fast_config()
            .first_poll_delay(Duration::ZERO)
            .poll_interval(Duration::from_millis(50)),
    );
    for i in 0..6 {
        builder = builder.handler(format!("IDLE_{i}"), succeeding(&calls), opts());
    }
    let engine = builder.start().unwrap();
    gate.claimed(5).await;
    engine.shutdown().await;
    let widths = gate.claim_widths();
    assert!(widths.len() >= 5, "{widths:?}");
    assert!(
        widths.iter().all(|&w| w == 6),
        "every idle tick claims for all six types at once: {widths:?}"
    );
}

/// A probe that comes back full leaves the round to the claims per type, and every
/// task still runs once: four types with 30 due tasks each, claims of 10.
pub async fn engine_probe_hands_a_busy_round_to_claims_per_type<H: Harness>(ctx: &Ctx<H>) {
    let mut ids = Vec::new();
    for i in 0..4 {
        for k in 0..30 {
            let e = ctx
                .store
                .enqueue(NewTask::new(format!("BUSY_{i}"), format!("b{i}-{k}")))
                .await
                .unwrap();
            ids.push(e.id);
        }
    }
    let gate = Gate::shut(ctx.store.clone(), Gated::Nothing);
    let calls = Calls::default();
    let mut builder = Engine::builder(gate.clone()).config(
        fast_config()
            .first_poll_delay(Duration::ZERO)
            .batch_size(10),
    );
    for i in 0..4 {
        builder = builder.handler(format!("BUSY_{i}"), succeeding(&calls), opts());
    }
    let engine = builder.start().unwrap();
    for id in &ids {
        wait_status(&ctx.store, *id, Status::Succeeded).await;
    }
    engine.shutdown().await;
    for i in 0..4 {
        for k in 0..30 {
            let key = format!("b{i}-{k}");
            assert_eq!(calls.count(&key), 1, "task {key} ran once");
        }
    }
    let widths = gate.claim_widths();
    assert_eq!(
        widths.first(),
        Some(&4),
        "the first claim probes all four types"
    );
    assert!(
        widths.contains(&1),
        "a full probe hands the round to the claims per type: {widths:?}"
    );
}

/// `total` tasks of `event_type` (business keys `k0`…), enqueued by 8 producers at once.
async fn enqueue_bulk<H: Harness>(ctx: &Ctx<H>, event_type: &'static str, total: usize) {
    let producers: Vec<_> = (0..8)
        .map(|p| {
            let store = ctx.store.clone();
            tokio::spawn(async move {
                for i in (p..total).step_by(8) {
                    store
                        .enqueue(NewTask::new(event_type, format!("k{i}")))
                        .await
                        .unwrap();
                }
            })
        })
        .collect();
    crate::joined("the producers", producers).await;
}

/// A handler that succeeds at once and counts its runs in `ran`.
fn counting(ran: &Arc<AtomicUsize>) -> impl Handler {
    let ran = Arc::clone(ran);
    handler_fn(move |_task: Task| {
        ran.fetch_add(1, Ordering::SeqCst);
        async { Ok::<_, HandlerError>(()) }
    })
}
