//! The operator's reset.

use super::*;

/// manual_reset: failed → pending, attempts 0, due now, last_error kept.
pub async fn manual_reset_restarts_a_failed_task<H: Harness>(ctx: &Ctx<H>) {
    let e = ctx
        .store
        .enqueue(NewTask::new("E", "k").retry(RetryPolicy::fixed(1, HOUR)))
        .await
        .unwrap();
    let t = ctx.claim(e.id).await;
    ctx.store
        .mark_retry(t.lease(), HOUR, "gave up")
        .await
        .unwrap();
    assert_eq!(ctx.task(e.id).await.status, Status::Failed);
    let t0 = Utc::now();
    let r = ctx
        .store
        .manual_reset(e.id, Duration::from_secs(180))
        .await
        .unwrap();
    let t1 = Utc::now();
    assert_eq!(r, ctx.task(e.id).await, "returns the task as reset");
    assert_eq!(r.status, Status::Pending);
    assert_eq!(r.attempts, 0);
    assert_eq!(r.owner, None);
    assert_eq!(r.last_error.as_deref(), Some("gave up"));
    assert_between("next_run_at", r.next_run_at, t0, t1);
    assert_eq!(r.next_run_at, r.updated_at);
    let again = ctx.claim(e.id).await;
    assert_eq!((again.attempts, again.lease), (1, 2));
}

/// manual_reset: a running task whose owner is gone (stale updated_at) is reset too —
/// the "stuck" case, typically on its last attempt.
pub async fn manual_reset_recovers_a_stuck_running_task<H: Harness>(ctx: &Ctx<H>) {
    let e = ctx
        .store
        .enqueue(NewTask::new("E", "k").retry(RetryPolicy::fixed(1, Duration::ZERO)))
        .await
        .unwrap();
    let t = ctx.claim(e.id).await;
    assert_eq!(t.attempts, t.retry.max_attempts);
    ctx.backdate(e.id, TimeColumn::UpdatedAt, Duration::from_secs(300))
        .await;
    let r = ctx
        .store
        .manual_reset(e.id, Duration::from_secs(180))
        .await
        .unwrap();
    assert_eq!(
        (r.status, r.attempts, r.owner.as_deref()),
        (Status::Pending, 0, None)
    );
    assert!(
        !ctx.store.mark_success(t.lease()).await.unwrap(),
        "old worker is fenced out"
    );
}

/// manual_reset: refuses pending, succeeded and live running tasks (Conflict) and missing
/// ones (NotFound), changing nothing.
pub async fn manual_reset_refuses_other_states<H: Harness>(ctx: &Ctx<H>) {
    let stuck_after = Duration::from_secs(180);
    let pending = ctx.enqueue("E", "pending").await;
    let done = ctx.enqueue("E", "done").await;
    let l = ctx.claim(done).await.lease();
    ctx.store.mark_success(l).await.unwrap();
    // running on its last attempt with a live owner: normal, not stuck
    let live = ctx
        .store
        .enqueue(NewTask::new("E", "live").retry(RetryPolicy::fixed(1, Duration::ZERO)))
        .await
        .unwrap()
        .id;
    ctx.claim(live).await;
    ctx.backdate(live, TimeColumn::UpdatedAt, Duration::from_secs(60))
        .await;
    for (id, needle) in [
        (pending, "already pending"),
        (done, "succeeded"),
        (live, "owner is alive"),
    ] {
        let before = ctx.task(id).await;
        assert_kind(
            ctx.store.manual_reset(id, stuck_after).await,
            ErrorKind::Conflict,
            needle,
        );
        assert_eq!(ctx.task(id).await, before);
    }
    assert_kind(
        ctx.store.manual_reset(987_654_321, stuck_after).await,
        ErrorKind::NotFound,
        "does not exist",
    );
}

/// manual_reset returns the task as reset even while claimers poll the table: a reset
/// task is due at once, so a claimer may take it right after the reset commits, but the
/// returned row is the reset itself (pending, attempts 0, no owner), never a later claim.
pub async fn manual_reset_returns_the_reset_task_while_claimers_race<H: Harness>(ctx: &Ctx<H>) {
    use std::sync::atomic::{AtomicBool, Ordering};
    const TASKS: usize = 30;
    let mut ids = Vec::new();
    for i in 0..TASKS {
        let e = ctx
            .store
            .enqueue(NewTask::new("E", format!("k{i}")).retry(RetryPolicy::fixed(1, HOUR)))
            .await
            .unwrap();
        let t = ctx.claim(e.id).await;
        assert!(ctx
            .store
            .mark_retry(t.lease(), HOUR, "gave up")
            .await
            .unwrap());
        ids.push(e.id);
    }
    let stop = Arc::new(AtomicBool::new(false));
    let mut claimers = Vec::new();
    for c in 0..2 {
        let store = ctx.new_store().await;
        let stop = Arc::clone(&stop);
        claimers.push(tokio::spawn(async move {
            let me = owner(&format!("claimer-{c}"));
            let types = vec!["E".to_string()];
            let mut claimed = 0;
            while !stop.load(Ordering::SeqCst) {
                claimed += store.claim_batch(&me, &types, 10).await.unwrap().len();
            }
            claimed
        }));
    }
    for id in &ids {
        let r = ctx.store.manual_reset(*id, HOUR).await.unwrap();
        assert_eq!(
            (r.status, r.attempts, r.owner.as_deref()),
            (Status::Pending, 0, None),
            "task {id}: manual_reset must return the task as reset"
        );
        // let a claimer take it before the next reset
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while ctx.store.stats().await.unwrap().count(Status::Running) < TASKS as u64 {
        assert!(
            tokio::time::Instant::now() < deadline,
            "claimers never took every reset task"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    stop.store(true, Ordering::SeqCst);
    let claimed: usize = joined("the claimers", claimers).await.into_iter().sum();
    // every reset task is claimed again (exactly once) by the racing claimers
    assert_eq!(claimed, TASKS);
    for id in &ids {
        let t = ctx.task(*id).await;
        assert_eq!((t.status, t.attempts), (Status::Running, 1), "task {id}");
    }
}
