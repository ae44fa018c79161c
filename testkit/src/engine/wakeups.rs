//! Wake-ups across processes: a task committed by one process starts in another's engine
//! without waiting for a poll, and a lost wake-up is recovered by the reconnect poll; an
//! operator's cancel of a running task reaches its handler without waiting for a heartbeat.
//!
//! "Process" A and B are two stores with their own connections and two engines, each
//! with its own notifier (as separate processes would have). B's poller does not poll
//! within a case (first poll and interval an hour away), so whatever runs in B was woken.

use super::*;
use crate::TxPath;
use backstop_core::{Audit, Cancelled, Notifier, QueueChange};

/// B's settings: no poll within the case.
fn idle_config() -> EngineConfig {
    fast_config().first_poll_delay(HOUR).poll_interval(HOUR)
}

/// Process A: an engine that handles none of the tasks it enqueues (an API instance),
/// on its own store, announcing through its own notifier.
async fn process_a<H: Harness>(ctx: &Ctx<H>, notifier: Arc<dyn Notifier>) -> Engine<H::Store> {
    Engine::builder(ctx.new_store().await)
        .config(idle_config())
        .handler("A_ONLY", succeeding(&Calls::default()), opts())
        .notifier(notifier)
        .start()
        .unwrap()
}

/// Process A (see [`process_a`]) and process B: an idle engine on a store of its own
/// handling `WOKEN`, listening; returned once B's listener is subscribed. `None` when the
/// notifier's server is missing (printed).
async fn processes<H: Harness>(
    ctx: &Ctx<H>,
    case: &str,
) -> Option<(Engine<H::Store>, Engine<H::Store>, Calls)> {
    let na = ctx.notifier(&ctx.store, case).await?;
    let nb = ctx.notifier(&ctx.store, case).await?;
    let a = process_a(ctx, na).await;
    let calls = Calls::default();
    let b = Engine::builder(ctx.new_store().await)
        .config(idle_config())
        .handler("WOKEN", succeeding(&calls), opts())
        .notifier(nb)
        .start()
        .unwrap();
    until_listening(&a, &calls).await;
    Some((a, b, calls))
}

/// Enqueue probes through A until B runs one: B's listener is subscribed.
async fn until_listening<S: TaskStore + Clone>(a: &Engine<S>, calls: &Calls) {
    let deadline = Instant::now() + PATIENCE;
    for i in 0.. {
        let key = format!("probe-{i}");
        let (_, run) = a.enqueue(a.task("WOKEN", &key)).await.unwrap();
        assert_eq!(run, RunAhead::NoHandler);
        let until = Instant::now() + Duration::from_millis(200);
        while Instant::now() < until {
            if calls.count(&key) > 0 {
                return;
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        assert!(
            Instant::now() < deadline,
            "B never woke for a probe within {PATIENCE:?}"
        );
    }
}

/// Enqueue `WOKEN` probes through store `a` (given a notifier) until B runs one: B's
/// listener hears what `a` announces.
async fn until_heard<S: TaskStore>(a: &S, calls: &Calls) {
    let deadline = Instant::now() + PATIENCE;
    for i in 0.. {
        let key = format!("probe-{i}");
        a.enqueue(NewTask::new("WOKEN", &key)).await.unwrap();
        let until = Instant::now() + Duration::from_millis(200);
        while Instant::now() < until {
            if calls.count(&key) > 0 {
                return;
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        assert!(Instant::now() < deadline, "B never heard A's store");
    }
}

/// wake-ups: a task enqueued by process A starts in process B's engine within
/// milliseconds though B's poller is an hour away; B claimed it with a poll of its event
/// type, or by id when the announcement named it (PostgreSQL's, inside the enqueue
/// transaction) and B's last claim of the type came back short (one attempt either way),
/// and A announced it (A does not handle the type).
pub async fn engine_starts_a_task_committed_by_another_process_without_a_poll<H: Harness>(
    ctx: &Ctx<H>,
) {
    let Some((a, b, calls)) = processes(
        ctx,
        "engine_starts_a_task_committed_by_another_process_without_a_poll",
    )
    .await
    else {
        return;
    };
    let before = b.counters();

    let mut slowest = Duration::ZERO;
    for i in 0..5 {
        let key = format!("woken-{i}");
        let t0 = Instant::now();
        let (e, run) = a.enqueue(a.task("WOKEN", &key)).await.unwrap();
        assert_eq!(run, RunAhead::NoHandler);
        eventually("B to start the task", || async { calls.count(&key) == 1 }).await;
        slowest = slowest.max(calls.times(&key)[0] - t0);
        let t = wait_status(b.store(), e.id, Status::Succeeded).await;
        assert_eq!(t.attempts, 1);
        assert_eq!(t.owner.as_deref(), Some(b.owner().as_str()));
        // apart by more than any announcement window
        tokio::time::sleep(Duration::from_millis(30)).await;
    }
    // a database round trip or two, not a poll interval (an hour); generous for CI
    assert!(
        slowest < Duration::from_secs(2),
        "slowest start {slowest:?}"
    );
    let after = b.counters();
    assert_eq!(
        after.polled + after.woken_claims - before.polled - before.woken_claims,
        5,
        "B claimed each by a woken poll or by id: {after:?}"
    );
    assert_eq!(after.run_ahead, 0);
    assert!(after.wakeups - before.wakeups >= 5, "{after:?}");
    assert!(a.counters().notified >= 5, "{:?}", a.counters());
    assert_eq!(a.counters().notifier_errors, 0);
    a.shutdown().await;
    b.shutdown().await;
}

/// wake-ups: a task that became due with no announcement left to come (it was
/// announced while not yet due) is found when B's listener loses its connection and
/// reconnects: the reconnect polls every event type at once, not at the next tick.
pub async fn engine_polls_at_once_after_its_listener_reconnects<H: Harness>(ctx: &Ctx<H>) {
    let Some((a, b, calls)) =
        processes(ctx, "engine_polls_at_once_after_its_listener_reconnects").await
    else {
        return;
    };

    let (e, _) = a
        .enqueue(a.task("WOKEN", "later").delay(HOUR))
        .await
        .unwrap();
    // B was woken for it but found it not due; made due now, nothing announces it
    tokio::time::sleep(Duration::from_millis(500)).await;
    ctx.backdate(e.id, TimeColumn::NextRunAt, HOUR).await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(calls.count("later"), 0, "nothing should have run it yet");
    let t = ctx.task(e.id).await;
    assert_eq!((t.status, t.attempts), (Status::Pending, 0));

    // A has done its part. Stopped, so its own reconnect's poll does not run beside B's:
    // a SKIP LOCKED claim passes over a row another claim's scan holds for a moment (its
    // range's boundary record), and B would find nothing until its tick, an hour away.
    a.shutdown().await;
    let errors = b.counters().notifier_errors;
    ctx.harness.cut_listeners(&ctx.db).await;
    let deadline = Instant::now() + PATIENCE;
    let t = loop {
        let t = ctx.task(e.id).await;
        if t.status == Status::Succeeded {
            break t;
        }
        assert!(
            Instant::now() < deadline,
            "B did not run the task within {PATIENCE:?} of the cut: {t:?}; B: {:?}",
            b.counters()
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    };
    assert_eq!(t.attempts, 1);
    assert_eq!(t.owner.as_deref(), Some(b.owner().as_str()));
    assert!(
        b.counters().notifier_errors > errors,
        "B's listener should have seen its connection cut"
    );
    b.shutdown().await;
}

/// in-process wake-ups: a retry this instance scheduled runs when it is due, not at the
/// next tick (an hour away here), and so does a delayed task it enqueued.
pub async fn engine_runs_its_retries_and_delayed_tasks_when_due<H: Harness>(ctx: &Ctx<H>) {
    let calls = Calls::default();
    let handler = recording(calls.clone(), |n, task| async move {
        if n == 1 && task.biz_key == "retried" {
            Err(HandlerError::retry_after(
                Duration::from_millis(300),
                "come back in 300 ms",
            ))
        } else {
            Ok(())
        }
    });
    let engine = Engine::builder(ctx.store.clone())
        .config(idle_config())
        .handler("SOON", handler, opts())
        .start()
        .unwrap();
    let (retried, run) = engine
        .enqueue(engine.task("SOON", "retried"))
        .await
        .unwrap();
    assert_eq!(run, RunAhead::Started);
    let t = wait_status(&ctx.store, retried.id, Status::Succeeded).await;
    assert_eq!(t.attempts, 2);
    let times = calls.times("retried");
    let gap = times[1] - times[0];
    assert!(
        gap >= Duration::from_millis(300) && gap < Duration::from_secs(5),
        "retry ran {gap:?} after the first attempt"
    );

    let t0 = Instant::now();
    let (delayed, run) = engine
        .enqueue(
            engine
                .task("SOON", "delayed")
                .delay(Duration::from_millis(300)),
        )
        .await
        .unwrap();
    assert_eq!(run, RunAhead::NotClaimed);
    let t = wait_status(&ctx.store, delayed.id, Status::Succeeded).await;
    assert_eq!(t.attempts, 1);
    let ran = calls.times("delayed")[0] - t0;
    assert!(
        ran >= Duration::from_millis(300) && ran < Duration::from_secs(5),
        "the delayed task ran after {ran:?}"
    );
    let c = engine.counters();
    assert_eq!((c.run_ahead, c.polled, c.retried), (1, 2, 1), "{c:?}");
    engine.shutdown().await;
}

/// wake-ups: a batch (`Engine::enqueue_many`) process A does not run is announced, once
/// per event type, and starts in process B without a poll: each task once, claimed by B's
/// woken polls; a delayed task of the batch is not started.
pub async fn engine_enqueue_many_announces_what_it_does_not_run<H: Harness>(ctx: &Ctx<H>) {
    let Some((a, b, calls)) =
        processes(ctx, "engine_enqueue_many_announces_what_it_does_not_run").await
    else {
        return;
    };
    let notified = a.counters().notified;
    let mut tasks: Vec<NewTask> = (0..20)
        .map(|i| a.task("WOKEN", format!("many-{i}")))
        .collect();
    tasks.push(a.task("WOKEN", "many-later").delay(HOUR));
    let got = a.enqueue_many(&tasks).await.unwrap();
    assert!(got.iter().all(|e| e.created));
    eventually("B to start the batch", || {
        let calls = calls.clone();
        async move { (0..20).all(|i| calls.count(&format!("many-{i}")) == 1) }
    })
    .await;
    for e in &got[..20] {
        let t = wait_status(b.store(), e.id, Status::Succeeded).await;
        assert_eq!(t.attempts, 1);
        assert_eq!(t.owner.as_deref(), Some(b.owner().as_str()));
    }
    assert_eq!(
        a.counters().notified - notified,
        1,
        "one announcement for the type"
    );
    a.shutdown().await;
    b.shutdown().await;
    assert_eq!(calls.count("many-later"), 0);
    for i in 0..20 {
        assert_eq!(calls.count(&format!("many-{i}")), 1, "many-{i} ran once");
    }
}

/// Store A given a notifier, with no engine in its process (an API instance), and
/// process B: an idle engine on a store of its own handling `WOKEN`, listening;
/// returned once B hears what A's store announces. `None` when the backend has no
/// notifier for `case`.
async fn store_and_listener<H: Harness>(
    ctx: &Ctx<H>,
    case: &str,
) -> Option<(H::Store, Engine<H::Store>, Calls)> {
    let (Some(na), Some(nb)) = (
        ctx.notifier(&ctx.store, case).await,
        ctx.notifier(&ctx.store, case).await,
    ) else {
        return None;
    };
    let a = ctx.new_store_with(ctx.config.clone().notifier(na)).await;
    let calls = Calls::default();
    let b = Engine::builder(ctx.new_store().await)
        .config(idle_config())
        .handler("WOKEN", succeeding(&calls), opts())
        .notifier(nb)
        .start()
        .unwrap();
    until_heard(&a, &calls).await;
    Some((a, b, calls))
}

/// A store given a notifier (`StoreConfig::notifier`) announces what every enqueue path
/// commits, with no engine in its process (an API instance): an enqueue, a batch, and an
/// enqueue on the caller's transaction along every path each start at once in B's idle
/// engine (B never polls within the case); a transaction rolled back and a delayed task
/// are not run.
pub async fn engine_store_with_a_notifier_announces_every_enqueue_path<H: Harness>(ctx: &Ctx<H>) {
    const CASE: &str = "engine_store_with_a_notifier_announces_every_enqueue_path";
    let Some((a, b, calls)) = store_and_listener(ctx, CASE).await else {
        return;
    };
    let ran = |key: String| {
        let calls = calls.clone();
        async move {
            let until = Instant::now() + Duration::from_secs(10);
            while Instant::now() < until {
                if calls.count(&key) > 0 {
                    return true;
                }
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
            false
        }
    };
    a.enqueue(NewTask::new("WOKEN", "one")).await.unwrap();
    assert!(ran("one".into()).await, "an enqueue woke B");
    a.enqueue_many(&[NewTask::new("WOKEN", "m1"), NewTask::new("WOKEN", "m2")])
        .await
        .unwrap();
    assert!(
        ran("m2".into()).await && ran("m1".into()).await,
        "a batch woke B"
    );
    for path in TxPath::ALL {
        let key = format!("tx-{path}");
        ctx.enqueue_in_tx_on(&a, path, &key, NewTask::new("WOKEN", &key), true)
            .await
            .unwrap();
        assert!(
            ran(key).await,
            "{path}: a commit on the caller's transaction woke B"
        );
    }
    let rolled = ctx
        .enqueue_in_tx_on(&a, TxPath::Native, "rb", NewTask::new("WOKEN", "rb"), false)
        .await
        .unwrap();
    let later = a
        .enqueue(NewTask::new("WOKEN", "later").delay(HOUR))
        .await
        .unwrap();
    // what was woken for ran; give a stray announcement time to be acted on
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!((calls.count("rb"), calls.count("later")), (0, 0));
    assert!(ctx
        .store
        .get(rolled.id)
        .await
        .unwrap()
        .is_none_or(|t| t.biz_key != "rb"));
    assert_eq!(ctx.task(later.id).await.status, Status::Pending);
    b.shutdown().await;
}

/// A single enqueue's announcement names its task (`Wake::task_message`: PostgreSQL's
/// `NOTIFY` in the enqueue transaction, Redis after commit), and an engine whose last
/// claim of the type came back short claims that task by id: B's first claim (the poll
/// of its listener's connect) drained `WOKEN`, so three tasks enqueued through A one at a
/// time start in B by id, none by a poll; a batch is announced by type and polled.
/// Tasks that became due without an announcement are not claimed ahead of their turn by
/// such a wake-up: they stay pending until a poll, and every task runs once.
pub async fn engine_claims_a_task_its_announcement_names_by_id<H: Harness>(ctx: &Ctx<H>) {
    const CASE: &str = "engine_claims_a_task_its_announcement_names_by_id";
    let Some((a, b, calls)) = store_and_listener(ctx, CASE).await else {
        return;
    };
    let before = b.counters();
    for key in ["x1", "x2", "x3"] {
        let e = a.enqueue(NewTask::new("WOKEN", key)).await.unwrap();
        eventually("B to start it", || async { calls.count(key) == 1 }).await;
        let t = wait_status(b.store(), e.id, Status::Succeeded).await;
        assert_eq!(t.attempts, 1);
        // apart by more than any announcement window's share
        tokio::time::sleep(Duration::from_millis(30)).await;
    }
    let c = b.counters().since(&before);
    assert_eq!((c.woken_claims, c.polled), (3, 0), "each by id: {c:?}");

    a.enqueue_many(&[NewTask::new("WOKEN", "m1"), NewTask::new("WOKEN", "m2")])
        .await
        .unwrap();
    eventually("B to start the batch", || async {
        calls.count("m1") == 1 && calls.count("m2") == 1
    })
    .await;
    let c = b.counters().since(&before);
    assert_eq!(
        (c.woken_claims, c.polled),
        (3, 2),
        "a batch is polled: {c:?}"
    );

    // due without an announcement (enqueued for later, then made due), then one
    // announced
    let mut old = Vec::new();
    for key in ["old1", "old2", "old3"] {
        let task = NewTask::new("WOKEN", key).delay(HOUR);
        old.push(ctx.store.enqueue(task).await.unwrap().id);
    }
    tokio::time::sleep(Duration::from_millis(200)).await;
    for id in &old {
        ctx.backdate(*id, TimeColumn::NextRunAt, HOUR).await;
    }
    a.enqueue(NewTask::new("WOKEN", "new")).await.unwrap();
    eventually("B to start the named task", || async {
        calls.count("new") == 1
    })
    .await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    for id in &old {
        let t = ctx.task(*id).await;
        assert_eq!((t.status, t.attempts), (Status::Pending, 0), "{t:?}");
    }
    b.poll_now();
    for id in &old {
        let t = wait_status(b.store(), *id, Status::Succeeded).await;
        assert_eq!(t.attempts, 1);
    }
    tokio::time::sleep(Duration::from_millis(200)).await;
    for key in ["x1", "x2", "x3", "m1", "m2", "old1", "old2", "old3", "new"] {
        assert_eq!(calls.count(key), 1, "{key} ran once");
    }
    let c = b.counters().since(&before);
    assert_eq!((c.woken_claims, c.polled), (4, 5), "{c:?}");
    b.shutdown().await;
}

/// wake-ups by id, one claim at a time: while B's claim by id of a named task is under
/// way (held at the gate: the database slow to answer), the named announcements of two
/// more tasks poll their type instead of claiming by id, and that poll starts all three;
/// the held claim then finds its task taken and claims nothing. One claim by id reached
/// the store for three named announcements (where every announcement spawned its own,
/// the two later tasks would wait at the gate too), and each task ran once.
pub async fn engine_claims_one_named_task_at_a_time<H: Harness>(ctx: &Ctx<H>) {
    const CASE: &str = "engine_claims_one_named_task_at_a_time";
    let (Some(na), Some(nb)) = (
        ctx.notifier(&ctx.store, CASE).await,
        ctx.notifier(&ctx.store, CASE).await,
    ) else {
        return;
    };
    let a = ctx.new_store_with(ctx.config.clone().notifier(na)).await;
    let calls = Calls::default();
    let gate = Gate::shut(ctx.new_store().await, Gated::ClaimById);
    gate.open();
    let b = Engine::builder(gate.clone())
        .config(idle_config())
        .handler("WOKEN", succeeding(&calls), opts())
        .notifier(nb)
        .start()
        .unwrap();
    // heard, and drained: the probes' claims came back short
    until_heard(&a, &calls).await;
    let before = b.counters();
    gate.shut_again();
    let at_gate = gate.arrived_so_far();

    a.enqueue(NewTask::new("WOKEN", "n1")).await.unwrap();
    gate.arrived(at_gate + 1).await;
    for key in ["n2", "n3"] {
        // apart by more than any announcement window's share
        tokio::time::sleep(Duration::from_millis(30)).await;
        a.enqueue(NewTask::new("WOKEN", key)).await.unwrap();
    }
    eventually("B's poll to start all three", || async {
        ["n1", "n2", "n3"].iter().all(|k| calls.count(k) == 1)
    })
    .await;
    assert_eq!(
        gate.arrived_so_far(),
        at_gate + 1,
        "one claim by id for three named announcements"
    );
    gate.open();
    eventually("the held claim to end", || async {
        b.counters().since(&before).polled >= 2
    })
    .await;
    tokio::time::sleep(Duration::from_millis(200)).await;
    for key in ["n1", "n2", "n3"] {
        assert_eq!(calls.count(key), 1, "{key} ran once");
    }
    let c = b.counters().since(&before);
    assert_eq!(
        c.woken_claims, 0,
        "the held claim found its task taken: {c:?}"
    );
    b.shutdown().await;
}

/// A store given a notifier announces a queue change that may let tasks start: with
/// `WOKEN` paused through A, a task enqueued through A does not start in B (B's claim
/// passes the paused type by); A's resume starts it in B at once, though B never polls
/// within the case (without the announcement it would wait for B's next poll, an hour
/// away).
pub async fn engine_store_with_a_notifier_announces_a_resume<H: Harness>(ctx: &Ctx<H>) {
    const CASE: &str = "engine_store_with_a_notifier_announces_a_resume";
    let Some((a, b, calls)) = store_and_listener(ctx, CASE).await else {
        return;
    };

    let audit = Audit::new("ops", "resume announced");
    a.set_queue("WOKEN", QueueChange::Pause, &audit)
        .await
        .unwrap();
    let held = a.enqueue(NewTask::new("WOKEN", "held")).await.unwrap();
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(calls.count("held"), 0, "paused: not started");
    assert_eq!(ctx.task(held.id).await.status, Status::Pending);

    a.set_queue("WOKEN", QueueChange::Resume, &audit)
        .await
        .unwrap();
    let until = Instant::now() + Duration::from_secs(10);
    while calls.count("held") == 0 && Instant::now() < until {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    assert_eq!(calls.count("held"), 1, "the resume woke B");
    b.shutdown().await;
}

/// prompt cancel: an operator's cancel of a running task, made on a store of another
/// process (given a notifier; PostgreSQL's store also `NOTIFY`s on its own), reaches the
/// handler in B's engine through B's notifier, though B's heartbeat is an hour away:
/// `cancelled()` completes with `LeaseLost` within seconds, the task is cancelled with
/// its one attempt, B counts one lost lease. B checks the lease the news names: a stray
/// announcement for a task it runs under a current lease refreshes that lease (B's
/// heartbeat of it) and tells the handler nothing, and one for a task it does not run
/// does nothing. A stuck running task reset by `manual_reset` while its holder lives
/// reaches the handler the same way; it stays pending, its attempt unspent.
pub async fn engine_hears_an_operators_cancel_of_a_running_task_at_once<H: Harness>(ctx: &Ctx<H>) {
    const CASE: &str = "engine_hears_an_operators_cancel_of_a_running_task_at_once";
    let (Some(na), Some(nb)) = (
        ctx.notifier(&ctx.store, CASE).await,
        ctx.notifier(&ctx.store, CASE).await,
    ) else {
        return;
    };
    let a = ctx
        .new_store_with(ctx.config.clone().notifier(Arc::clone(&na)))
        .await;
    let told: Arc<Mutex<HashMap<String, (Cancelled, Instant)>>> = Arc::default();
    let (started_tx, mut started) = tokio::sync::mpsc::unbounded_channel::<String>();
    let long = {
        let told = Arc::clone(&told);
        handler_fn(move |task: Task| {
            let (told, started_tx) = (Arc::clone(&told), started_tx.clone());
            async move {
                let cx = backstop_core::Context::current().unwrap();
                let _ = started_tx.send(task.biz_key.clone());
                let why = cx.cancelled().await;
                told.lock()
                    .unwrap()
                    .insert(task.biz_key.clone(), (why, Instant::now()));
                Err(HandlerError::retry(format!("stopped: {why}")))
            }
        })
    };
    let calls = Calls::default();
    let b = Engine::builder(ctx.new_store().await)
        .config(idle_config().dead_after(4 * HOUR).heartbeat_interval(HOUR))
        .handler("WOKEN", succeeding(&calls), opts())
        .handler("LONG", long, opts())
        .notifier(nb)
        .start()
        .unwrap();
    until_heard(&a, &calls).await;
    let mut ids = HashMap::new();
    for key in ["cancelled", "reset"] {
        let e = a.enqueue(NewTask::new("LONG", key)).await.unwrap();
        ids.insert(key, e.id);
        let got = tokio::time::timeout(PATIENCE, started.recv()).await;
        assert_eq!(got.ok().flatten().as_deref(), Some(key), "B woke for {key}");
    }
    let lost_before = b.counters().leases_lost;

    // news of a task B does not run: nothing happens
    let later = a
        .enqueue(NewTask::new("LONG", "later").delay(HOUR))
        .await
        .unwrap();
    a.cancel(later.id, &Audit::new("op", "not needed"))
        .await
        .unwrap();
    // stray news of a task B runs under a current lease: B heartbeats it, that is all
    ctx.backdate(ids["reset"], TimeColumn::UpdatedAt, 2 * HOUR)
        .await;
    let old = ctx.task(ids["reset"]).await.updated_at;
    na.notify_revoked(ids["reset"]).await.unwrap();
    eventually(
        "B to check the lease a stray announcement names",
        || async { ctx.task(ids["reset"]).await.updated_at > old + chrono_dur(HOUR) },
    )
    .await;

    // the cancel of a task B runs reaches its handler
    let t0 = Instant::now();
    a.cancel(ids["cancelled"], &Audit::new("op", "stop it"))
        .await
        .unwrap();
    eventually("the handler to hear of the cancel", || async {
        told.lock().unwrap().contains_key("cancelled")
    })
    .await;
    let (why, at) = told.lock().unwrap()["cancelled"];
    assert_eq!(why, Cancelled::LeaseLost);
    let took = at - t0;
    // a round trip or two (B's heartbeat is an hour away); generous for a loaded CI
    assert!(took < Duration::from_secs(5), "the cancel took {took:?}");
    let t = ctx.task(ids["cancelled"]).await;
    assert_eq!((t.status, t.attempts), (Status::Cancelled, 1));

    // a stuck task reset while its holder lives: the same
    ctx.backdate(ids["reset"], TimeColumn::UpdatedAt, 2 * HOUR)
        .await;
    let reset = a.manual_reset(ids["reset"], HOUR).await.unwrap();
    assert_eq!((reset.status, reset.attempts), (Status::Pending, 0));
    eventually("the handler to hear of the reset", || async {
        told.lock().unwrap().contains_key("reset")
    })
    .await;
    assert_eq!(told.lock().unwrap()["reset"].0, Cancelled::LeaseLost);
    assert_eq!(b.counters().leases_lost - lost_before, 2);
    assert_eq!(told.lock().unwrap().len(), 2, "the stray news told nobody");
    b.shutdown().await;
    // the refused outcome of the reset task's attempt changed nothing
    let t = ctx.task(ids["reset"]).await;
    assert_eq!((t.status, t.attempts), (Status::Pending, 0));
    assert_eq!(ctx.task(later.id).await.status, Status::Cancelled);
}
