//! Attempt arithmetic on tasks with several attempts behind them: a release gives back
//! only its own attempt, a recycle counts the dead one, a recycle on the last of several
//! parks the task, and a reset starts over; the lease only ever grows.

use super::*;

/// A task of `max` attempts with `n` failed ones behind it (claimed, then retried with no
/// wait, `last_error` "attempt k"): pending and due, `n` attempts and lease `n`.
async fn worn<H: Harness>(ctx: &Ctx<H>, max: u32, n: u32) -> TaskId {
    let id = ctx
        .store
        .enqueue(NewTask::new("E", "k").retry(policy(max)))
        .await
        .unwrap()
        .id;
    for k in 1..=n {
        let t = ctx.claim(id).await;
        assert_eq!((t.attempts, t.lease), (k, i64::from(k)));
        assert!(ctx
            .store
            .mark_retry(t.lease(), Duration::ZERO, &format!("attempt {k}"))
            .await
            .unwrap());
    }
    let t = ctx.task(id).await;
    assert_eq!(
        (t.status, t.attempts, t.lease),
        (Status::Pending, n, i64::from(n))
    );
    id
}

fn policy(max: u32) -> RetryPolicy {
    RetryPolicy::fixed(max, Duration::from_secs(30))
}

/// release after three failed attempts: back to pending with those three, not the fourth
/// (nor fewer), the earlier error kept, the lease not given back; the next claim is
/// attempt 4 under lease 5.
pub async fn release_after_earlier_attempts_gives_back_only_its_own<H: Harness>(ctx: &Ctx<H>) {
    let id = worn(ctx, 4, 3).await;
    let t = ctx.claim(id).await;
    assert_eq!((t.attempts, t.lease), (4, 4));
    assert!(!t.has_attempts_left());
    assert!(ctx.store.release(t.lease()).await.unwrap());
    let r = ctx.task(id).await;
    assert_eq!(
        (r.status, r.attempts, r.lease, r.owner.as_deref()),
        (Status::Pending, 3, 4, None)
    );
    assert_eq!(r.last_error.as_deref(), Some("attempt 3"));
    let again = ctx.claim(id).await;
    assert_eq!((again.attempts, again.lease), (4, 5));
}

/// recycle after two failed attempts: the dead third attempt counts (3 of 5), pending and
/// due at once; the next claim is attempt 4 under lease 4, and the dead lease is fenced.
pub async fn recycle_after_earlier_attempts_counts_the_dead_one<H: Harness>(ctx: &Ctx<H>) {
    let id = worn(ctx, 5, 2).await;
    let dead = ctx.claim(id).await;
    assert_eq!((dead.attempts, dead.lease), (3, 3));
    ctx.backdate(id, TimeColumn::UpdatedAt, HOUR).await;
    let r = ctx.store.recycle_dead(MINUTE, 10).await.unwrap();
    assert_eq!((r.to_pending, r.to_failed), (1, 0));
    let p = ctx.task(id).await;
    assert_eq!(
        (p.status, p.attempts, p.lease, p.owner.as_deref()),
        (Status::Pending, 3, 3, None)
    );
    assert!(p.next_run_at <= Utc::now(), "due at once");
    let again = ctx.claim(id).await;
    assert_eq!((again.attempts, again.lease), (4, 4));
    assert!(
        !ctx.store.mark_success(dead.lease()).await.unwrap(),
        "the dead attempt's lease is fenced"
    );
}

/// recycle on the last of four attempts (three failed before): parked as failed with all
/// four counted; the dead lease is fenced.
pub async fn recycle_on_the_last_of_several_attempts_parks_it<H: Harness>(ctx: &Ctx<H>) {
    let id = worn(ctx, 4, 3).await;
    let dead = ctx.claim(id).await;
    assert_eq!((dead.attempts, dead.lease), (4, 4));
    ctx.backdate(id, TimeColumn::UpdatedAt, HOUR).await;
    let r = ctx.store.recycle_dead(MINUTE, 10).await.unwrap();
    assert_eq!((r.to_pending, r.to_failed), (0, 1));
    let f = ctx.task(id).await;
    assert_eq!(
        (f.status, f.attempts, f.lease, f.owner.as_deref()),
        (Status::Failed, 4, 4, None)
    );
    assert!(!ctx.store.mark_success(dead.lease()).await.unwrap());
}

/// reset after three attempts parked the task: attempts start over at 0 (the next claim
/// is attempt 1 of 3 again), the lease keeps growing (4), the last error is kept.
pub async fn reset_after_several_attempts_starts_over<H: Harness>(ctx: &Ctx<H>) {
    let id = worn(ctx, 3, 2).await;
    let last = ctx.claim(id).await;
    assert!(ctx
        .store
        .mark_retry(last.lease(), Duration::ZERO, "attempt 3")
        .await
        .unwrap());
    let f = ctx.task(id).await;
    assert_eq!((f.status, f.attempts, f.lease), (Status::Failed, 3, 3));
    let r = ctx.store.manual_reset(id, MINUTE).await.unwrap();
    assert_eq!(
        (r.status, r.attempts, r.lease, r.last_error.as_deref()),
        (Status::Pending, 0, 3, Some("attempt 3"))
    );
    let again = ctx.claim(id).await;
    assert_eq!((again.attempts, again.lease), (1, 4));
    assert!(again.has_attempts_left());
    assert!(!ctx.store.mark_success(last.lease()).await.unwrap());
}
