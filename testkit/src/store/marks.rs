//! Marks and heartbeats: every change of a running task fenced by its lease.

use super::*;

/// mark_success with the current lease: succeeded, last_error cleared, owner kept.
pub async fn mark_success_with_current_lease<H: Harness>(ctx: &Ctx<H>) {
    let id = ctx.enqueue("E", "k").await;
    let t = ctx.claim(id).await;
    assert!(ctx
        .store
        .mark_retry(t.lease(), Duration::ZERO, "first try failed")
        .await
        .unwrap());
    let t = ctx.claim(id).await;
    assert_eq!(t.last_error.as_deref(), Some("first try failed"));
    let t0 = Utc::now();
    assert!(ctx.store.mark_success(t.lease()).await.unwrap());
    let t1 = Utc::now();
    let done = ctx.task(id).await;
    assert_eq!(done.status, Status::Succeeded);
    assert_eq!(done.attempts, 2);
    assert_eq!(done.lease, 2);
    assert_eq!(done.last_error, None);
    assert_eq!(done.owner.as_deref(), Some("testkit-owner"));
    assert_between("updated_at", done.updated_at, t0, t1);
}

/// a stale lease (task recycled and claimed again) can change nothing, and says so.
pub async fn stale_lease_changes_nothing<H: Harness>(ctx: &Ctx<H>) {
    let id = ctx.enqueue("E", "k").await;
    let old = ctx.claim(id).await;
    ctx.backdate(id, TimeColumn::UpdatedAt, Duration::from_secs(600))
        .await;
    let r = ctx.store.recycle_dead(MINUTE, 10).await.unwrap();
    assert_eq!(r.to_pending, 1);
    let new = ctx
        .store
        .claim_by_id(id, &owner("successor"))
        .await
        .unwrap()
        .expect("successor claims");
    assert_eq!(new.lease, old.lease + 1);
    let snapshot = ctx.task(id).await;
    let l = old.lease();
    assert!(!ctx.store.mark_success(l).await.unwrap());
    assert!(!ctx.store.mark_retry(l, MINUTE, "late").await.unwrap());
    assert!(!ctx.store.mark_fail(l, "late").await.unwrap());
    assert!(!ctx.store.release(l).await.unwrap());
    assert_eq!(ctx.store.heartbeat(&[l]).await.unwrap(), vec![false]);
    assert_eq!(
        ctx.task(id).await,
        snapshot,
        "the successor's claim is intact"
    );
    // a lease from the future is just as stale
    let future = backstop_core::Lease {
        task_id: id,
        token: new.lease + 1,
    };
    assert!(!ctx.store.mark_success(future).await.unwrap());
    assert!(ctx.store.mark_success(new.lease()).await.unwrap());
    assert_eq!(ctx.task(id).await.owner.as_deref(), Some("successor"));
}

/// marks on a task that is not running (pending, finished, missing) change nothing.
pub async fn mark_on_a_task_not_running_changes_nothing<H: Harness>(ctx: &Ctx<H>) {
    let id = ctx.enqueue("E", "k").await;
    let pending = ctx.task(id).await;
    assert!(!ctx.store.mark_success(pending.lease()).await.unwrap());
    assert!(!ctx.store.release(pending.lease()).await.unwrap());
    assert_eq!(ctx.task(id).await, pending);
    let t = ctx.claim(id).await;
    assert!(ctx.store.mark_success(t.lease()).await.unwrap());
    let done = ctx.task(id).await;
    assert!(!ctx.store.mark_success(t.lease()).await.unwrap(), "twice");
    assert!(!ctx.store.mark_fail(t.lease(), "x").await.unwrap());
    assert!(!ctx.store.mark_retry(t.lease(), MINUTE, "x").await.unwrap());
    assert_eq!(ctx.task(id).await, done);
    let missing = backstop_core::Lease {
        task_id: 987_654_321,
        token: 1,
    };
    assert!(!ctx.store.mark_success(missing).await.unwrap());
}

/// mark_retry: pending, owner cleared, next_run_at = updated_at + delay exactly,
/// last_error set; FIXED policy yields the same delay every time.
pub async fn mark_retry_fixed_schedules_exact_delay<H: Harness>(ctx: &Ctx<H>) {
    let interval = Duration::from_millis(45_250);
    let e = ctx
        .store
        .enqueue(NewTask::new("E", "k").retry(RetryPolicy::fixed(4, interval)))
        .await
        .unwrap();
    for n in 1..=3u32 {
        if n > 1 {
            ctx.backdate(e.id, TimeColumn::NextRunAt, interval + MINUTE)
                .await;
        }
        let t = ctx.claim(e.id).await;
        assert_eq!(t.retry_delay(), interval);
        let t0 = Utc::now();
        assert!(ctx
            .store
            .mark_retry(t.lease(), t.retry_delay(), &format!("failure {n}"))
            .await
            .unwrap());
        let t1 = Utc::now();
        let r = ctx.task(e.id).await;
        assert_eq!(r.status, Status::Pending);
        assert_eq!(r.owner, None);
        assert_eq!(r.attempts, n);
        assert_eq!(
            r.last_error.as_deref(),
            Some(format!("failure {n}").as_str())
        );
        assert_between("updated_at", r.updated_at, t0, t1);
        assert_eq!(r.next_run_at - r.updated_at, chrono_dur(interval));
        assert!(
            ctx.store
                .claim_by_id(e.id, &ctx.owner)
                .await
                .unwrap()
                .is_none(),
            "not due before the backoff has passed"
        );
    }
}

/// mark_retry with the EXPONENTIAL policy: interval·2^(n−1), capped (jitter off, so the
/// schedule is exact).
pub async fn mark_retry_exponential_doubles_and_caps<H: Harness>(ctx: &Ctx<H>) {
    let initial = Duration::from_secs(10);
    let cap = Duration::from_secs(35);
    let policy = RetryPolicy::exponential(6, initial)
        .with_max_interval(cap)
        .jitter(0);
    let e = ctx
        .store
        .enqueue(NewTask::new("E", "k").retry(policy))
        .await
        .unwrap();
    let expected = [10, 20, 35, 35, 35];
    for (i, secs) in expected.into_iter().enumerate() {
        if i > 0 {
            ctx.backdate(e.id, TimeColumn::NextRunAt, HOUR).await;
        }
        let t = ctx.claim(e.id).await;
        assert_eq!(t.attempts as usize, i + 1);
        assert_eq!(t.retry_delay(), Duration::from_secs(secs));
        assert!(ctx
            .store
            .mark_retry(t.lease(), t.retry_delay(), "down")
            .await
            .unwrap());
        let r = ctx.task(e.id).await;
        assert_eq!(r.status, Status::Pending);
        assert_eq!(
            r.next_run_at - r.updated_at,
            chrono::Duration::seconds(secs as i64),
            "attempt {}",
            i + 1
        );
    }
    assert_eq!(
        ctx.task(e.id).await.retry.backoff,
        Backoff::exponential(initial, cap)
    );
}

/// mark_retry on the last attempt parks the task as failed (next_run_at unchanged).
pub async fn mark_retry_on_last_attempt_fails_the_task<H: Harness>(ctx: &Ctx<H>) {
    let e = ctx
        .store
        .enqueue(NewTask::new("E", "k").retry(RetryPolicy::fixed(2, Duration::ZERO)))
        .await
        .unwrap();
    let t = ctx.claim(e.id).await;
    assert!(t.has_attempts_left());
    assert!(ctx
        .store
        .mark_retry(t.lease(), Duration::ZERO, "one")
        .await
        .unwrap());
    let t = ctx.claim(e.id).await;
    assert!(!t.has_attempts_left());
    let before = ctx.task(e.id).await;
    assert!(ctx
        .store
        .mark_retry(t.lease(), MINUTE, "two")
        .await
        .unwrap());
    let f = ctx.task(e.id).await;
    assert_eq!(f.status, Status::Failed);
    assert_eq!(f.attempts, 2);
    assert_eq!(f.owner, None);
    assert_eq!(f.last_error.as_deref(), Some("two"));
    assert_eq!(f.next_run_at, before.next_run_at);
    assert!(ctx
        .store
        .claim_by_id(e.id, &ctx.owner)
        .await
        .unwrap()
        .is_none());
}

/// mark_fail: failed for good, whatever attempts remain.
pub async fn mark_fail_parks_the_task_as_failed<H: Harness>(ctx: &Ctx<H>) {
    let id = ctx.enqueue("E", "k").await;
    let t = ctx.claim(id).await;
    let t0 = Utc::now();
    assert!(ctx
        .store
        .mark_fail(t.lease(), "payload does not decode")
        .await
        .unwrap());
    let t1 = Utc::now();
    let f = ctx.task(id).await;
    assert_eq!(f.status, Status::Failed);
    assert_eq!(f.attempts, 1);
    assert_eq!(f.owner, None);
    assert_eq!(f.last_error.as_deref(), Some("payload does not decode"));
    assert_between("updated_at", f.updated_at, t0, t1);
    let s = ctx.store.stats().await.unwrap();
    assert_eq!(s.count(Status::Failed), 1);
    assert_eq!(s.count(Status::Pending), 0);
}

/// mark cancel (a handler's decision): cancelled for good, whatever attempts remain, the
/// reason as `last_error` (cut to the error limit), owner cleared, attempts and due time
/// unchanged; fenced like every mark: a stale lease, or a second mark, changes nothing.
pub async fn mark_cancel_ends_the_task_cancelled_with_its_reason<H: Harness>(ctx: &Ctx<H>) {
    let id = ctx.enqueue("E", "k").await;
    let before = ctx.task(id).await;
    let t = ctx.claim(id).await;
    let stale = backstop_core::Lease {
        task_id: id,
        token: t.lease + 1,
    };
    assert_eq!(
        ctx.store
            .mark(&[Mark::cancel(stale, "stale")])
            .await
            .unwrap(),
        vec![false]
    );
    assert_eq!(ctx.task(id).await.status, Status::Running);
    let t0 = Utc::now();
    let flags = ctx
        .store
        .mark(&[Mark::cancel(t.lease(), "the order was withdrawn")])
        .await
        .unwrap();
    let t1 = Utc::now();
    assert_eq!(flags, vec![true]);
    let c = ctx.task(id).await;
    assert_eq!(
        (c.status, c.attempts, c.owner.as_deref(), c.lease),
        (Status::Cancelled, 1, None, t.lease)
    );
    assert_eq!(c.last_error.as_deref(), Some("the order was withdrawn"));
    assert_eq!(c.next_run_at, before.next_run_at);
    assert_between("updated_at", c.updated_at, t0, t1);
    assert_eq!(
        ctx.store.mark(&[Mark::success(t.lease())]).await.unwrap(),
        vec![false],
        "a cancelled task takes no further mark"
    );
    let long = ctx.enqueue("E", "k-long").await;
    let t = ctx.claim(long).await;
    let reason = "r".repeat(MAX_ERROR_BYTES + 100);
    assert!(
        ctx.store
            .mark(&[Mark::cancel(t.lease(), reason)])
            .await
            .unwrap()[0]
    );
    let c = ctx.task(long).await;
    assert_eq!(c.last_error.map(|e| e.len() <= MAX_ERROR_BYTES), Some(true));
    let s = ctx.store.stats().await.unwrap();
    assert_eq!(s.count(Status::Cancelled), 2);
}

/// mark snooze (a handler's decision): within its bound, pending again with the attempt
/// given back, due `delay` from now exactly, `last_error` kept, owner cleared; past the
/// bound (`max` snoozes counted over the task's life), a retry with its error: with no
/// attempt left, failed. Fenced like every mark; a delay beyond the limit is refused.
pub async fn mark_snooze_gives_the_attempt_back_up_to_its_bound<H: Harness>(ctx: &Ctx<H>) {
    let e = ctx
        .store
        .enqueue(NewTask::new("E", "k").retry(RetryPolicy::fixed(2, Duration::ZERO)))
        .await
        .unwrap();
    let t = ctx.claim(e.id).await;
    assert!(ctx
        .store
        .mark_retry(t.lease(), Duration::ZERO, "first failure")
        .await
        .unwrap());
    let over = "snoozed more than 2 times";
    for n in 1..=2 {
        let t = ctx.claim(e.id).await;
        assert_eq!(t.attempts, 2, "snooze {n}: the last attempt");
        let stale = backstop_core::Lease {
            task_id: t.id,
            token: t.lease + 1,
        };
        assert_eq!(
            ctx.store
                .mark(&[Mark::snooze(stale, MINUTE, 2, over)])
                .await
                .unwrap(),
            vec![false]
        );
        let flags = ctx
            .store
            .mark(&[Mark::snooze(t.lease(), MINUTE, 2, over)])
            .await
            .unwrap();
        assert_eq!(flags, vec![true]);
        let s = ctx.task(e.id).await;
        assert_eq!(
            (s.status, s.attempts, s.owner.as_deref(), s.snoozes),
            (Status::Pending, 1, None, n),
            "snooze {n}: the attempt given back, counted"
        );
        assert_eq!(s.last_error.as_deref(), Some("first failure"), "snooze {n}");
        assert_eq!(
            s.next_run_at - s.updated_at,
            chrono_dur(MINUTE),
            "snooze {n}"
        );
        // due in a minute: made due now to claim it again
        ctx.backdate(e.id, TimeColumn::NextRunAt, 2 * MINUTE).await;
    }
    let t = ctx.claim(e.id).await;
    assert!(
        ctx.store
            .mark(&[Mark::snooze(t.lease(), MINUTE, 2, over)])
            .await
            .unwrap()[0]
    );
    let f = ctx.task(e.id).await;
    assert_eq!(
        (f.status, f.attempts, f.last_error.as_deref(), f.snoozes),
        (Status::Failed, 2, Some(over), 2),
        "the third snooze is past the bound: a retry, and no attempt is left"
    );
    // an operator's reset gives the snoozes back with the attempts
    let r = ctx
        .store
        .reset(e.id, &backstop_core::Audit::new("ops", "again"))
        .await
        .unwrap();
    assert_eq!((r.status, r.attempts, r.snoozes), (Status::Pending, 0, 0));
    assert_eq!(ctx.task(e.id).await.snoozes, 0, "as stored");
    let long = Mark::snooze(t.lease(), Duration::from_secs(400 * 24 * 3600), 2, "x");
    assert_kind(
        ctx.store.mark(&[long]).await,
        ErrorKind::InvalidInput,
        "snooze delay",
    );
}

/// mark: a batch applies each mark in order and answers one flag per mark.
pub async fn mark_batch_applies_in_order_and_reports_each<H: Harness>(ctx: &Ctx<H>) {
    let mut tasks = Vec::new();
    for i in 0..4 {
        let id = ctx.enqueue("E", &format!("k{i}")).await;
        tasks.push(ctx.claim(id).await);
    }
    let stale = backstop_core::Lease {
        task_id: tasks[0].id,
        token: 99,
    };
    let marks = vec![
        Mark::success(tasks[0].lease()),
        Mark::retry(tasks[1].lease(), MINUTE, "later"),
        Mark::fail(tasks[2].lease(), "bad"),
        Mark::release(tasks[3].lease()),
        Mark::success(stale),
        Mark::fail(tasks[0].lease(), "second mark of an already succeeded task"),
    ];
    let flags = ctx.store.mark(&marks).await.unwrap();
    assert_eq!(flags, vec![true, true, true, true, false, false]);
    assert_eq!(ctx.task(tasks[0].id).await.status, Status::Succeeded);
    assert_eq!(ctx.task(tasks[1].id).await.status, Status::Pending);
    assert_eq!(ctx.task(tasks[2].id).await.status, Status::Failed);
    let released = ctx.task(tasks[3].id).await;
    assert_eq!((released.status, released.attempts), (Status::Pending, 0));
    assert!(ctx.store.mark(&[]).await.unwrap().is_empty());
    let too_long = Mark::retry(tasks[1].lease(), Duration::from_secs(400 * 24 * 3600), "x");
    assert_kind(
        ctx.store.mark(&[too_long]).await,
        ErrorKind::InvalidInput,
        "retry delay",
    );
}

/// release: running → pending without spending the attempt; due as before.
pub async fn release_gives_the_attempt_back<H: Harness>(ctx: &Ctx<H>) {
    let e = ctx
        .store
        .enqueue(NewTask::new("E", "k").retry(RetryPolicy::fixed(1, Duration::ZERO)))
        .await
        .unwrap();
    let before = ctx.task(e.id).await;
    let t = ctx.claim(e.id).await;
    assert!(!t.has_attempts_left());
    assert!(ctx.store.release(t.lease()).await.unwrap());
    let r = ctx.task(e.id).await;
    assert_eq!(r.status, Status::Pending);
    assert_eq!(r.attempts, 0);
    assert_eq!(r.owner, None);
    assert_eq!(
        r.lease, 1,
        "the lease is not given back: the old claim stays dead"
    );
    assert_eq!(r.next_run_at, before.next_run_at);
    assert_eq!(r.last_error, None);
    // the single allowed attempt is still there
    let again = ctx.claim(e.id).await;
    assert_eq!((again.attempts, again.lease), (1, 2));
    assert!(
        !ctx.store.release(t.lease()).await.unwrap(),
        "old lease is stale"
    );
}

/// heartbeat: refreshes updated_at of held leases so recycling skips them; reports each.
pub async fn heartbeat_keeps_a_long_task_alive<H: Harness>(ctx: &Ctx<H>) {
    let a = ctx.enqueue("E", "a").await;
    let b = ctx.enqueue("E", "b").await;
    let ta = ctx.claim(a).await;
    let tb = ctx.claim(b).await;
    ctx.backdate(a, TimeColumn::UpdatedAt, Duration::from_secs(600))
        .await;
    ctx.backdate(b, TimeColumn::UpdatedAt, Duration::from_secs(600))
        .await;
    let stale = backstop_core::Lease {
        task_id: b,
        token: tb.lease + 5,
    };
    let t0 = Utc::now();
    let flags = ctx.store.heartbeat(&[ta.lease(), stale]).await.unwrap();
    let t1 = Utc::now();
    assert_eq!(flags, vec![true, false]);
    let ha = ctx.task(a).await;
    assert_between("updated_at", ha.updated_at, t0, t1);
    assert_eq!((ha.status, ha.attempts, ha.lease), (Status::Running, 1, 1));
    let r = ctx.store.recycle_dead(MINUTE, 50).await.unwrap();
    assert_eq!(
        r.to_pending, 1,
        "only the task without a heartbeat is recycled"
    );
    assert_eq!(ctx.task(a).await.status, Status::Running);
    assert_eq!(ctx.task(b).await.status, Status::Pending);
    assert!(ctx.store.heartbeat(&[]).await.unwrap().is_empty());
    assert!(ctx.store.mark_success(ta.lease()).await.unwrap());
}

/// heartbeat never waits for another transaction's lock on a row: with two leased rows
/// locked elsewhere (one under its current lease, one whose lease the caller names
/// stale), a heartbeat of them and of a free one answers while the locks are held:
/// `[true, true, false]`, the free row refreshed, the held ones untouched; once the locks
/// are gone the next heartbeat refreshes the held row it still owns.
pub async fn heartbeat_never_waits_for_a_row_another_transaction_holds<H: Harness>(ctx: &Ctx<H>) {
    let case = "heartbeat_never_waits_for_a_row_another_transaction_holds";
    let ids = [
        ctx.enqueue("E", "free").await,
        ctx.enqueue("E", "held").await,
        ctx.enqueue("E", "gone").await,
    ];
    let mut leases = Vec::new();
    for id in ids {
        leases.push(ctx.claim(id).await.lease());
        ctx.backdate(id, TimeColumn::UpdatedAt, Duration::from_secs(600))
            .await;
    }
    leases[2].token += 5;
    let old = ctx.task(ids[1]).await.updated_at;
    let Some(held) = ctx.hold_row(ids[1], case).await else {
        return;
    };
    let Some(gone) = ctx.hold_row(ids[2], case).await else {
        return;
    };
    let t0 = Utc::now();
    // a heartbeat that waits for the locks waits until the deadline: they are released
    // only after it answers
    let flags = tokio::time::timeout(Duration::from_secs(20), ctx.store.heartbeat(&leases))
        .await
        .expect("the heartbeat waited for the rows' locks")
        .unwrap();
    let t1 = Utc::now();
    assert_eq!(flags, vec![true, true, false]);
    gone.release().await;
    held.release().await;
    assert_between("updated_at", ctx.task(ids[0]).await.updated_at, t0, t1);
    let h = ctx.task(ids[1]).await;
    assert_eq!(
        (h.status, h.attempts, h.lease, h.updated_at),
        (Status::Running, 1, 1, old),
        "the held row is left as it was"
    );
    let t2 = Utc::now();
    let again = ctx.store.heartbeat(&leases[..2]).await.unwrap();
    assert_eq!(again, vec![true, true]);
    assert_between(
        "updated_at",
        ctx.task(ids[1]).await.updated_at,
        t2,
        Utc::now(),
    );
    let r = ctx.store.recycle_dead(MINUTE, 50).await.unwrap();
    assert_eq!(r.to_pending, 1, "only the task whose lease was named stale");
    assert_eq!(ctx.task(ids[2]).await.status, Status::Pending);
}

/// last_error is cut to MAX_ERROR_BYTES at a character boundary.
pub async fn last_error_is_bounded<H: Harness>(ctx: &Ctx<H>) {
    let id = ctx.enqueue("E", "k").await;
    let t = ctx.claim(id).await;
    let long = format!("x{}", "€".repeat(3 * MAX_ERROR_BYTES));
    assert!(ctx.store.mark_fail(t.lease(), &long).await.unwrap());
    let e = ctx.task(id).await.last_error.unwrap();
    assert!(
        e.len() <= MAX_ERROR_BYTES && e.len() > MAX_ERROR_BYTES - 4,
        "{}",
        e.len()
    );
    assert!(long.starts_with(&e));
}

/// A heartbeat and a mark of the same running rows, racing on two connections with the
/// leases in opposite orders, never deadlock: both return without waiting out a deadlock
/// (PostgreSQL notices one after a second), the heartbeat's flags and the mark's say
/// what each found, and every task ends succeeded.
pub async fn heartbeats_and_marks_of_the_same_rows_never_deadlock<H: Harness>(ctx: &Ctx<H>) {
    const TASKS: usize = 100;
    let other = ctx.new_store().await;
    for round in 0..8 {
        let claimed = claim_a_round(ctx, round, TASKS).await;
        let leases: Vec<backstop_core::Lease> = claimed.iter().map(|t| t.lease()).collect();
        let marks: Vec<Mark> = leases.iter().rev().map(|l| Mark::success(*l)).collect();
        let started = std::time::Instant::now();
        let (beat, marked) = within(
            "a heartbeat and a mark of the same rows",
            futures_util::future::join(ctx.store.heartbeat(&leases), other.mark(&marks)),
        )
        .await;
        let took = started.elapsed();
        assert_eq!(beat.unwrap().len(), TASKS);
        assert!(
            marked.unwrap().iter().all(|f| *f),
            "round {round}: every mark applies"
        );
        assert!(
            took < Duration::from_millis(800),
            "round {round}: took {took:?}: a deadlock was waited out"
        );
    }
    assert_eq!(
        ctx.store.stats().await.unwrap().count(Status::Succeeded),
        8 * TASKS as u64
    );
}

/// Two marks of the same running rows, racing on two connections with the marks in
/// opposite orders (as an engine's late marks of tasks another engine now holds race that
/// engine's own), never deadlock: both return without waiting out a deadlock (PostgreSQL
/// notices one after a second, MariaDB's InnoDB at once, answering an error), each task
/// takes exactly one of its two marks, and its row says which.
pub async fn marks_of_the_same_rows_in_opposite_orders_never_deadlock<H: Harness>(ctx: &Ctx<H>) {
    const TASKS: usize = 100;
    let other = ctx.new_store().await;
    for round in 0..8 {
        let claimed = claim_a_round(ctx, round, TASKS).await;
        let successes: Vec<Mark> = claimed.iter().map(|t| Mark::success(t.lease())).collect();
        let failures: Vec<Mark> = claimed
            .iter()
            .rev()
            .map(|t| Mark::fail(t.lease(), "the other mark"))
            .collect();
        let started = std::time::Instant::now();
        let (succeeded, failed) = within(
            "two marks of the same rows",
            futures_util::future::join(ctx.store.mark(&successes), other.mark(&failures)),
        )
        .await;
        let took = started.elapsed();
        let (succeeded, mut failed) = (succeeded.unwrap(), failed.unwrap());
        // the failures in the claim's order, beside the successes
        failed.reverse();
        assert!(
            took < Duration::from_millis(800),
            "round {round}: took {took:?}: a deadlock was waited out"
        );
        for (i, t) in claimed.iter().enumerate() {
            assert!(
                succeeded[i] != failed[i],
                "round {round}: task {}: exactly one mark applies (success {}, fail {})",
                t.id,
                succeeded[i],
                failed[i]
            );
            let row = ctx.task(t.id).await;
            let (status, error) = match succeeded[i] {
                true => (Status::Succeeded, None),
                false => (Status::Failed, Some("the other mark")),
            };
            assert_eq!(
                (row.status, row.last_error.as_deref()),
                (status, error),
                "round {round}: task {}",
                t.id
            );
        }
    }
}

/// `n` tasks of type `E` enqueued for round `round`, then claimed in one batch: all of them.
async fn claim_a_round<H: Harness>(ctx: &Ctx<H>, round: usize, n: usize) -> Vec<Task> {
    for i in 0..n {
        ctx.enqueue("E", &format!("r{round}-{i}")).await;
    }
    let claimed = ctx
        .store
        .claim_batch(&ctx.owner, &["E".to_string()], n)
        .await
        .unwrap();
    assert_eq!(claimed.len(), n, "round {round}: every task claimed");
    claimed
}
