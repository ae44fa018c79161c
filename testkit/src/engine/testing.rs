//! The helpers of `backstop::testing` and `Engine::drain`, on every backend: a drain
//! runs what is due (and its follow-ups) through the handlers and waits for the
//! outcomes; `advance` moves due times along; the assertions find tasks and name what
//! they did not find.

use super::*;
use backstop_core::testing::{self, advance, assert_enqueued, assert_not_enqueued};
use backstop_core::{Audit, QueueChange};
use chrono::Utc;

/// An engine that never polls on its own: what runs, a drain started.
fn quiet<S: TaskStore + Clone>(store: S) -> backstop_core::EngineBuilder<S> {
    Engine::builder(store).config(fast_config().first_poll_delay(HOUR).poll_interval(HOUR))
}

/// drain: 25 due `ORDER` tasks (enqueued straight into the store: no run-ahead), each
/// of whose handlers enqueues a `RECEIPT`, all run once by one drain, receipts included
/// (50 claimed, 50 succeeded); a delayed task and a paused type's tasks stay pending with
/// no attempt spent; a second drain finds nothing; a stopped engine's drain is
/// `Conflict`.
pub async fn engine_drain_runs_what_is_due_and_its_follow_ups<H: Harness>(ctx: &Ctx<H>) {
    const N: usize = 25;
    let calls = Calls::default();
    let follow_up = {
        let store = ctx.store.clone();
        recording(calls.clone(), move |_, task: Task| {
            let store = store.clone();
            async move {
                let key = format!("receipt-{}", task.biz_key);
                store.enqueue(NewTask::new("RECEIPT", key)).await?;
                Ok(())
            }
        })
    };
    let engine = quiet(ctx.store.clone())
        .handler("ORDER", follow_up, opts())
        .handler("RECEIPT", succeeding(&calls), opts())
        .handler("HELD", succeeding(&calls), opts())
        .start()
        .unwrap();
    ctx.store
        .set_queue("HELD", QueueChange::Pause, &Audit::new("ops", "hold"))
        .await
        .unwrap();
    for i in 0..N {
        ctx.enqueue("ORDER", &format!("o{i}")).await;
    }
    let later = ctx
        .store
        .enqueue(NewTask::new("ORDER", "later").delay(HOUR))
        .await
        .unwrap();
    let held = ctx.enqueue("HELD", "h").await;

    let done = engine.drain().await.unwrap();
    assert_eq!((done.polled, done.run_ahead), (2 * N as u64, 0), "{done:?}");
    assert_eq!(
        (done.succeeded, done.failed, done.retried),
        (2 * N as u64, 0, 0)
    );
    for i in 0..N {
        assert_eq!(calls.count(&format!("o{i}")), 1, "o{i}");
        let receipt = assert_enqueued(&ctx.store, "RECEIPT", &format!("receipt-o{i}")).await;
        assert_eq!((receipt.status, receipt.attempts), (Status::Succeeded, 1));
    }
    for id in [later.id, held] {
        let t = ctx.task(id).await;
        assert_eq!(
            (t.status, t.attempts),
            (Status::Pending, 0),
            "{}",
            t.biz_key
        );
    }
    assert_eq!(calls.count("later") + calls.count("h"), 0);

    let again = engine.drain().await.unwrap();
    assert_eq!((again.polled, again.succeeded), (0, 0), "{again:?}");
    engine.shutdown().await;
    let e = engine.drain().await.unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Conflict, "{e}");
}

/// advance: a retry 10 minutes away moves 5 minutes nearer per `advance(5 min)` (its
/// `next_run_at` in the window, the move in its audit log under `backstop::testing`);
/// a drain between runs nothing; the second advance makes it due (returned), and the
/// drain runs its second attempt. Delayed tasks move the same: one an hour away is made
/// due by `advance(1 h)` after the first 10 minutes, one 3 hours away is left 1 h 50 min
/// away. Over a year is `InvalidInput` naming `by` and moves nothing; zero moves
/// nothing.
pub async fn advance_moves_due_times_and_drain_runs_what_fell_due<H: Harness>(ctx: &Ctx<H>) {
    const MIN: Duration = Duration::from_secs(60);
    let calls = Calls::default();
    let engine = quiet(ctx.store.clone())
        .handler("FLAKY", flaky(calls.clone(), 1), opts())
        .handler("LATER", succeeding(&calls), opts())
        .start()
        .unwrap();
    let policy = RetryPolicy::fixed(3, 10 * MIN);
    let flaky_id = ctx
        .store
        .enqueue(NewTask::new("FLAKY", "f").retry(policy))
        .await
        .unwrap()
        .id;
    let hour = ctx
        .store
        .enqueue(NewTask::new("LATER", "in-1h").delay(HOUR))
        .await
        .unwrap()
        .id;
    let three = ctx
        .store
        .enqueue(NewTask::new("LATER", "in-3h").delay(3 * HOUR))
        .await
        .unwrap()
        .id;
    let done = engine.drain().await.unwrap();
    assert_eq!((done.retried, done.succeeded), (1, 0), "{done:?}");
    let due_in = |t: &Task| (t.next_run_at - Utc::now()).to_std().unwrap_or_default();
    let t = ctx.task(flaky_id).await;
    assert_eq!((t.status, t.attempts), (Status::Pending, 1));

    assert_eq!(
        advance(&ctx.store, 5 * MIN).await.unwrap(),
        Vec::<TaskId>::new()
    );
    let t = ctx.task(flaky_id).await;
    let left = due_in(&t);
    assert!(left > 4 * MIN && left <= 5 * MIN, "due in {left:?}");
    let log = ctx.store.audit_log(flaky_id).await.unwrap();
    let last = log.last().expect("an audit entry");
    assert_eq!(
        (last.operator.as_str(), last.action.as_str()),
        (testing::OPERATOR, "reschedule")
    );
    let idle = engine.drain().await.unwrap();
    assert_eq!((idle.polled, idle.succeeded), (0, 0), "{idle:?}");

    assert_eq!(advance(&ctx.store, 5 * MIN).await.unwrap(), vec![flaky_id]);
    let done = engine.drain().await.unwrap();
    assert_eq!(done.succeeded, 1, "{done:?}");
    let t = ctx.task(flaky_id).await;
    assert_eq!((t.status, t.attempts), (Status::Succeeded, 2));
    assert_eq!(calls.count("f"), 2);

    assert_eq!(advance(&ctx.store, HOUR).await.unwrap(), vec![hour]);
    engine.drain().await.unwrap();
    assert_eq!((calls.count("in-1h"), calls.count("in-3h")), (1, 0));
    let left = due_in(&ctx.task(three).await);
    assert!(
        left > 109 * MIN && left <= 110 * MIN,
        "3 h - 10 min - 1 h: due in {left:?}"
    );

    let before = ctx.task(three).await;
    let e = advance(&ctx.store, backstop_core::limits::MAX_INTERVAL + MIN)
        .await
        .unwrap_err();
    assert_eq!(e.kind(), ErrorKind::InvalidInput);
    assert!(e.to_string().contains("by"), "{e}");
    assert_eq!(
        advance(&ctx.store, Duration::ZERO).await.unwrap(),
        Vec::<TaskId>::new()
    );
    let after = ctx.task(three).await;
    assert_eq!(after.next_run_at, before.next_run_at, "nothing moved");
    engine.shutdown().await;
}

/// The assertions: `assert_enqueued` answers the task whatever its status;
/// `enqueued` lists a type's tasks in id order; a missing task's panic names the keys of
/// the type there are; `assert_not_enqueued` panics showing the task it found.
pub async fn testing_assertions_find_and_name_tasks<H: Harness>(ctx: &Ctx<H>) {
    let a = ctx.enqueue("MAIL", "a").await;
    let b = ctx.enqueue("MAIL", "b").await;
    ctx.claim(b).await;
    let t = assert_enqueued(&ctx.store, "MAIL", "a").await;
    assert_eq!((t.id, t.status), (a, Status::Pending));
    let t = assert_enqueued(&ctx.store, "MAIL", "b").await;
    assert_eq!((t.id, t.status), (b, Status::Running));
    assert_not_enqueued(&ctx.store, "MAIL", "c").await;
    assert_not_enqueued(&ctx.store, "OTHER", "a").await;
    let all: Vec<TaskId> = testing::enqueued(&ctx.store, "MAIL")
        .await
        .unwrap()
        .iter()
        .map(|t| t.id)
        .collect();
    assert_eq!(all, vec![a, b]);

    let store = ctx.store.clone();
    let missing = tokio::spawn(async move { assert_enqueued(&store, "MAIL", "zzz").await });
    let why = panic_text(missing.await.unwrap_err());
    assert!(
        why.contains("\"zzz\"")
            && why.contains("\"a\" (pending)")
            && why.contains("\"b\" (running)"),
        "{why}"
    );
    let store = ctx.store.clone();
    let found = tokio::spawn(async move { assert_not_enqueued(&store, "MAIL", "a").await });
    let why = panic_text(found.await.unwrap_err());
    assert!(why.contains(&format!("id: {a}")), "{why}");
}

/// The message a task panicked with.
fn panic_text(e: tokio::task::JoinError) -> String {
    let payload = e.into_panic();
    payload
        .downcast_ref::<String>()
        .cloned()
        .or_else(|| payload.downcast_ref::<&str>().map(|s| (*s).to_owned()))
        .unwrap_or_default()
}
