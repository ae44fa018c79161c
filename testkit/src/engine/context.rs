//! The handler's context: shared state, cancellation, its own heartbeat, and completion
//! in the handler's own transaction.

use backstop_core::{Audit, Cancelled, Context, TaskFilter};
use tokio::sync::{mpsc, oneshot};

use super::*;

type Request = (
    Context,
    String,
    NewTask,
    oneshot::Sender<Result<(), HandlerError>>,
);

/// completion in the handler's transaction: the business write, the follow-up task and
/// the success commit together; when the write fails, all three roll back (the task is
/// retried, no follow-up exists) — and the next attempt commits all three. The engine
/// does not mark a task its handler completed: no stale completion.
pub async fn engine_completes_in_the_handlers_transaction<H: Harness>(ctx: &Ctx<H>) {
    // a business row that the first attempt's write collides with
    ctx.enqueue_in_tx("taken", NewTask::new("OTHER", "x"), true)
        .await
        .unwrap();
    let (requests, mut serve) = mpsc::unbounded_channel::<Request>();
    let handler = handler_fn(move |task: Task| {
        let requests = requests.clone();
        async move {
            let cx = Context::current().expect("inside an attempt");
            assert_eq!(cx.task().id, task.id);
            let row = if task.attempts == 1 { "taken" } else { "fresh" };
            let follow_up = NewTask::new("FOLLOW_UP", format!("after-{}", task.biz_key));
            let (reply, answer) = oneshot::channel();
            requests
                .send((cx, row.to_owned(), follow_up, reply))
                .map_err(|_| HandlerError::retry("test gone"))?;
            answer.await.map_err(|_| HandlerError::retry("test gone"))?
        }
    });
    let engine = Engine::builder(ctx.store.clone())
        .config(fast_config())
        .handler(
            "SHIP",
            handler,
            opts().retry(RetryPolicy::fixed(3, Duration::from_millis(20))),
        )
        .start()
        .unwrap();
    let (e, run) = engine.enqueue(engine.task("SHIP", "o1")).await.unwrap();
    assert_eq!(run, RunAhead::Started);
    let follow_up = TaskFilter::default().event_type("FOLLOW_UP");
    // serve the handler's transactions until the task is done
    let mut served = 0;
    loop {
        tokio::select! {
            Some((cx, row, task, reply)) = serve.recv() => {
                let r = ctx
                    .harness
                    .complete_with_business_row(&ctx.db, &ctx.store, &cx, &row, task)
                    .await;
                if served == 0 {
                    assert!(r.is_err(), "the first attempt's write must fail");
                    // everything of that transaction rolled back
                    assert!(ctx.store.list(&follow_up).await.unwrap().is_empty());
                    assert_eq!(ctx.task(e.id).await.status, Status::Running);
                }
                served += 1;
                let _ = reply.send(r);
            }
            _ = tokio::time::sleep(Duration::from_millis(10)) => {
                if ctx.task(e.id).await.status == Status::Succeeded {
                    break;
                }
            }
        }
        assert!(served <= 3, "too many attempts");
    }
    let t = ctx.task(e.id).await;
    assert_eq!((t.status, t.attempts), (Status::Succeeded, 2));
    assert!(ctx.harness.business_row_exists(&ctx.db, "fresh").await);
    let follow_ups = ctx.store.list(&follow_up).await.unwrap();
    assert_eq!(follow_ups.len(), 1, "{follow_ups:?}");
    assert_eq!(follow_ups[0].biz_key, "after-o1");
    let c = engine.counters();
    assert_eq!(
        (c.succeeded, c.retried, c.stale_completions),
        (1, 1, 0),
        "{c:?}"
    );
    engine.shutdown().await;
}

/// the context: shared state by type (a missing type fails the task for good, naming
/// it), the handler's own heartbeat extends its lease, and an operator's cancel reaches
/// the handler as `Cancelled::LeaseLost` — through the engine's heartbeat, or the
/// handler's own.
pub async fn engine_gives_handlers_state_heartbeats_and_a_cancel<H: Harness>(ctx: &Ctx<H>) {
    struct Greeting(&'static str);
    let seen: Arc<Mutex<Vec<String>>> = Arc::default();
    let (started_tx, mut started) = mpsc::unbounded_channel::<TaskId>();
    let handler = {
        let seen = Arc::clone(&seen);
        handler_fn(move |task: Task| {
            let seen = Arc::clone(&seen);
            let started_tx = started_tx.clone();
            async move {
                let cx = Context::current().unwrap();
                if task.biz_key == "missing-state" {
                    cx.state::<u128>()?;
                }
                let greeting = cx.state::<Greeting>()?;
                seen.lock().unwrap().push(greeting.0.to_owned());
                // a long step: heartbeat by hand while waiting to be cancelled
                let _ = started_tx.send(task.id);
                cx.heartbeat().await?;
                assert!(cx.cancel_reason().is_none());
                let why = loop {
                    tokio::select! {
                        why = cx.cancelled() => break why,
                        _ = tokio::time::sleep(Duration::from_millis(20)) => {
                            if let Err(e) = cx.heartbeat().await {
                                seen.lock().unwrap().push(format!("heartbeat: {e}"));
                            }
                        }
                    }
                };
                seen.lock().unwrap().push(format!("{why:?}"));
                Err(HandlerError::retry(format!("stopped: {why}")))
            }
        })
    };
    let engine = Engine::builder(ctx.store.clone())
        .config(
            no_poll_config()
                .dead_after(4 * HOUR)
                .heartbeat_interval(HOUR),
        )
        .state(Greeting("hello"))
        .handler("LONG", handler, opts())
        .start()
        .unwrap();
    assert!(Context::current().is_none(), "outside an attempt");
    let (bad, _) = engine
        .enqueue(NewTask::new("LONG", "missing-state"))
        .await
        .unwrap();
    let t = wait_status(&ctx.store, bad.id, Status::Failed).await;
    assert!(
        t.last_error.as_deref().unwrap_or("").contains("u128"),
        "{:?}",
        t.last_error
    );
    let (e, _) = engine.enqueue(NewTask::new("LONG", "k")).await.unwrap();
    assert_eq!(started.recv().await, Some(e.id));
    // the handler's own heartbeats keep updated_at fresh
    let first = ctx.task(e.id).await.updated_at;
    eventually("a heartbeat of the handler's own", || async {
        ctx.task(e.id).await.updated_at > first
    })
    .await;
    ctx.store
        .cancel(e.id, &Audit::new("op", "stop it"))
        .await
        .unwrap();
    eventually("the handler to learn of the cancel", || async {
        seen.lock().unwrap().iter().any(|s| s == "LeaseLost")
    })
    .await;
    assert_eq!(seen.lock().unwrap()[0], "hello");
    assert!(
        seen.lock()
            .unwrap()
            .iter()
            .any(|s| s.starts_with("heartbeat:")),
        "the handler's own heartbeat found the lease gone: {:?}",
        seen.lock().unwrap()
    );
    assert_eq!(ctx.task(e.id).await.status, Status::Cancelled);
    engine.shutdown().await;
}

/// shutdown reaches a running handler as `Cancelled::Shutdown`: it can stop early, and
/// its task is given back for another instance. The error it stops with spends no
/// attempt: on its last attempt the task is pending again with its attempts as before
/// the claim (0), not failed, and due at once.
pub async fn engine_tells_a_running_handler_of_shutdown<H: Harness>(ctx: &Ctx<H>) {
    let (started_tx, mut started) = mpsc::unbounded_channel::<()>();
    let why: Arc<Mutex<Option<Cancelled>>> = Arc::default();
    let handler = {
        let why = Arc::clone(&why);
        handler_fn(move |_task: Task| {
            let why = Arc::clone(&why);
            let started_tx = started_tx.clone();
            async move {
                let cx = Context::current().unwrap();
                let _ = started_tx.send(());
                let reason = cx.cancelled().await;
                *why.lock().unwrap() = Some(reason);
                Err(HandlerError::retry(format!("stopped: {reason}")))
            }
        })
    };
    let engine = Engine::builder(ctx.store.clone())
        .config(no_poll_config().shutdown_grace(Duration::from_secs(10)))
        .handler("LONG", handler, opts())
        .start()
        .unwrap();
    let last = NewTask::new("LONG", "k").retry(RetryPolicy::fixed(1, Duration::from_secs(600)));
    let (e, _) = engine.enqueue(last).await.unwrap();
    started.recv().await.unwrap();
    let t0 = Instant::now();
    engine.shutdown().await;
    assert!(
        t0.elapsed() < Duration::from_secs(5),
        "the handler stopped early instead of running out the grace"
    );
    assert_eq!(*why.lock().unwrap(), Some(Cancelled::Shutdown));
    let t = ctx.task(e.id).await;
    assert_eq!(
        (t.status, t.attempts, t.owner.as_deref()),
        (Status::Pending, 0, None),
        "given back, no attempt spent: {t:?}"
    );
    assert!(t.next_run_at <= chrono::Utc::now(), "due at once: {t:?}");
}

/// A handler sees the task's tags and metadata (`cx.task()`), and records an output with
/// `Context::record_output`: stored with the task, kept when it succeeds, replaced by a
/// later attempt's. An output over the limit is a permanent failure (a bug a retry
/// cannot fix): the task parks as failed after one attempt, its error naming the output,
/// no output stored.
pub async fn engine_handler_records_its_output<H: Harness>(ctx: &Ctx<H>) {
    let handler = handler_fn(move |task: Task| async move {
        let cx = Context::current().expect("inside an attempt");
        let meta: serde_json::Value =
            serde_json::from_str(cx.task().metadata.as_deref().unwrap_or("null")).unwrap();
        if task.biz_key == "huge" {
            let huge = "x".repeat(backstop_core::limits::MAX_OUTPUT_BYTES);
            cx.record_output(&huge).await?;
            return Ok(());
        }
        cx.record_output(&serde_json::json!({
            "attempt": task.attempts,
            "tenant": meta["tenant"],
            "tags": cx.task().tags,
        }))
        .await?;
        if task.attempts == 1 {
            return Err(HandlerError::retry("once more"));
        }
        Ok(())
    });
    let engine = Engine::builder(ctx.store.clone())
        .config(fast_config())
        .handler(
            "REPORT",
            handler,
            opts().retry(RetryPolicy::fixed(3, Duration::from_millis(10))),
        )
        .start()
        .unwrap();
    let task = NewTask::new("REPORT", "r1")
        .tags(["daily", "eu"])
        .metadata(&serde_json::json!({"tenant": "acme"}));
    let (e, _) = engine.enqueue(task).await.unwrap();
    let t = wait_status(&ctx.store, e.id, Status::Succeeded).await;
    assert_eq!(t.attempts, 2);
    let output: serde_json::Value = serde_json::from_str(t.output.as_deref().unwrap()).unwrap();
    assert_eq!(
        output,
        serde_json::json!({"attempt": 2, "tenant": "acme", "tags": ["daily", "eu"]}),
        "the second attempt's output replaced the first's"
    );
    let (huge, _) = engine
        .enqueue(NewTask::new("REPORT", "huge"))
        .await
        .unwrap();
    let t = wait_status(&ctx.store, huge.id, Status::Failed).await;
    assert_eq!((t.attempts, t.output.as_deref()), (1, None));
    assert!(
        t.last_error.as_deref().unwrap_or("").contains("output"),
        "{:?}",
        t.last_error
    );
    engine.shutdown().await;
}
