//! Dedup rules: when an enqueue of an existing key is a duplicate, and what it answers.

use backstop_core::{Audit, Dedup, Enqueued};

use super::*;

async fn put<H: Harness>(ctx: &Ctx<H>, task: NewTask) -> Enqueued {
    ctx.store.enqueue(task).await.unwrap()
}

/// Park task `id` (claimed) as `status` through the store's own operations.
async fn finish<H: Harness>(ctx: &Ctx<H>, id: TaskId, status: Status) {
    match status {
        Status::Cancelled => {
            ctx.store
                .cancel(id, &Audit::new("op", "test"))
                .await
                .unwrap();
        }
        _ => {
            let t = ctx.claim(id).await;
            let mark = if status == Status::Succeeded {
                Mark::success(t.lease())
            } else {
                Mark::fail(t.lease(), "down")
            };
            assert_eq!(ctx.store.mark(&[mark]).await.unwrap(), vec![true]);
        }
    }
    assert_eq!(ctx.task(id).await.status, status);
}

fn keyed(n: usize) -> TaskFilter {
    TaskFilter::default().event_type("E").biz_key("k").limit(n)
}

/// the default rule (while active): a duplicate while the task is pending or running,
/// answered with its id and status; once it succeeded, failed or was cancelled, the same
/// key makes a new task and the finished one stays for the record.
pub async fn enqueue_dedup_while_active_makes_a_new_task_once_finished<H: Harness>(ctx: &Ctx<H>) {
    let first = put(ctx, NewTask::new("E", "k")).await;
    assert_eq!((first.created, first.status), (true, Status::Pending));
    let dup = put(ctx, NewTask::new("E", "k").json(&2)).await;
    assert_eq!(
        (dup.id, dup.created, dup.status, dup.replaced),
        (first.id, false, Status::Pending, false)
    );
    let running = ctx.claim(first.id).await;
    let dup = put(ctx, NewTask::new("E", "k")).await;
    assert_eq!((dup.id, dup.status), (first.id, Status::Running));
    assert_eq!(
        ctx.task(first.id).await,
        running,
        "a duplicate changes nothing"
    );
    assert!(ctx.store.mark_success(running.lease()).await.unwrap());

    let mut ids = vec![first.id];
    for then in [Status::Failed, Status::Cancelled, Status::Succeeded] {
        let next = put(ctx, NewTask::new("E", "k").json(&ids.len())).await;
        assert!(next.created, "after {then:?}: {next:?}");
        assert_eq!(next.status, Status::Pending);
        assert!(!ids.contains(&next.id));
        ids.push(next.id);
        finish(ctx, next.id, then).await;
    }
    let rows = ctx.store.list(&keyed(10)).await.unwrap();
    assert_eq!(
        rows.iter().map(|t| t.id).collect::<Vec<_>>(),
        ids,
        "every finished task keeps its row"
    );
    // in the caller's transaction too, and a rollback leaves the key as it was
    let rolled_back = ctx
        .enqueue_in_tx("order-x", NewTask::new("E", "k"), false)
        .await
        .unwrap();
    assert!(rolled_back.created);
    assert_eq!(ctx.store.list(&keyed(10)).await.unwrap().len(), 4);
    let committed = ctx
        .enqueue_in_tx("order-y", NewTask::new("E", "k"), true)
        .await
        .unwrap();
    assert!(committed.created);
    let dup = ctx
        .enqueue_in_tx("order-z", NewTask::new("E", "k"), true)
        .await
        .unwrap();
    assert_eq!((dup.id, dup.created), (committed.id, false));
    assert_eq!(ctx.store.list(&keyed(10)).await.unwrap().len(), 5);
}

/// a window: a duplicate while the task is active or was created less than the window
/// ago, whatever its status; after that, a new task.
pub async fn enqueue_dedup_window_holds_the_key_for_its_window<H: Harness>(ctx: &Ctx<H>) {
    let rule = Dedup::Window(HOUR);
    let first = put(ctx, NewTask::new("E", "k").dedup(rule)).await;
    finish(ctx, first.id, Status::Succeeded).await;
    let dup = put(ctx, NewTask::new("E", "k").dedup(rule)).await;
    assert_eq!(
        (dup.id, dup.created, dup.status),
        (first.id, false, Status::Succeeded)
    );
    // the window is the new enqueue's: a shorter one lets a new task in at once
    ctx.backdate(first.id, TimeColumn::CreatedAt, 2 * MINUTE)
        .await;
    let short = put(ctx, NewTask::new("E", "k").dedup(Dedup::Window(MINUTE))).await;
    assert!(short.created);
    // a pending task older than the window is still a duplicate (it is active)
    ctx.backdate(short.id, TimeColumn::CreatedAt, 2 * HOUR)
        .await;
    let dup = put(ctx, NewTask::new("E", "k").dedup(rule)).await;
    assert_eq!((dup.id, dup.status), (short.id, Status::Pending));
    finish(ctx, short.id, Status::Failed).await;
    let next = put(ctx, NewTask::new("E", "k").dedup(rule)).await;
    assert!(next.created, "the failed task's window has passed");
    assert_eq!(ctx.store.list(&keyed(10)).await.unwrap().len(), 3);
    assert_kind(
        ctx.store
            .enqueue(
                NewTask::new("E", "w")
                    .dedup(Dedup::Window(backstop_core::limits::MAX_INTERVAL * 2)),
            )
            .await,
        ErrorKind::InvalidInput,
        "dedup window",
    );
}

/// forever: a duplicate as long as the row exists, whatever its status; an operator's
/// delete frees the key.
pub async fn enqueue_dedup_forever_holds_the_key_while_the_row_exists<H: Harness>(ctx: &Ctx<H>) {
    for (key, then) in [
        ("s", Status::Succeeded),
        ("f", Status::Failed),
        ("c", Status::Cancelled),
    ] {
        let first = put(ctx, NewTask::new("F", key).dedup(Dedup::Forever)).await;
        finish(ctx, first.id, then).await;
        let dup = put(ctx, NewTask::new("F", key).dedup(Dedup::Forever)).await;
        assert_eq!((dup.id, dup.created, dup.status), (first.id, false, then));
        ctx.store
            .delete(first.id, &Audit::new("op", "free the key"))
            .await
            .unwrap();
        let again = put(ctx, NewTask::new("F", key).dedup(Dedup::Forever)).await;
        assert!(again.created, "{key}: the row is gone");
    }
}

/// replace_pending: a duplicate of a pending task replaces its payload (and says so); a
/// running task's payload is never touched.
pub async fn enqueue_duplicate_can_replace_a_pending_payload<H: Harness>(ctx: &Ctx<H>) {
    let first = put(ctx, NewTask::new("E", "k").json(&"v1")).await;
    let before = ctx.task(first.id).await;
    let dup = put(
        ctx,
        NewTask::new("E", "k").json(&"v2").replace_pending(true),
    )
    .await;
    assert_eq!(
        (dup.id, dup.created, dup.status, dup.replaced),
        (first.id, false, Status::Pending, true)
    );
    let after = ctx.task(first.id).await;
    assert_eq!(after.payload, "\"v2\"");
    assert!(after.updated_at >= before.updated_at);
    assert_eq!(
        (after.attempts, after.lease, after.next_run_at, after.retry),
        (
            before.attempts,
            before.lease,
            before.next_run_at,
            before.retry
        ),
        "only the payload changes"
    );
    // without asking, nothing is replaced
    let dup = put(ctx, NewTask::new("E", "k").json(&"v3")).await;
    assert!(!dup.replaced);
    assert_eq!(ctx.task(first.id).await.payload, "\"v2\"");
    // running: not replaced, answered as running
    ctx.claim(first.id).await;
    let dup = put(
        ctx,
        NewTask::new("E", "k").json(&"v4").replace_pending(true),
    )
    .await;
    assert_eq!(
        (dup.id, dup.status, dup.replaced),
        (first.id, Status::Running, false)
    );
    assert_eq!(ctx.task(first.id).await.payload, "\"v2\"");
}

/// concurrent enqueues of a finished key, from several instances: exactly one new task,
/// every other enqueue its duplicate.
pub async fn enqueue_dedup_races_make_one_new_task<H: Harness>(ctx: &Ctx<H>) {
    let old = put(ctx, NewTask::new("E", "k")).await;
    finish(ctx, old.id, Status::Succeeded).await;
    let mut stores = Vec::new();
    for _ in 0..4 {
        stores.push(ctx.new_store().await);
    }
    let results = within(
        "the enqueuers",
        futures_util::future::join_all((0..16).map(|i| {
            let store = stores[i % stores.len()].clone();
            async move { store.enqueue(NewTask::new("E", "k")).await.unwrap() }
        })),
    )
    .await;
    let created: Vec<_> = results.iter().filter(|e| e.created).collect();
    assert_eq!(created.len(), 1, "{results:?}");
    let new_id = created[0].id;
    assert!(results.iter().all(|e| e.id == new_id), "{results:?}");
    let rows = ctx.store.list(&keyed(10)).await.unwrap();
    assert_eq!(rows.len(), 2, "the old task and one new one: {rows:?}");
}
