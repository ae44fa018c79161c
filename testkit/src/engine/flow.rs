//! Flow control on a running fleet: a paused event type starts nothing on any instance,
//! however its tasks arrive, and runs everything once resumed.

use super::*;
use crate::ledger::Ledger;
use backstop_core::{Audit, QueueChange};
use chrono::Utc;
use std::sync::atomic::{AtomicUsize, Ordering};

/// Two engines (separate stores) handle `PZ`; it is paused. Tasks enqueued through an
/// engine (run-ahead) and straight into the store (the poller's) are not started over
/// many polls: run-ahead answers `NotClaimed`, no handler runs, every task is pending
/// with no attempt spent. Resumed, every task runs exactly once (one attempt each), and
/// a type never paused runs throughout.
pub async fn engine_paused_type_starts_nothing_until_resumed<H: Harness>(ctx: &Ctx<H>) {
    const TASKS: usize = 20;
    let calls = Calls::default();
    let start = |store| {
        Engine::builder(store)
            .config(fast_config().first_poll_delay(Duration::from_millis(20)))
            .handler("PZ", flaky(calls.clone(), 0), opts())
            .handler("FREE", flaky(calls.clone(), 0), opts())
            .start()
            .unwrap()
    };
    let (a, b) = (start(ctx.new_store().await), start(ctx.new_store().await));
    let audit = Audit::new("ops", "hold PZ");
    ctx.store
        .set_queue("PZ", QueueChange::Pause, &audit)
        .await
        .unwrap();
    let mut ids = Vec::new();
    for i in 0..TASKS {
        let task = NewTask::new("PZ", format!("p{i}"));
        if i % 2 == 0 {
            let (e, ran) = a.enqueue(task).await.unwrap();
            assert_eq!(ran, RunAhead::NotClaimed, "p{i}: paused, not run ahead");
            ids.push(e.id);
        } else {
            ids.push(ctx.store.enqueue(task).await.unwrap().id);
        }
    }
    // a type that is not paused runs meanwhile: both pollers are live
    let free = ctx.store.enqueue(NewTask::new("FREE", "f1")).await.unwrap();
    wait_status(&ctx.store, free.id, Status::Succeeded).await;
    tokio::time::sleep(Duration::from_millis(400)).await;
    let free = ctx.store.enqueue(NewTask::new("FREE", "f2")).await.unwrap();
    wait_status(&ctx.store, free.id, Status::Succeeded).await;
    for (i, id) in ids.iter().enumerate() {
        let t = ctx.task(*id).await;
        assert_eq!(
            (t.status, t.attempts, t.lease),
            (Status::Pending, 0, 0),
            "p{i} untouched while paused"
        );
        assert_eq!(calls.count(&format!("p{i}")), 0, "p{i} not run");
    }
    let polled = a.counters().polled + b.counters().polled;
    assert_eq!(
        polled, 2,
        "the pollers claimed the two FREE tasks, nothing of PZ"
    );

    ctx.store
        .set_queue("PZ", QueueChange::Resume, &Audit::new("ops", "go"))
        .await
        .unwrap();
    for (i, id) in ids.iter().enumerate() {
        let t = wait_status(&ctx.store, *id, Status::Succeeded).await;
        assert_eq!(t.attempts, 1, "p{i}");
    }
    for i in 0..TASKS {
        assert_eq!(calls.count(&format!("p{i}")), 1, "p{i} ran once");
    }
    a.shutdown().await;
    b.shutdown().await;
}

/// A handler's delay past the store's limit (`limits::MAX_INTERVAL`, 365 days) —
/// `retry_after` or `snooze` of 400 days — is cut to the limit: the task is pending, due
/// in 365 days (a retry spent its attempt, a snooze gave it back and counted), and a
/// task finishing beside it in the same batch of marks is recorded as always; no store
/// error.
pub async fn engine_handler_delay_past_the_limit_is_cut_to_it<H: Harness>(ctx: &Ctx<H>) {
    use backstop_core::limits::MAX_INTERVAL;
    let far = Duration::from_secs(400 * 24 * 3600);
    let calls = Calls::default();
    let handler = recording(calls.clone(), move |_, task: Task| async move {
        match task.biz_key.as_str() {
            "far-retry" => Err(HandlerError::retry_after(far, "come back next year")),
            "far-snooze" => Err(HandlerError::snooze(far, "not before next year")),
            _ => Ok(()),
        }
    });
    let engine = Engine::builder(ctx.store.clone())
        .config(fast_config().first_poll_delay(Duration::ZERO))
        .handler("LONG", handler, opts())
        .start()
        .unwrap();
    let before = Utc::now();
    let mut ids = Vec::new();
    for key in ["far-retry", "far-snooze", "fine"] {
        ids.push(
            ctx.store
                .enqueue(NewTask::new("LONG", key))
                .await
                .unwrap()
                .id,
        );
    }
    wait_status(&ctx.store, ids[2], Status::Succeeded).await;
    let mut got = Vec::new();
    for id in &ids[..2] {
        eventually("the far task given back", || async {
            let t = ctx.task(*id).await;
            t.status == Status::Pending && t.owner.is_none()
        })
        .await;
        got.push(ctx.task(*id).await);
    }
    let after = Utc::now();
    let limit = chrono_dur(MAX_INTERVAL);
    for t in &got {
        assert!(
            t.next_run_at >= before + limit && t.next_run_at <= after + limit,
            "{}: due at {} (the limit from {before})",
            t.biz_key,
            t.next_run_at
        );
    }
    assert_eq!(
        (got[0].attempts, got[0].snoozes),
        (1, 0),
        "a retry spent its attempt"
    );
    assert_eq!(
        (got[1].attempts, got[1].snoozes),
        (0, 1),
        "a snooze gave it back"
    );
    engine.shutdown().await;
    let k = engine.counters();
    assert_eq!(
        (k.store_errors, k.retried, k.snoozed, k.succeeded),
        (0, 1, 1, 1),
        "{k:?}"
    );
}

/// Four engines (separate stores), each with room for 8 at once, handle `CLIM`, limited
/// to 3 cluster-wide; 40 tasks wait, and the pollers tick once a minute, so only the
/// engines' own re-polls and hand-overs as tasks end can drain the type. Each handler
/// (15 ms) records its start and end in a ledger table as it runs: no instant has more
/// than 3 running across the engines, the limit is reached, every task runs exactly
/// once, and the backlog drains long before a second tick.
pub async fn engine_concurrency_limit_holds_across_engines<H: Harness>(ctx: &Ctx<H>) {
    const TASKS: usize = 40;
    const LIMIT: usize = 3;
    ctx.store
        .set_queue(
            "CLIM",
            QueueChange::Concurrency(Some(LIMIT as u32)),
            &Audit::new("ops", "three at a time"),
        )
        .await
        .unwrap();
    let mut ids = Vec::new();
    for i in 0..TASKS {
        ids.push(ctx.enqueue("CLIM", &format!("c{i}")).await);
    }
    let ledger = Ledger::create(ctx, "clim_ledger").await;
    race_engines(ctx, &ledger, "CLIM", &ids, "c", Duration::from_millis(15)).await;
    assert_eq!(
        ledger.most_running(ctx, false).await,
        LIMIT as i64,
        "at most the limit ran at once, and the limit was reached"
    );
}

/// One engine with room for 8 at once handles `HLIM`, limited to 3 cluster-wide; 30
/// tasks wait and the poller ticks once a minute. The first round's claim takes 3; from
/// then on each slot a task leaves goes to the next due task in its outcome's write
/// (`mark_and_claim`), and a hand-over that took what its marks freed (or all that was
/// due) leaves the room as it was: the engine does not poll the type for those slots.
/// The backlog drains on that one `claim_batch`, every task once, 3 at a time.
pub async fn engine_hands_limited_slots_on_without_polling<H: Harness>(ctx: &Ctx<H>) {
    const TASKS: usize = 30;
    const LIMIT: usize = 3;
    let running = Arc::new(AtomicUsize::new(0));
    let most = Arc::new(AtomicUsize::new(0));
    let calls = Calls::default();
    ctx.store
        .set_queue(
            "HLIM",
            QueueChange::Concurrency(Some(LIMIT as u32)),
            &Audit::new("ops", "three at a time"),
        )
        .await
        .unwrap();
    let mut ids = Vec::new();
    for i in 0..TASKS {
        ids.push(ctx.enqueue("HLIM", &format!("h{i}")).await);
    }
    let handler = {
        let (running, most) = (running.clone(), most.clone());
        recording(calls.clone(), move |_, _task| {
            let (running, most) = (running.clone(), most.clone());
            async move {
                let now = running.fetch_add(1, Ordering::SeqCst) + 1;
                most.fetch_max(now, Ordering::SeqCst);
                tokio::time::sleep(Duration::from_millis(10)).await;
                running.fetch_sub(1, Ordering::SeqCst);
                Ok(())
            }
        })
    };
    let gate = Gate::shut(ctx.new_store().await, Gated::Nothing);
    let config = fast_config()
        .poll_interval(Duration::from_secs(60))
        .first_poll_delay(Duration::from_millis(50));
    let engine = Engine::builder(gate.clone())
        .config(config)
        .handler("HLIM", handler, opts().concurrency(8))
        .start()
        .unwrap();
    each_ran_once(ctx, &ids, &calls, "h").await;
    engine.shutdown().await;
    assert_eq!(
        most.load(Ordering::SeqCst),
        LIMIT,
        "the limit held, and was reached"
    );
    assert_eq!(
        gate.claim_widths(),
        vec![1],
        "one claim_batch (the first round's); every later slot was handed on"
    );
}

/// A hand-over (a limited type's claim riding its marks: `mark_and_claim`) waits for
/// the type's turn, which a claim on another instance may hold for long; the other
/// types' outcomes are written meanwhile, and an engine waits on at most two hand-overs
/// at once (each holds a connection). Here every `mark_and_claim` stalls. `HW1` and
/// `HW2` (each limited to 2 at once) have 4 tasks each, `HW3` (limited to 8) and
/// `HFREE` (no limit) 4 each: the running tasks of `HW1`, then of `HW2`, end, and their
/// two hand-overs stall; then those of `HW3` and `HFREE` end and are recorded succeeded
/// while the stall lasts (`HW3`'s with no hand-over: its slots go to a poll), the
/// stalled types' tasks still running. Once it ends, every task has succeeded on its
/// first attempt, each run once.
pub async fn engine_writes_other_types_outcomes_while_a_hand_over_waits<H: Harness>(ctx: &Ctx<H>) {
    let types = [
        ("HW1", Some(2)),
        ("HW2", Some(2)),
        ("HW3", Some(8)),
        ("HFREE", None),
    ];
    let calls = Calls::default();
    let gate = Gate::shut(ctx.new_store().await, Gated::HandOver);
    let mut engine = Engine::builder(gate.clone())
        .config(fast_config().first_poll_delay(Duration::from_millis(20)));
    let mut ids = Vec::new();
    let mut go = Vec::new();
    for (t, (event_type, limit)) in types.into_iter().enumerate() {
        if let Some(limit) = limit {
            let audit = Audit::new("ops", "limited");
            let limit = QueueChange::Concurrency(Some(limit));
            ctx.store
                .set_queue(event_type, limit, &audit)
                .await
                .unwrap();
        }
        let mut of_type = Vec::new();
        for i in 0..4 {
            of_type.push(ctx.enqueue(event_type, &format!("t{t}-{i}")).await);
        }
        ids.push(of_type);
        // the type's handlers end when the case lets them
        let open = tokio::sync::watch::Sender::new(false);
        let ended = open.subscribe();
        let handler = recording(calls.clone(), move |_, _task| {
            let mut ended = ended.clone();
            async move {
                ended.wait_for(|open| *open).await.unwrap();
                Ok(())
            }
        });
        go.push(open);
        engine = engine.handler(event_type, handler, opts().concurrency(8));
    }
    let engine = engine.start().unwrap();
    eventually("2 + 2 + 4 + 4 tasks running", || async {
        let all = statuses(ctx, ids.iter().flatten()).await;
        all.iter().filter(|s| **s == Status::Running).count() == 12
    })
    .await;
    go[0].send_replace(true);
    gate.arrived(1).await;
    go[1].send_replace(true);
    gate.arrived(2).await;
    go[2].send_replace(true);
    go[3].send_replace(true);
    eventually("every HW3 and HFREE task recorded succeeded", || async {
        let done = statuses(ctx, ids[2].iter().chain(&ids[3])).await;
        done.iter().all(|s| *s == Status::Succeeded)
    })
    .await;
    for (t, stalled) in ids[..2].iter().enumerate() {
        let mut held = statuses(ctx, stalled).await;
        held.sort();
        assert_eq!(
            held,
            vec![
                Status::Pending,
                Status::Pending,
                Status::Running,
                Status::Running
            ],
            "HW{}: the hand-over's two tasks stay running while it waits; two wait their turn",
            t + 1
        );
    }
    gate.open();
    for (t, of_type) in ids.iter().enumerate() {
        each_ran_once(ctx, of_type, &calls, &format!("t{t}-")).await;
    }
    engine.shutdown().await;
}

/// A limited type's outcome does not wait behind other types' outcomes: it goes to the
/// type's hand-over at once, while every plain `mark` stalls (the flusher's batches
/// under a backlog take seconds each on a busy database, and the type's slot is held
/// until its outcome is written). `MFREE`'s task ends first and its mark stalls; then
/// `MLIM`'s (limited to 1 at once) three tasks run one after another, each handed its
/// slot by the previous one's outcome, all recorded succeeded while the stall lasts,
/// `MFREE`'s task still running. Once it ends, every task has succeeded, each run once.
pub async fn engine_writes_a_limited_types_outcome_while_other_outcomes_wait<H: Harness>(
    ctx: &Ctx<H>,
) {
    let calls = Calls::default();
    let audit = Audit::new("ops", "limited");
    ctx.store
        .set_queue("MLIM", QueueChange::Concurrency(Some(1)), &audit)
        .await
        .unwrap();
    let free = ctx.enqueue("MFREE", "free-0").await;
    let mut limited = Vec::new();
    for i in 0..3 {
        limited.push(ctx.enqueue("MLIM", &format!("lim-{i}")).await);
    }
    // the limited type's handlers end when the case lets them
    let open = tokio::sync::watch::Sender::new(false);
    let ended = open.subscribe();
    let gate = Gate::shut(ctx.new_store().await, Gated::PlainMark);
    let engine = Engine::builder(gate.clone())
        .config(fast_config().first_poll_delay(Duration::from_millis(20)))
        .handler("MFREE", flaky(calls.clone(), 0), opts())
        .handler(
            "MLIM",
            recording(calls.clone(), move |_, _task| {
                let mut ended = ended.clone();
                async move {
                    ended.wait_for(|open| *open).await.unwrap();
                    Ok(())
                }
            }),
            opts(),
        )
        .start()
        .unwrap();
    gate.arrived(1).await;
    eventually("the first MLIM task running", || async {
        statuses(ctx, &limited).await.contains(&Status::Running)
    })
    .await;
    open.send_replace(true);
    eventually("every MLIM task recorded succeeded", || async {
        let done = statuses(ctx, &limited).await;
        done.iter().all(|s| *s == Status::Succeeded)
    })
    .await;
    assert_eq!(
        ctx.task(free).await.status,
        Status::Running,
        "MFREE's outcome still stalled"
    );
    gate.open();
    wait_status(&ctx.store, free, Status::Succeeded).await;
    each_ran_once(ctx, &limited, &calls, "lim-").await;
    each_ran_once(ctx, &[free], &calls, "free-").await;
    engine.shutdown().await;
}

/// Four engines (separate stores), each with room for 8 at once, handle `RLIM`, limited
/// to 3 starts a second cluster-wide; 9 tasks wait, and the pollers tick once a minute,
/// so only the engines' own re-polls as their claims leave the window can drain the
/// type. Each handler records its start in a ledger table: no interval of a second
/// (less 300 ms for a claim's way to its handler) holds more than 3 starts, every task
/// runs exactly once, the rate held the engines back (the last start at least two
/// windows after the first), and the backlog drained long before a second tick.
pub async fn engine_rate_limit_holds_across_engines<H: Harness>(ctx: &Ctx<H>) {
    const TASKS: usize = 9;
    const RATE: usize = 3;
    const WINDOW: Duration = Duration::from_secs(1);
    ctx.store
        .set_queue(
            "RLIM",
            QueueChange::Rate(Some(backstop_core::RateLimit::new(RATE as u32, WINDOW))),
            &Audit::new("ops", "three a second"),
        )
        .await
        .unwrap();
    let mut ids = Vec::new();
    for i in 0..TASKS {
        ids.push(ctx.enqueue("RLIM", &format!("r{i}")).await);
    }
    let ledger = Ledger::create(ctx, "rlim_ledger").await;
    race_engines(ctx, &ledger, "RLIM", &ids, "r", Duration::ZERO).await;
    let span = WINDOW - Duration::from_millis(300);
    let most = ledger.most_started_within(ctx, span).await;
    assert!(most <= RATE as i64, "{most} starts within {span:?}");
    let took = ledger.span(ctx).await;
    assert!(
        took >= 2 * WINDOW - Duration::from_millis(300),
        "9 starts at 3 a second span two windows, took {took:?}"
    );
}

/// Four engines (separate stores), each with room for 8 at once, handle `PLIM`, limited
/// to 1 running per tenant, partitioned; 6 tasks of each of 3 tenants wait, and the
/// pollers tick once a minute. Each handler (15 ms) records its start and end, with its
/// tenant, in a ledger table: no tenant ever has 2 running across the engines, the
/// tenants ran side by side (more than one running at some instant), and every task
/// runs exactly once.
pub async fn engine_partitioned_limit_holds_across_engines<H: Harness>(ctx: &Ctx<H>) {
    const TASKS: usize = 18;
    let audit = Audit::new("ops", "one per tenant");
    let store = &ctx.store;
    store
        .set_queue("PLIM", QueueChange::Concurrency(Some(1)), &audit)
        .await
        .unwrap();
    store
        .set_queue("PLIM", QueueChange::Partition(true), &audit)
        .await
        .unwrap();
    let mut ids = Vec::new();
    for i in 0..TASKS {
        let task = NewTask::new("PLIM", format!("p{i}")).partition(format!("tenant-{}", i % 3));
        ids.push(store.enqueue(task).await.unwrap().id);
    }
    let ledger = Ledger::create(ctx, "plim_ledger").await;
    race_engines(ctx, &ledger, "PLIM", &ids, "p", Duration::from_millis(15)).await;
    assert_eq!(
        ledger.most_running(ctx, true).await,
        1,
        "one per tenant at once"
    );
    let all = ledger.most_running(ctx, false).await;
    assert!(
        all >= 2,
        "the tenants ran side by side: at most {all} at once"
    );
}

/// Four engines (separate stores) race on `event_type`, each with room for 8 at once,
/// pollers ticking once a minute; each handler records its run (with its task's
/// partition key) in `ledger` and works `work`. Returns once each of `ids` succeeded on
/// its first attempt and the handler ran each of the keys `{prefix}0…` once, the
/// engines shut down, and the ledger holds every run's end.
async fn race_engines<H: Harness>(
    ctx: &Ctx<H>,
    ledger: &Ledger,
    event_type: &str,
    ids: &[TaskId],
    prefix: &str,
    work: Duration,
) {
    let calls = Calls::default();
    ledger
        .serve_until(ctx, async {
            let mut engines = Vec::new();
            for _ in 0..4 {
                let record = ledger.recorder();
                let handler = recording(calls.clone(), move |_, task: Task| {
                    let record = record.clone();
                    async move {
                        let key = task.partition.clone().unwrap_or_default();
                        record.started(task.id, &key).await;
                        tokio::time::sleep(work).await;
                        record.ended(task.id).await;
                        Ok(())
                    }
                });
                let poll = Duration::from_secs(60);
                engines.push(engine_of(ctx, event_type, handler, poll).await);
            }
            each_ran_once(ctx, ids, &calls, prefix).await;
            for e in engines {
                e.shutdown().await;
            }
        })
        .await;
    assert_eq!(
        ledger.ended(ctx).await,
        ids.len() as i64,
        "every run in the ledger"
    );
}

/// An engine on a store of its own, handling `event_type` with room for 8 at once, its
/// poller ticking every `poll`.
async fn engine_of<H: Harness>(
    ctx: &Ctx<H>,
    event_type: &str,
    handler: impl Handler,
    poll: Duration,
) -> Engine<H::Store> {
    let config = fast_config()
        .poll_interval(poll)
        .first_poll_delay(Duration::from_millis(50));
    Engine::builder(ctx.new_store().await)
        .config(config)
        .handler(event_type, handler, opts().concurrency(8))
        .start()
        .unwrap()
}

/// The status of each of `ids`.
async fn statuses<'a, H: Harness>(
    ctx: &Ctx<H>,
    ids: impl IntoIterator<Item = &'a TaskId>,
) -> Vec<Status> {
    let mut all = Vec::new();
    for id in ids {
        all.push(ctx.task(*id).await.status);
    }
    all
}

/// Each of `ids` succeeded on its first attempt, and the handler ran each of the keys
/// `{prefix}0…` once.
async fn each_ran_once<H: Harness>(ctx: &Ctx<H>, ids: &[TaskId], calls: &Calls, prefix: &str) {
    for id in ids {
        let t = wait_status(&ctx.store, *id, Status::Succeeded).await;
        assert_eq!(t.attempts, 1, "task {id}");
    }
    for i in 0..ids.len() {
        assert_eq!(
            calls.count(&format!("{prefix}{i}")),
            1,
            "{prefix}{i} ran once"
        );
    }
}
