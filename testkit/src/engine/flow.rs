//! Flow control on a running fleet: a paused event type starts nothing on any instance,
//! however its tasks arrive, and runs everything once resumed.

use super::*;
use backstop_core::{Audit, QueueChange};
use chrono::Utc;

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
