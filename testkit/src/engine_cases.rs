//! The engine's conformance cases: the same engine on every backend, with real
//! concurrency, short intervals and backdating instead of fixed sleeps.

use std::collections::{HashMap, HashSet};
use std::future::Future;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use backstop_core::{
    handler_fn, Archive, BoxError, Engine, EngineConfig, ErrorKind, Handler, HandlerError,
    HandlerOptions, Json, JsonHandler, NewTask, Owner, RetryPolicy, RunAhead, Status, Task, TaskId,
    TaskStore,
};
use tokio::sync::Semaphore;

use crate::{chrono_dur, Ctx, Harness, TimeColumn};

const HOUR: Duration = Duration::from_secs(3600);
/// How long a case waits for something the engine should do within milliseconds.
const PATIENCE: Duration = Duration::from_secs(20);

/// Settings for tests: a poller that polls every 20 ms, starting 300 ms after start (so a
/// case's first run-ahead is not raced by the first poll), no retention.
pub fn fast_config() -> EngineConfig {
    EngineConfig {
        poll_interval: Duration::from_millis(20),
        first_poll_delay: Duration::from_millis(300),
        dead_after: Duration::from_secs(60),
        heartbeat_interval: Duration::from_millis(200),
        shutdown_grace: Duration::from_secs(10),
        retention: None,
        ..EngineConfig::default()
    }
}

/// The same, but with a poller that does not poll within a test's lifetime: whatever runs
/// ran ahead.
pub fn no_poll_config() -> EngineConfig {
    EngineConfig {
        first_poll_delay: HOUR,
        ..fast_config()
    }
}

/// Wait until `cond` holds, checking every 10 ms; panic after `PATIENCE`.
pub async fn eventually<F, Fut>(what: &str, mut cond: F)
where
    F: FnMut() -> Fut,
    Fut: Future<Output = bool>,
{
    let deadline = Instant::now() + PATIENCE;
    loop {
        if cond().await {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "timed out after {PATIENCE:?} waiting for: {what}"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

async fn wait_status<S: TaskStore>(store: &S, id: TaskId, status: Status) -> Task {
    let deadline = Instant::now() + PATIENCE;
    loop {
        let t = store.get(id).await.unwrap().unwrap();
        if t.status == status {
            return t;
        }
        assert!(
            Instant::now() < deadline,
            "timed out after {PATIENCE:?} waiting for task {id} to be {status}; it is {t:?}"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// Calls of a handler, per business key, with when they started.
#[derive(Clone, Default)]
pub struct Calls(Arc<Mutex<HashMap<String, Vec<Instant>>>>);

impl Calls {
    fn record(&self, key: &str) -> usize {
        let mut m = self.0.lock().unwrap();
        let v = m.entry(key.to_owned()).or_default();
        v.push(Instant::now());
        v.len()
    }
    fn count(&self, key: &str) -> usize {
        self.0.lock().unwrap().get(key).map_or(0, Vec::len)
    }
    fn times(&self, key: &str) -> Vec<Instant> {
        self.0.lock().unwrap().get(key).cloned().unwrap_or_default()
    }
}

/// A handler that records each call in `calls`, then runs `then(call number for this
/// business key, task)`.
fn recording<F, Fut>(calls: Calls, then: F) -> impl Handler
where
    F: Fn(usize, Task) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Result<(), HandlerError>> + Send + 'static,
{
    let then = Arc::new(then);
    handler_fn(move |task: Task| {
        let calls = calls.clone();
        let then = Arc::clone(&then);
        async move {
            let n = calls.record(&task.biz_key);
            then(n, task).await
        }
    })
}

/// A handler that fails its first `failures` calls per key, then succeeds.
fn flaky(calls: Calls, failures: usize) -> impl Handler {
    recording(calls, move |n, _task| async move {
        if n <= failures {
            Err(HandlerError::retry(format!("downstream down (call {n})")))
        } else {
            Ok(())
        }
    })
}

/// A handler that waits for a permit of `gate` on every call.
fn gated(calls: Calls, gate: &Arc<Semaphore>) -> impl Handler {
    let gate = Arc::clone(gate);
    recording(calls, move |_, _task| {
        let gate = Arc::clone(&gate);
        async move {
            gate.acquire().await.unwrap().forget();
            Ok(())
        }
    })
}

/// A handler that records each call in `calls` and succeeds.
fn succeeding(calls: &Calls) -> impl Handler {
    recording(calls.clone(), |_, _| async { Ok(()) })
}

/// A handler that takes `d` on every call.
fn sleepy(calls: Calls, d: Duration) -> impl Handler {
    recording(calls, move |_, _task| async move {
        tokio::time::sleep(d).await;
        Ok(())
    })
}

fn opts() -> HandlerOptions {
    HandlerOptions::default()
}

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
    assert_eq!(engine.run_now(&enq).await.unwrap(), RunAhead::Started);
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

/// retries: the backoff is honoured between attempts, and a retry never runs ahead.
pub async fn engine_retries_with_backoff_then_succeeds<H: Harness>(ctx: &Ctx<H>) {
    let calls = Calls::default();
    let backoff = Duration::from_millis(300);
    let engine = Engine::builder(ctx.store.clone())
        .config(fast_config())
        .handler(
            "PAY",
            flaky(calls.clone(), 2),
            opts().retry(RetryPolicy::fixed(5, backoff)),
        )
        .start()
        .unwrap();
    let (enq, run) = engine.enqueue(engine.task("PAY", "o1")).await.unwrap();
    assert_eq!(run, RunAhead::Started);
    eventually("first attempt to fail", || async {
        let t = ctx.store.get(enq.id).await.unwrap().unwrap();
        t.status == Status::Pending && t.attempts == 1
    })
    .await;
    assert_eq!(
        engine.run_now(&enq).await.unwrap(),
        RunAhead::NotClaimed,
        "a retry waits for its backoff; it is not run ahead"
    );
    let t = wait_status(&ctx.store, enq.id, Status::Succeeded).await;
    assert_eq!(t.attempts, 3);
    assert_eq!(t.last_error, None);
    let times = calls.times("o1");
    assert_eq!(times.len(), 3);
    for w in times.windows(2) {
        let gap = w[1] - w[0];
        assert!(
            gap + Duration::from_millis(5) >= backoff,
            "attempts {gap:?} apart, backoff is {backoff:?}"
        );
    }
    let c = engine.counters();
    assert_eq!((c.retried, c.succeeded, c.failed), (2, 1, 0));
    engine.shutdown().await;
}

/// attempts exhausted → failed; an operator's reset runs it again to success.
pub async fn engine_fails_after_max_attempts_then_reset_runs_again<H: Harness>(ctx: &Ctx<H>) {
    let fixed = Arc::new(AtomicBool::new(false));
    let calls = Calls::default();
    let handler = {
        let fixed = Arc::clone(&fixed);
        recording(calls.clone(), move |_, _task| {
            let ok = fixed.load(Ordering::SeqCst);
            async move {
                if ok {
                    Ok(())
                } else {
                    Err(HandlerError::retry("contract service rejects the request"))
                }
            }
        })
    };
    let engine = Engine::builder(ctx.store.clone())
        .config(fast_config())
        .handler(
            "CONTRACT",
            handler,
            opts().retry(RetryPolicy::fixed(3, Duration::from_millis(10))),
        )
        .start()
        .unwrap();
    let (enq, _) = engine.enqueue(engine.task("CONTRACT", "c1")).await.unwrap();
    let t = wait_status(&ctx.store, enq.id, Status::Failed).await;
    assert_eq!(t.attempts, 3);
    assert_eq!(t.owner, None);
    assert_eq!(
        t.last_error.as_deref(),
        Some("contract service rejects the request")
    );
    assert_eq!(calls.count("c1"), 3);
    // counted once (a count of 2 would time out here too)
    eventually("the failure to be counted once", || async {
        engine.counters().failed == 1
    })
    .await;
    assert_eq!(engine.counters().failed, 1);
    fixed.store(true, Ordering::SeqCst);
    let reset = ctx.store.manual_reset(enq.id, HOUR).await.unwrap();
    assert_eq!((reset.status, reset.attempts), (Status::Pending, 0));
    engine.poll_now();
    let t = wait_status(&ctx.store, enq.id, Status::Succeeded).await;
    assert_eq!(t.attempts, 1);
    assert_eq!(calls.count("c1"), 4);
    engine.shutdown().await;
}

/// pre_check_skip: the business is already done → succeeded without running.
pub async fn engine_pre_check_skip_marks_success_without_running<H: Harness>(ctx: &Ctx<H>) {
    struct AlreadyDone(Calls);
    #[backstop_core::async_trait]
    impl Handler for AlreadyDone {
        async fn handle(&self, task: &Task) -> Result<(), HandlerError> {
            self.0.record(&task.biz_key);
            Ok(())
        }
        async fn pre_check_skip(&self, task: &Task) -> Result<bool, HandlerError> {
            Ok(task.biz_key.starts_with("done-"))
        }
    }
    let calls = Calls::default();
    let engine = Engine::builder(ctx.store.clone())
        .config(no_poll_config())
        .handler("PAY", AlreadyDone(calls.clone()), opts())
        .start()
        .unwrap();
    let (a, _) = engine.enqueue(engine.task("PAY", "done-1")).await.unwrap();
    let (b, _) = engine.enqueue(engine.task("PAY", "new-1")).await.unwrap();
    let ta = wait_status(&ctx.store, a.id, Status::Succeeded).await;
    wait_status(&ctx.store, b.id, Status::Succeeded).await;
    assert_eq!(ta.attempts, 1);
    assert_eq!(calls.count("done-1"), 0, "skipped: handle never ran");
    assert_eq!(calls.count("new-1"), 1);
    let c = engine.counters();
    assert_eq!((c.skipped, c.succeeded), (1, 2));
    engine.shutdown().await;
}

/// a panic in a handler is caught and retried like an error.
pub async fn engine_catches_a_panicking_handler_and_retries<H: Harness>(ctx: &Ctx<H>) {
    let calls = Calls::default();
    let handler = recording(calls.clone(), |n, _task| async move {
        if n == 1 {
            panic!("boom in the handler");
        }
        Ok(())
    });
    let engine = Engine::builder(ctx.store.clone())
        .config(fast_config())
        .handler(
            "PAY",
            handler,
            opts().retry(RetryPolicy::fixed(3, Duration::from_millis(300))),
        )
        .start()
        .unwrap();
    let (enq, _) = engine.enqueue(engine.task("PAY", "p1")).await.unwrap();
    eventually("the panic to be recorded as a retry", || async {
        let t = ctx.store.get(enq.id).await.unwrap().unwrap();
        t.status == Status::Pending && t.attempts == 1
    })
    .await;
    let t = ctx.task(enq.id).await;
    assert_eq!(
        t.last_error.as_deref(),
        Some("handler panicked: boom in the handler")
    );
    let t = wait_status(&ctx.store, enq.id, Status::Succeeded).await;
    assert_eq!(t.attempts, 2);
    let c = engine.counters();
    assert_eq!((c.panics, c.retried, c.succeeded), (1, 1, 1));
    engine.shutdown().await;
}

/// an attempt over its timeout is abandoned and retried.
pub async fn engine_times_out_a_slow_handler_and_retries<H: Harness>(ctx: &Ctx<H>) {
    let calls = Calls::default();
    let finished_slow = Arc::new(AtomicBool::new(false));
    let handler = {
        let finished_slow = Arc::clone(&finished_slow);
        recording(calls.clone(), move |n, _task| {
            let finished_slow = Arc::clone(&finished_slow);
            async move {
                if n == 1 {
                    tokio::time::sleep(Duration::from_secs(30)).await;
                    finished_slow.store(true, Ordering::SeqCst);
                }
                Ok(())
            }
        })
    };
    let engine = Engine::builder(ctx.store.clone())
        .config(fast_config())
        .handler(
            "PAY",
            handler,
            opts()
                .timeout(Duration::from_millis(150))
                .retry(RetryPolicy::fixed(3, Duration::from_millis(300))),
        )
        .start()
        .unwrap();
    let (enq, _) = engine.enqueue(engine.task("PAY", "slow")).await.unwrap();
    eventually("the timeout to be recorded as a retry", || async {
        let t = ctx.store.get(enq.id).await.unwrap().unwrap();
        t.status == Status::Pending && t.attempts == 1
    })
    .await;
    assert_eq!(
        ctx.task(enq.id).await.last_error.as_deref(),
        Some("timed out after 150ms")
    );
    let t = wait_status(&ctx.store, enq.id, Status::Succeeded).await;
    assert_eq!(t.attempts, 2);
    assert!(
        !finished_slow.load(Ordering::SeqCst),
        "the slow attempt was abandoned"
    );
    assert_eq!(engine.counters().timeouts, 1);
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
        .config(EngineConfig {
            poll_interval: Duration::from_millis(50),
            ..fast_config()
        })
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

/// a duplicate enqueue never runs the task twice.
pub async fn engine_duplicate_enqueue_never_runs_twice<H: Harness>(ctx: &Ctx<H>) {
    let calls = Calls::default();
    let engine = Engine::builder(ctx.store.clone())
        .config(no_poll_config())
        .handler("PAY", flaky(calls.clone(), 0), opts())
        .start()
        .unwrap();
    let (first, r1) = engine.enqueue(engine.task("PAY", "k")).await.unwrap();
    wait_status(&ctx.store, first.id, Status::Succeeded).await;
    let (second, r2) = engine.enqueue(engine.task("PAY", "k")).await.unwrap();
    assert_eq!((r1, r2), (RunAhead::Started, RunAhead::Duplicate));
    assert_eq!((second.id, second.created), (first.id, false));
    // even while the first is still pending (not yet run)
    let p = ctx.store.enqueue(NewTask::new("PAY", "k2")).await.unwrap();
    let dup = ctx.store.enqueue(NewTask::new("PAY", "k2")).await.unwrap();
    assert_eq!(engine.run_now(&dup).await.unwrap(), RunAhead::Duplicate);
    assert_eq!(engine.run_now(&p).await.unwrap(), RunAhead::Started);
    wait_status(&ctx.store, p.id, Status::Succeeded).await;
    assert_eq!(engine.run_now(&p).await.unwrap(), RunAhead::NotClaimed);
    assert_eq!((calls.count("k"), calls.count("k2")), (1, 1));
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

/// the poller claims only event types this instance handles.
pub async fn engine_only_claims_event_types_it_handles<H: Harness>(ctx: &Ctx<H>) {
    let other = ctx.store.enqueue(NewTask::new("OTHER", "x")).await.unwrap();
    let calls = Calls::default();
    let engine = Engine::builder(ctx.store.clone())
        .config(fast_config())
        .handler("MINE", flaky(calls.clone(), 0), opts())
        .start()
        .unwrap();
    assert_eq!(engine.run_now(&other).await.unwrap(), RunAhead::NoHandler);
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

/// a payload that does not decode is a permanent failure that says why.
pub async fn engine_undecodable_payload_fails_permanently<H: Harness>(ctx: &Ctx<H>) {
    #[derive(serde::Deserialize)]
    #[allow(dead_code)]
    struct Pay {
        order_id: u64,
    }
    struct PayHandler(Calls);
    #[backstop_core::async_trait]
    impl JsonHandler for PayHandler {
        type Payload = Pay;
        async fn handle(&self, pay: Pay, _task: &Task) -> Result<(), HandlerError> {
            self.0.record(&pay.order_id.to_string());
            Ok(())
        }
    }
    let calls = Calls::default();
    let engine = Engine::builder(ctx.store.clone())
        .config(no_poll_config())
        .handler("PAY", Json(PayHandler(calls.clone())), opts())
        .start()
        .unwrap();
    let (good, _) = engine
        .enqueue(
            engine
                .task("PAY", "g")
                .json(&serde_json::json!({"order_id": 7})),
        )
        .await
        .unwrap();
    let (bad, _) = engine
        .enqueue(
            engine
                .task("PAY", "b")
                .json(&serde_json::json!({"order": "x"})),
        )
        .await
        .unwrap();
    wait_status(&ctx.store, good.id, Status::Succeeded).await;
    let t = wait_status(&ctx.store, bad.id, Status::Failed).await;
    assert_eq!(t.attempts, 1, "no retries for a permanent failure");
    let err = t.last_error.unwrap();
    assert!(
        err.contains("payload does not decode") && err.contains("order_id"),
        "{err}"
    );
    assert_eq!(calls.count("7"), 1);
    engine.shutdown().await;
}

/// a handler's retry-after overrides the backoff, exactly.
pub async fn engine_retry_after_overrides_the_backoff<H: Harness>(ctx: &Ctx<H>) {
    let engine = Engine::builder(ctx.store.clone())
        .config(no_poll_config())
        .handler(
            "PAY",
            handler_fn(|_task: Task| async move {
                Err(HandlerError::retry_after(
                    Duration::from_secs(42),
                    "429 from the bank",
                ))
            }),
            opts(),
        )
        .start()
        .unwrap();
    let (enq, _) = engine.enqueue(engine.task("PAY", "k")).await.unwrap();
    let t = wait_status(&ctx.store, enq.id, Status::Pending).await;
    let t = if t.attempts == 0 {
        eventually("the attempt to be recorded", || async {
            ctx.store.get(enq.id).await.unwrap().unwrap().attempts == 1
        })
        .await;
        ctx.task(enq.id).await
    } else {
        t
    };
    assert_eq!(t.last_error.as_deref(), Some("429 from the bank"));
    assert_eq!(
        t.next_run_at - t.updated_at,
        chrono_dur(Duration::from_secs(42))
    );
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
    for p in producers {
        p.await.unwrap();
    }
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
    eventually("all 2000 tasks to succeed", || async {
        ctx.store.stats().await.unwrap().count(Status::Succeeded) == TASKS as u64
    })
    .await;
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

/// heartbeats keep a task that runs longer than `dead_after` alive: it is never recycled
/// or run twice while its instance lives.
pub async fn engine_heartbeats_keep_a_long_task_alive<H: Harness>(ctx: &Ctx<H>) {
    let calls = Calls::default();
    let long = |calls: Calls| sleepy(calls, Duration::from_millis(2500));
    let config = EngineConfig {
        dead_after: Duration::from_secs(1),
        heartbeat_interval: Duration::from_millis(100),
        ..fast_config()
    };
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

/// the poller recycles a task whose worker died (no heartbeat for longer than
/// `dead_after`) and runs it again: attempt 2, owned by this instance, succeeded, counted
/// as recycled once; a running task that is still fresh is left alone.
pub async fn engine_poller_recycles_a_dead_task_and_runs_it_again<H: Harness>(ctx: &Ctx<H>) {
    let dead = ctx.enqueue("PAY", "dead").await;
    let alive = ctx.enqueue("PAY", "alive").await;
    // both claimed by a worker (ctx.owner) that then dies; one of them long ago
    ctx.grab(dead).await;
    ctx.grab(alive).await;
    let config = EngineConfig {
        owner: Some(Owner::new("successor").unwrap()),
        dead_after: Duration::from_secs(60),
        ..fast_config()
    };
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
    let config = EngineConfig {
        owner: Some(Owner::new("successor").unwrap()),
        poll_interval: HOUR,
        first_poll_delay: Duration::ZERO,
        recycle_batch: SWEEP,
        dead_after: Duration::from_secs(60),
        ..fast_config()
    };
    let mut ids = Vec::new();
    for i in 0..DEAD {
        let id = ctx.enqueue("PAY", &format!("dead{i}")).await;
        ctx.grab(id).await;
        ctx.backdate(
            id,
            TimeColumn::UpdatedAt,
            config.dead_after + Duration::from_secs(5),
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
    gate.grabbed(1).await;
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

/// a late completion by a worker whose task was recycled and claimed again is refused by
/// the lease and counted; the successor's claim is untouched.
pub async fn engine_refuses_a_late_completion_after_recycle<H: Harness>(ctx: &Ctx<H>) {
    let gate = Arc::new(Semaphore::new(0));
    let calls = Calls::default();
    let handler = gated(calls.clone(), &gate);
    // heartbeats far apart: the instance looks dead (a long GC pause, a partition)
    let engine = Engine::builder(ctx.store.clone())
        .config(EngineConfig {
            dead_after: 2 * HOUR,
            heartbeat_interval: HOUR,
            ..no_poll_config()
        })
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
        .grab_by_id(enq.id, &Owner::new("successor").unwrap())
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
        .list(&backstop_core::TaskFilter {
            limit: 1000,
            ..Default::default()
        })
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
        .config(EngineConfig {
            shutdown_grace: Duration::from_millis(200),
            ..no_poll_config()
        })
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
/// `ShuttingDown`; a duplicate's run-ahead touches no store while it runs).
async fn until_shutting_down<S: TaskStore + Clone>(engine: &Engine<S>, event_type: &str) {
    let probe = backstop_core::Enqueued {
        id: 0,
        created: false,
        event_type: event_type.to_owned(),
    };
    eventually("shutdown to begin", || async {
        engine.run_now(&probe).await.unwrap() == RunAhead::ShuttingDown
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
async fn shut_down_across_the_gate<S: TaskStore + Clone>(
    engine: &Engine<Gate<S>>,
    gate: &Gate<S>,
    event_type: &str,
) {
    let stopping = tokio::spawn({
        let engine = engine.clone();
        async move { engine.shutdown().await }
    });
    until_shutting_down(engine, event_type).await;
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
    let gate = Gate::shut(ctx.store.clone(), Gated::GrabBatch);
    let engine = Engine::builder(gate.clone())
        .config(EngineConfig {
            first_poll_delay: Duration::ZERO,
            ..fast_config()
        })
        .handler("WORK", succeeding(&calls), opts())
        .start()
        .unwrap();
    gate.arrived(1).await;
    shut_down_across_the_gate(&engine, &gate, "WORK").await;
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
    let gate = Gate::shut(ctx.store.clone(), Gated::GrabById);
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
    shut_down_across_the_gate(&engine, &gate, "WORK").await;
    assert_eq!(running_ahead.await.unwrap().unwrap(), RunAhead::Started);
    assert_given_back(ctx, enq.id, &calls).await;
    let c = engine.counters();
    assert_eq!((c.run_ahead, c.released), (1, 1), "{c:?}");
}

/// retention purges old succeeded tasks in batches, after the archive has seen them.
pub async fn engine_retention_archives_then_purges_old_succeeded_tasks<H: Harness>(ctx: &Ctx<H>) {
    struct Keep(Arc<Mutex<Vec<TaskId>>>);
    #[backstop_core::async_trait]
    impl Archive for Keep {
        async fn archive(&self, tasks: &[Task]) -> Result<(), BoxError> {
            assert!(tasks.iter().all(|t| t.status == Status::Succeeded));
            self.0.lock().unwrap().extend(tasks.iter().map(|t| t.id));
            Ok(())
        }
    }
    let mut old = Vec::new();
    for i in 0..7 {
        let id = ctx.enqueue("E", &format!("old{i}")).await;
        let l = ctx.grab(id).await.lease();
        assert!(backstop_core::TaskStoreExt::mark_success(&ctx.store, l)
            .await
            .unwrap());
        ctx.backdate(id, TimeColumn::UpdatedAt, 2 * HOUR).await;
        old.push(id);
    }
    let fresh = ctx.enqueue("E", "fresh").await;
    let l = ctx.grab(fresh).await.lease();
    backstop_core::TaskStoreExt::mark_success(&ctx.store, l)
        .await
        .unwrap();
    let failed = ctx.enqueue("E", "failed").await;
    let l = ctx.grab(failed).await.lease();
    backstop_core::TaskStoreExt::mark_fail(&ctx.store, l, "x")
        .await
        .unwrap();
    ctx.backdate(failed, TimeColumn::UpdatedAt, 2 * HOUR).await;

    let archived = Arc::new(Mutex::new(Vec::new()));
    let engine = Engine::builder(ctx.store.clone())
        .config(EngineConfig {
            retention: Some(HOUR),
            purge_interval: Duration::from_millis(50),
            purge_batch: 3,
            ..fast_config()
        })
        .handler("E", flaky(Calls::default(), 0), opts())
        .archive(Keep(Arc::clone(&archived)))
        .start()
        .unwrap();
    eventually("old succeeded tasks to be purged", || async {
        ctx.store.stats().await.unwrap().count(Status::Succeeded) == 1
    })
    .await;
    engine.shutdown().await;
    let mut got = archived.lock().unwrap().clone();
    got.sort();
    assert_eq!(got, old, "each purged task archived once");
    for id in &old {
        assert!(ctx.store.get(*id).await.unwrap().is_none());
    }
    assert!(ctx.store.get(fresh).await.unwrap().is_some());
    assert!(ctx.store.get(failed).await.unwrap().is_some());
}

/// bad engine settings are refused at start with a Config error.
pub async fn engine_refuses_bad_configuration<H: Harness>(ctx: &Ctx<H>) {
    let h = || flaky(Calls::default(), 0);
    let start = |cfg: EngineConfig, handlers: Vec<(&str, HandlerOptions)>| {
        let mut b = Engine::builder(ctx.store.clone()).config(cfg);
        for (et, o) in handlers {
            b = b.handler(et, h(), o);
        }
        b.start().map(|_| ())
    };
    type Case<'a> = (EngineConfig, Vec<(&'a str, HandlerOptions)>, &'a str);
    let cases: Vec<Case> = vec![
        (fast_config(), vec![], "at least one handler"),
        (
            fast_config(),
            vec![("A", opts()), ("A", opts())],
            "two handlers",
        ),
        (fast_config(), vec![("bad type", opts())], "event_type"),
        (
            fast_config(),
            vec![("A", opts().concurrency(0))],
            "concurrency",
        ),
        (
            fast_config(),
            vec![("A", opts().timeout(Duration::ZERO))],
            "timeout",
        ),
        (
            EngineConfig {
                heartbeat_interval: Duration::from_secs(100),
                dead_after: Duration::from_secs(180),
                ..fast_config()
            },
            vec![("A", opts())],
            "at most half of dead_after",
        ),
        (
            EngineConfig {
                batch_size: 0,
                ..fast_config()
            },
            vec![("A", opts())],
            "batch_size",
        ),
        (
            EngineConfig {
                poll_interval: Duration::ZERO,
                ..fast_config()
            },
            vec![("A", opts())],
            "poll_interval",
        ),
    ];
    for (cfg, handlers, needle) in cases {
        match start(cfg, handlers) {
            Ok(()) => panic!("expected a Config error mentioning {needle:?}"),
            Err(e) => {
                assert_eq!(e.kind(), ErrorKind::Config, "{e}");
                assert!(
                    e.to_string().contains(needle),
                    "{e} should mention {needle:?}"
                );
            }
        }
    }
}

/// The store call a [`Gate`] holds back.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Gated {
    /// `mark`, before it reaches the store (the database stalls on it).
    Mark,
    /// The answer of `mark`, after the store applied and committed it (the reply is slow).
    MarkAnswer,
    GrabBatch,
    GrabById,
    Recycle,
    /// Nothing: the gate only counts.
    Nothing,
}

/// A store whose calls of one kind wait while the gate is shut (the database stalled on
/// them, or the call is still on its way); everything else goes straight through.
#[derive(Clone)]
struct Gate<S> {
    inner: S,
    gated: Gated,
    open: Arc<tokio::sync::watch::Sender<bool>>,
    /// How many gated calls have reached the gate.
    arrived: Arc<tokio::sync::watch::Sender<usize>>,
    /// How many `grab_batch` calls have returned.
    grabbed: Arc<tokio::sync::watch::Sender<usize>>,
    /// How many `heartbeat` calls have returned.
    heartbeats: Arc<tokio::sync::watch::Sender<usize>>,
    /// How many leases heartbeats have found gone.
    refused: Arc<tokio::sync::watch::Sender<usize>>,
}

impl<S> Gate<S> {
    fn shut(inner: S, gated: Gated) -> Self {
        Gate {
            inner,
            gated,
            open: Arc::new(tokio::sync::watch::Sender::new(false)),
            arrived: Arc::new(tokio::sync::watch::Sender::new(0)),
            grabbed: Arc::new(tokio::sync::watch::Sender::new(0)),
            heartbeats: Arc::new(tokio::sync::watch::Sender::new(0)),
            refused: Arc::new(tokio::sync::watch::Sender::new(0)),
        }
    }

    /// Wait until `count` reaches `n`.
    async fn reach(count: &tokio::sync::watch::Sender<usize>, n: usize, what: &str) {
        let mut count = count.subscribe();
        tokio::time::timeout(PATIENCE, count.wait_for(|c| *c >= n))
            .await
            .unwrap_or_else(|_| panic!("timed out waiting for {n} {what}"))
            .unwrap();
    }

    /// Wait until `n` `grab_batch` calls have returned.
    async fn grabbed(&self, n: usize) {
        Self::reach(&self.grabbed, n, "grab_batch answers").await;
    }

    /// Wait until `n` `heartbeat` calls have returned.
    async fn heartbeats(&self, n: usize) {
        Self::reach(&self.heartbeats, n, "heartbeats").await;
    }

    /// Wait until heartbeats have found `n` leases gone.
    async fn refused(&self, n: usize) {
        Self::reach(&self.refused, n, "leases found gone by heartbeats").await;
    }

    fn heartbeats_so_far(&self) -> usize {
        *self.heartbeats.borrow()
    }

    fn open(&self) {
        self.open.send_replace(true);
    }

    /// Wait until `n` gated calls have reached the gate.
    async fn arrived(&self, n: usize) {
        Self::reach(
            &self.arrived,
            n,
            &format!("{:?} calls at the gate", self.gated),
        )
        .await;
    }

    /// Let a `call` through: at once unless it is the gated kind and the gate is shut.
    async fn pass(&self, call: Gated) {
        if call != self.gated {
            return;
        }
        self.arrived.send_modify(|a| *a += 1);
        let mut open = self.open.subscribe();
        // the sender lives as long as the gate: a closed channel cannot happen here
        let _ = open.wait_for(|o| *o).await;
    }
}

#[backstop_core::async_trait]
impl<S: TaskStore> TaskStore for Gate<S> {
    async fn migrate(&self) -> backstop_core::Result<()> {
        self.inner.migrate().await
    }
    async fn enqueue(&self, task: NewTask) -> backstop_core::Result<backstop_core::Enqueued> {
        self.inner.enqueue(task).await
    }
    async fn grab_by_id(&self, id: TaskId, owner: &Owner) -> backstop_core::Result<Option<Task>> {
        self.pass(Gated::GrabById).await;
        self.inner.grab_by_id(id, owner).await
    }
    async fn grab_batch(
        &self,
        owner: &Owner,
        event_types: &[String],
        limit: usize,
    ) -> backstop_core::Result<Vec<Task>> {
        self.pass(Gated::GrabBatch).await;
        let grabbed = self.inner.grab_batch(owner, event_types, limit).await;
        self.grabbed.send_modify(|g| *g += 1);
        grabbed
    }
    async fn recycle_dead(
        &self,
        older_than: Duration,
        limit: usize,
    ) -> backstop_core::Result<backstop_core::Recycled> {
        self.pass(Gated::Recycle).await;
        self.inner.recycle_dead(older_than, limit).await
    }
    async fn heartbeat(&self, leases: &[backstop_core::Lease]) -> backstop_core::Result<Vec<bool>> {
        let flags = self.inner.heartbeat(leases).await;
        if let Ok(flags) = &flags {
            let gone = flags.iter().filter(|f| !**f).count();
            self.refused.send_modify(|r| *r += gone);
        }
        self.heartbeats.send_modify(|h| *h += 1);
        flags
    }
    async fn mark(&self, marks: &[backstop_core::Mark]) -> backstop_core::Result<Vec<bool>> {
        self.pass(Gated::Mark).await;
        let flags = self.inner.mark(marks).await;
        self.pass(Gated::MarkAnswer).await;
        flags
    }
    async fn manual_reset(&self, id: TaskId, stuck_after: Duration) -> backstop_core::Result<Task> {
        self.inner.manual_reset(id, stuck_after).await
    }
    async fn get(&self, id: TaskId) -> backstop_core::Result<Option<Task>> {
        self.inner.get(id).await
    }
    async fn list(&self, filter: &backstop_core::TaskFilter) -> backstop_core::Result<Vec<Task>> {
        self.inner.list(filter).await
    }
    async fn stats(&self) -> backstop_core::Result<backstop_core::Stats> {
        self.inner.stats().await
    }
    async fn purge_succeeded(
        &self,
        older_than: Duration,
        limit: usize,
    ) -> backstop_core::Result<u64> {
        self.inner.purge_succeeded(older_than, limit).await
    }
    async fn delete_succeeded(&self, ids: &[TaskId]) -> backstop_core::Result<u64> {
        self.inner.delete_succeeded(ids).await
    }
}

/// Finished attempts waiting for their marks are bounded: while the store's marks stall,
/// the poller claims until `limits::MAX_UNMARKED` attempts wait (plus what the executor
/// held when it last claimed: at most its capacity) and then no more — the rest stay
/// pending, untouched; once marks flow again every task completes, each run once.
pub async fn engine_stops_claiming_while_marks_stall<H: Harness>(ctx: &Ctx<H>) {
    use backstop_core::limits::MAX_UNMARKED;
    const BATCH: usize = 100;
    const CAPACITY: usize = 64 + 192;
    let total = MAX_UNMARKED + 2 * CAPACITY;
    let producers: Vec<_> = (0..8)
        .map(|p| {
            let store = ctx.store.clone();
            tokio::spawn(async move {
                for i in (p..total).step_by(8) {
                    store
                        .enqueue(NewTask::new("BULK", format!("k{i}")))
                        .await
                        .unwrap();
                }
            })
        })
        .collect();
    for p in producers {
        p.await.unwrap();
    }
    let ran = Arc::new(AtomicUsize::new(0));
    let handler = {
        let ran = Arc::clone(&ran);
        handler_fn(move |_task: Task| {
            ran.fetch_add(1, Ordering::SeqCst);
            async { Ok::<_, HandlerError>(()) }
        })
    };
    let gate = Gate::shut(ctx.store.clone(), Gated::Mark);
    let engine = Engine::builder(gate.clone())
        .config(EngineConfig {
            batch_size: BATCH,
            first_poll_delay: Duration::ZERO,
            ..fast_config()
        })
        .handler("BULK", handler, opts().concurrency(64).queue_capacity(192))
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

/// A mark committed but answered late (a slow network, a stalled reply): heartbeats meanwhile
/// find the task's lease gone (it succeeded under that lease), which is no lost lease. No
/// lease is counted lost, no completion is refused, and the engine logs no warning.
pub async fn engine_slow_mark_answers_lose_no_lease<H: Harness>(ctx: &Ctx<H>) {
    const TASKS: usize = 10;
    let logs = crate::logs::capture();
    let calls = Calls::default();
    let gate = Gate::shut(ctx.store.clone(), Gated::MarkAnswer);
    let engine = Engine::builder(gate.clone())
        .config(EngineConfig {
            heartbeat_interval: Duration::from_millis(30),
            ..no_poll_config()
        })
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
        .config(EngineConfig {
            heartbeat_interval: Duration::from_millis(30),
            ..no_poll_config()
        })
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
    ctx.backdate(lost.id, TimeColumn::UpdatedAt, HOUR).await;
    let r = ctx
        .store
        .recycle_dead(Duration::from_secs(60), 10)
        .await
        .unwrap();
    assert_eq!(r.to_pending, 1, "only the backdated task is dead");
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
