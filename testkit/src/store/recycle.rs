//! The dead-worker sweep.

use super::*;

/// recycle_dead: a dead task whose row another transaction holds is passed over and
/// counted (a sweep that passes locked rows), or waited for (one documented to wait);
/// either way the dead tasks behind it are recycled, and it is once its row is free.
pub async fn recycle_dead_passes_over_a_held_row_and_counts_it<H: Harness>(ctx: &Ctx<H>) {
    let dead = two_dead(ctx, "E").await;
    let Some(bound) = passing_bound(ctx, "no row locks: nothing to pass over") else {
        return;
    };
    let lock = ctx
        .harness
        .lock_row(&ctx.db, &ctx.config.table, dead[0])
        .await;
    let sweep = ctx.store.recycle_dead(MINUTE, 50);
    match bound {
        Some(_) => {
            let r = within("a sweep past a held row", sweep).await.unwrap();
            assert_eq!(
                (r.to_pending, r.to_failed, r.passed_over),
                (1, 0, 1),
                "the one behind recycled, the held one passed over"
            );
            let held = ctx.task(dead[0]).await;
            assert_eq!(
                (held.status, held.owner.as_deref()),
                (Status::Running, Some("testkit-owner")),
                "the held row is untouched"
            );
            // the lock's connection closes in the background: sweep until it is gone
            drop(lock);
            let r = within("the lock to go", async {
                loop {
                    let r = ctx.store.recycle_dead(MINUTE, 50).await.unwrap();
                    if r.passed_over == 0 {
                        return r;
                    }
                    tokio::time::sleep(Duration::from_millis(20)).await;
                }
            })
            .await;
            assert_eq!((r.to_pending, r.to_failed, r.passed_over), (1, 0, 0));
        }
        None => {
            let mut sweep = Box::pin(sweep);
            assert_still_waiting(&mut sweep, "behind the lock").await;
            drop(lock);
            let r = within("a sweep after the lock is released", sweep)
                .await
                .unwrap();
            assert_eq!((r.to_pending, r.to_failed, r.passed_over), (2, 0, 0));
        }
    }
    for id in dead {
        let t = ctx.task(id).await;
        assert_eq!((t.status, t.attempts, t.owner), (Status::Pending, 1, None));
    }
}

/// recycle_dead: a silent running task with attempts left goes back to pending.
pub async fn recycle_dead_returns_task_to_pending_when_attempts_remain<H: Harness>(ctx: &Ctx<H>) {
    let id = ctx.enqueue("E", "k").await;
    let t = ctx.claim(id).await;
    ctx.backdate(id, TimeColumn::UpdatedAt, Duration::from_secs(181))
        .await;
    let t0 = Utc::now();
    let r = ctx
        .store
        .recycle_dead(Duration::from_secs(180), 50)
        .await
        .unwrap();
    let t1 = Utc::now();
    assert_eq!((r.to_pending, r.to_failed, r.passed_over), (1, 0, 0));
    let p = ctx.task(id).await;
    assert_eq!(p.status, Status::Pending);
    assert_eq!(p.owner, None);
    assert_eq!(p.attempts, 1, "the dead attempt counts");
    assert_eq!(p.lease, t.lease);
    assert!(p.next_run_at <= Utc::now(), "due at once");
    assert_between("updated_at", p.updated_at, t0, t1);
    let err = p.last_error.expect("last_error says what happened");
    assert!(
        err.contains("testkit-owner") && err.contains("heartbeat"),
        "{err}"
    );
    assert_eq!(ctx.claim(id).await.attempts, 2);
}

/// recycle_dead: a silent running task on its last attempt parks as failed.
pub async fn recycle_dead_fails_task_on_its_last_attempt<H: Harness>(ctx: &Ctx<H>) {
    let e = ctx
        .store
        .enqueue(NewTask::new("E", "k").retry(RetryPolicy::fixed(1, Duration::ZERO)))
        .await
        .unwrap();
    ctx.claim(e.id).await;
    ctx.backdate(e.id, TimeColumn::UpdatedAt, Duration::from_secs(600))
        .await;
    let r = ctx.store.recycle_dead(MINUTE, 50).await.unwrap();
    assert_eq!((r.to_pending, r.to_failed, r.total()), (0, 1, 1));
    let f = ctx.task(e.id).await;
    assert_eq!(f.status, Status::Failed);
    assert_eq!(f.owner, None);
    assert_eq!(f.attempts, 1);
    let err = f.last_error.expect("last_error");
    assert!(err.contains("no attempts left"), "{err}");
}

/// recycle_dead: never touches a running task that is alive, nor any task not running,
/// even when they are old: a sweep with a dead task among live, old finished, old
/// pending, old cancelled and old waiting ones changes the dead one only.
pub async fn recycle_dead_never_touches_live_or_finished_tasks<H: Harness>(ctx: &Ctx<H>) {
    // the dead one: a second attempt whose worker went silent an hour ago
    let dead = ctx
        .store
        .enqueue(NewTask::new("E", "dead").retry(RetryPolicy::fixed(5, Duration::ZERO)))
        .await
        .unwrap()
        .id;
    let first = ctx.claim(dead).await;
    assert!(ctx
        .store
        .mark_retry(first.lease(), Duration::ZERO, "x")
        .await
        .unwrap());
    ctx.claim(dead).await;
    ctx.backdate(dead, TimeColumn::UpdatedAt, HOUR).await;
    let cancelled = ctx.enqueue("E", "cancelled").await;
    ctx.store
        .cancel(cancelled, &backstop_core::Audit::new("op", "no"))
        .await
        .unwrap();
    let front = ctx
        .store
        .enqueue(NewTask::new("E", "front").order_key("key"))
        .await
        .unwrap()
        .id;
    let waiting = ctx
        .store
        .enqueue(NewTask::new("E", "waiting").order_key("key"))
        .await
        .unwrap()
        .id;
    assert_eq!(ctx.task(waiting).await.status, Status::Waiting);
    for id in [cancelled, front, waiting] {
        ctx.backdate(id, TimeColumn::UpdatedAt, HOUR).await;
    }
    let live = ctx.enqueue("E", "live").await;
    ctx.claim(live).await;
    ctx.backdate(live, TimeColumn::UpdatedAt, Duration::from_secs(50))
        .await;
    let pending = ctx.enqueue("E", "pending").await;
    let done = ctx.enqueue("E", "done").await;
    let l = ctx.claim(done).await.lease();
    ctx.store.mark_success(l).await.unwrap();
    let failed = ctx.enqueue("E", "failed").await;
    let l = ctx.claim(failed).await.lease();
    ctx.store.mark_fail(l, "x").await.unwrap();
    for id in [pending, done, failed] {
        ctx.backdate(id, TimeColumn::UpdatedAt, HOUR).await;
    }
    let mut before = Vec::new();
    for id in [live, pending, done, failed, cancelled, front, waiting] {
        before.push(ctx.task(id).await);
    }
    let r = ctx.store.recycle_dead(MINUTE, 50).await.unwrap();
    assert_eq!(
        (r.to_pending, r.to_failed, r.passed_over),
        (1, 0, 0),
        "the dead one only"
    );
    let d = ctx.task(dead).await;
    assert_eq!(
        (d.status, d.attempts, d.lease, d.owner.as_deref()),
        (Status::Pending, 2, 2, None)
    );
    for t in before {
        assert_eq!(ctx.task(t.id).await, t, "task {} untouched", t.biz_key);
    }
    assert_eq!(ctx.store.recycle_dead(MINUTE, 50).await.unwrap().total(), 0);
    assert_eq!(ctx.store.recycle_dead(MINUTE, 0).await.unwrap().total(), 0);
    assert_kind(
        ctx.store.recycle_dead(MINUTE, MAX_BATCH + 1).await,
        ErrorKind::InvalidInput,
        "limit",
    );
}

/// recycle_dead: at most `limit`, the longest-silent first.
pub async fn recycle_dead_respects_limit_oldest_first<H: Harness>(ctx: &Ctx<H>) {
    let mut ids = Vec::new();
    for i in 0..4u64 {
        let id = ctx.enqueue("E", &format!("k{i}")).await;
        ctx.claim(id).await;
        // k3 silent longest, then k2, k1, k0
        ctx.backdate(id, TimeColumn::UpdatedAt, Duration::from_secs(600 + 60 * i))
            .await;
        ids.push(id);
    }
    assert_eq!(
        ctx.store.recycle_dead(MINUTE, 2).await.unwrap().to_pending,
        2
    );
    let statuses: Vec<Status> = {
        let mut v = Vec::new();
        for id in &ids {
            v.push(ctx.task(*id).await.status);
        }
        v
    };
    assert_eq!(
        statuses,
        vec![
            Status::Running,
            Status::Running,
            Status::Pending,
            Status::Pending
        ]
    );
    assert_eq!(
        ctx.store.recycle_dead(MINUTE, 10).await.unwrap().to_pending,
        2
    );
    assert_eq!(ctx.store.stats().await.unwrap().count(Status::Running), 0);
}

/// recycle_dead counts the rows it changed, whatever runs beside it: sweeps on several
/// stores race each other and claimers that take the recycled tasks at once, and every
/// dead task is counted exactly once, as pending (attempts left) or failed (its last
/// attempt died).
pub async fn recycle_dead_counts_what_it_recycles_while_claimers_race<H: Harness>(ctx: &Ctx<H>) {
    use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
    const DEAD: usize = 120;
    const LAST_ATTEMPT: usize = DEAD / 4;
    for i in 0..DEAD {
        // every fourth task may start only once: its dead attempt was its last
        let max_attempts = if i % 4 == 0 { 1 } else { 5 };
        let task =
            NewTask::new("E", format!("k{i}")).retry(RetryPolicy::fixed(max_attempts, MINUTE));
        let id = ctx.store.enqueue(task).await.unwrap().id;
        ctx.claim(id).await;
        ctx.backdate(id, TimeColumn::UpdatedAt, HOUR).await;
    }
    let (to_pending, to_failed) = (Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0)));
    let swept = Arc::new(AtomicBool::new(false));
    let mut sweepers = Vec::new();
    for _ in 0..2 {
        let store = ctx.new_store().await;
        let (p, f) = (Arc::clone(&to_pending), Arc::clone(&to_failed));
        sweepers.push(tokio::spawn(async move {
            loop {
                let r = store.recycle_dead(MINUTE, 7).await.unwrap();
                p.fetch_add(r.to_pending, Ordering::SeqCst);
                f.fetch_add(r.to_failed, Ordering::SeqCst);
                if r.total() == 0 {
                    return;
                }
            }
        }));
    }
    let mut claimers = Vec::new();
    for c in 0..3 {
        let store = ctx.new_store().await;
        let swept = Arc::clone(&swept);
        claimers.push(tokio::spawn(async move {
            let me = Owner::new(format!("claimer{c}")).unwrap();
            let mut claimed = 0;
            while !swept.load(Ordering::SeqCst) {
                claimed += store
                    .claim_batch(&me, &["E".into()], 5)
                    .await
                    .unwrap()
                    .len();
            }
            claimed
        }));
    }
    joined("the sweepers", sweepers).await;
    swept.store(true, Ordering::SeqCst);
    let claimed: usize = joined("the claimers", claimers).await.into_iter().sum();
    // nothing dead is left behind
    let last = ctx.store.recycle_dead(MINUTE, 1000).await.unwrap();
    assert_eq!(last.total(), 0, "the sweeps left dead tasks: {last:?}");
    assert_eq!(
        (
            to_pending.load(Ordering::SeqCst),
            to_failed.load(Ordering::SeqCst)
        ),
        ((DEAD - LAST_ATTEMPT) as u64, LAST_ATTEMPT as u64),
        "each dead task counted once"
    );
    let s = ctx.store.stats().await.unwrap();
    assert_eq!(s.count(Status::Failed), LAST_ATTEMPT as u64);
    assert_eq!(
        s.count(Status::Running),
        claimed as u64,
        "claimed again once"
    );
    assert_eq!(
        s.count(Status::Pending) + s.count(Status::Running),
        (DEAD - LAST_ATTEMPT) as u64
    );
}
