//! Enqueue: validation first, idempotency, the transactional enqueue.

use super::*;

/// enqueue: pending, attempts 0, lease 0, no owner, due now, policy and payload stored.
pub async fn enqueue_inserts_a_pending_task<H: Harness>(ctx: &Ctx<H>) {
    let policy = RetryPolicy::exponential(7, Duration::from_millis(1500))
        .with_max_interval(Duration::from_secs(90));
    let t0 = Utc::now();
    let e = ctx
        .store
        .enqueue(
            NewTask::new("PAY_ORDER", "order-1")
                .json(&serde_json::json!({"order": 1, "amount": "19.99"}))
                .retry(policy),
        )
        .await
        .unwrap();
    let t1 = Utc::now();
    assert!(e.created);
    let t = ctx.task(e.id).await;
    assert_eq!(t.id, e.id);
    assert_eq!(t.event_type, "PAY_ORDER");
    assert_eq!(t.biz_key, "order-1");
    let payload: serde_json::Value = serde_json::from_str(&t.payload).unwrap();
    assert_eq!(payload, serde_json::json!({"order": 1, "amount": "19.99"}));
    assert_eq!(t.status, Status::Pending);
    assert_eq!(t.attempts, 0);
    assert_eq!(t.lease, 0);
    assert_eq!(t.owner, None);
    assert_eq!(t.last_error, None);
    assert_eq!(t.retry, policy);
    assert_between("created_at", t.created_at, t0, t1);
    assert_eq!(t.updated_at, t.created_at);
    assert_eq!(
        t.next_run_at, t.created_at,
        "a task without delay is due at once"
    );
    let fixed = ctx
        .store
        .enqueue(
            NewTask::new("PAY_ORDER", "order-2")
                .retry(RetryPolicy::fixed(2, Duration::from_secs(30))),
        )
        .await
        .unwrap();
    assert_eq!(
        ctx.task(fixed.id).await.retry,
        RetryPolicy::fixed(2, Duration::from_secs(30))
    );
    assert_ne!(fixed.id, e.id);
}

/// enqueue: a duplicate (event_type, biz_key) returns the existing id, created = false, and
/// changes nothing.
pub async fn enqueue_is_idempotent_on_event_type_and_biz_key<H: Harness>(ctx: &Ctx<H>) {
    let first = ctx
        .store
        .enqueue(NewTask::new("E", "dup").json(&1))
        .await
        .unwrap();
    let before = ctx.task(first.id).await;
    let again = ctx
        .store
        .enqueue(
            NewTask::new("E", "dup")
                .json(&2)
                .retry(RetryPolicy::fixed(1, Duration::ZERO))
                .delay(HOUR),
        )
        .await
        .unwrap();
    assert_eq!(again.id, first.id);
    assert!(first.created);
    assert!(!again.created);
    assert_eq!(
        ctx.task(first.id).await,
        before,
        "the existing row is unchanged"
    );
    assert_eq!(ctx.count_all().await, 1);
    // Also while the task is running.
    let t = ctx.claim(first.id).await;
    let third = ctx.store.enqueue(NewTask::new("E", "dup")).await.unwrap();
    assert_eq!((third.id, third.created), (first.id, false));
    assert_eq!(ctx.task(first.id).await, t);
}

/// enqueue: the same biz_key under another event type is another task.
pub async fn enqueue_same_biz_key_under_another_event_type_is_a_new_task<H: Harness>(ctx: &Ctx<H>) {
    let a = ctx.enqueue("A", "same").await;
    let b = ctx.enqueue("B", "same").await;
    assert_ne!(a, b);
    assert_eq!(ctx.count_all().await, 2);
}

/// enqueue with delay: due at created_at + delay exactly, and not claimable before.
pub async fn enqueue_with_delay_is_not_due_until_then<H: Harness>(ctx: &Ctx<H>) {
    let delay = Duration::from_millis(90_500);
    let e = ctx
        .store
        .enqueue(NewTask::new("E", "later").delay(delay))
        .await
        .unwrap();
    let t = ctx.task(e.id).await;
    assert_eq!(t.next_run_at - t.created_at, chrono_dur(delay));
    assert!(ctx
        .store
        .claim_by_id(e.id, &ctx.owner)
        .await
        .unwrap()
        .is_none());
    let batch = ctx
        .store
        .claim_batch(&ctx.owner, &["E".into()], 10)
        .await
        .unwrap();
    assert!(batch.is_empty());
    assert_eq!(ctx.task(e.id).await, t, "a failed claim changes nothing");
}

/// enqueue with run_at: due at that absolute time (to the millisecond), on every enqueue
/// path; a time already past is due at once, stored as the time of the enqueue; more
/// than the longest interval ahead is refused.
pub async fn enqueue_with_run_at_is_due_at_that_time<H: Harness>(ctx: &Ctx<H>) {
    let ms = |t: chrono::DateTime<Utc>| t.timestamp_millis();
    let at = Utc::now() + chrono::Duration::milliseconds(7_200_123);
    let e = ctx
        .store
        .enqueue(NewTask::new("E", "later").run_at(at))
        .await
        .unwrap();
    let t = ctx.task(e.id).await;
    assert!(
        (ms(t.next_run_at) - ms(at)).abs() <= 1,
        "next_run_at {} for run_at {at}",
        t.next_run_at
    );
    assert!(ctx
        .store
        .claim_by_id(e.id, &ctx.owner)
        .await
        .unwrap()
        .is_none());
    // in the caller's transaction too
    let at2 = at + chrono::Duration::seconds(1);
    let e2 = ctx
        .enqueue_in_tx("order-at", NewTask::new("E", "in-tx").run_at(at2), true)
        .await
        .unwrap();
    let t2 = ctx.task(e2.id).await;
    assert!(
        (ms(t2.next_run_at) - ms(at2)).abs() <= 1,
        "{}",
        t2.next_run_at
    );

    // a time already past: due now, not an hour ago
    let before = Utc::now();
    let e = ctx
        .store
        .enqueue(NewTask::new("E", "past").run_at(before - chrono_dur(HOUR)))
        .await
        .unwrap();
    let after = Utc::now();
    let t = ctx.task(e.id).await;
    assert_between("next_run_at", t.next_run_at, before, after);
    assert_eq!(t.next_run_at, t.created_at);
    let claimed = ctx.claim(e.id).await;
    assert_eq!(claimed.status, Status::Running);

    // the later of delay and run_at calls wins
    let e = ctx
        .store
        .enqueue(
            NewTask::new("E", "both")
                .run_at(at)
                .delay(Duration::from_secs(60)),
        )
        .await
        .unwrap();
    let t = ctx.task(e.id).await;
    assert_eq!(t.next_run_at - t.created_at, chrono::Duration::seconds(60));

    let count = ctx.count_all().await;
    assert_kind(
        ctx.store
            .enqueue(NewTask::new("E", "too-far").run_at(Utc::now() + chrono::Duration::days(400)))
            .await,
        ErrorKind::InvalidInput,
        "run_at",
    );
    assert_eq!(ctx.count_all().await, count, "nothing written");
}

/// enqueue: empty, over-long or oddly-charactered event types are refused; nothing written.
pub async fn enqueue_rejects_bad_event_type_and_writes_nothing<H: Harness>(ctx: &Ctx<H>) {
    for bad in ["", &"E".repeat(65), "with space", "semi;colon", "ünï"] {
        assert_kind(
            ctx.store.enqueue(NewTask::new(bad, "k")).await,
            ErrorKind::InvalidInput,
            "event_type",
        );
    }
    assert_nothing_written(ctx).await;
    // 64 bytes is fine
    ctx.enqueue(&"E".repeat(64), "k").await;
}

/// enqueue: empty, over-long or control-character business keys are refused.
pub async fn enqueue_rejects_bad_biz_key_and_writes_nothing<H: Harness>(ctx: &Ctx<H>) {
    for bad in [
        String::new(),
        "k".repeat(129),
        "a\nb".into(),
        "nul\0".into(),
    ] {
        assert_kind(
            ctx.store.enqueue(NewTask::new("E", bad)).await,
            ErrorKind::InvalidInput,
            "biz_key",
        );
    }
    assert_nothing_written(ctx).await;
    // 128 bytes, multi-byte characters included, is fine
    let key = format!("订单-{}", "k".repeat(128 - "订单-".len()));
    assert_eq!(key.len(), 128);
    let id = ctx.enqueue("E", &key).await;
    assert_eq!(ctx.task(id).await.biz_key, key);
}

/// enqueue: a payload over the store's limit, or not JSON, is refused.
pub async fn enqueue_rejects_bad_payload_and_writes_nothing<H: Harness>(ctx: &Ctx<H>) {
    let limit = 1024;
    let store = ctx
        .harness
        .open(&ctx.db, ctx.config.clone().max_payload_bytes(limit))
        .await
        .unwrap();
    // a JSON string of exactly `limit` bytes: quotes + limit-2 chars
    let at_limit = "x".repeat(limit - 2);
    let over = "x".repeat(limit - 1);
    assert_kind(
        store.enqueue(NewTask::new("E", "over").json(&over)).await,
        ErrorKind::InvalidInput,
        "over the limit of 1024 bytes",
    );
    assert_kind(
        store
            .enqueue(NewTask::new("E", "raw").payload_raw("{\"a\":"))
            .await,
        ErrorKind::InvalidInput,
        "not valid JSON",
    );
    assert_nothing_written(ctx).await;
    let ok = store
        .enqueue(NewTask::new("E", "at").json(&at_limit))
        .await
        .unwrap();
    assert_eq!(ctx.task(ok.id).await.payload.len(), limit);
}

/// enqueue: a bad retry policy or delay is refused.
pub async fn enqueue_rejects_bad_retry_policy_and_writes_nothing<H: Harness>(ctx: &Ctx<H>) {
    let cases = [
        (RetryPolicy::fixed(0, MINUTE), "max_attempts"),
        (RetryPolicy::fixed(10_001, MINUTE), "max_attempts"),
        (
            RetryPolicy::exponential(3, HOUR).with_max_interval(MINUTE),
            "below the initial interval",
        ),
        (
            RetryPolicy::fixed(3, Duration::from_secs(400 * 24 * 3600)),
            "at most",
        ),
    ];
    for (policy, needle) in cases {
        assert_kind(
            ctx.store
                .enqueue(NewTask::new("E", "k").retry(policy))
                .await,
            ErrorKind::InvalidInput,
            needle,
        );
    }
    assert_kind(
        ctx.store
            .enqueue(NewTask::new("E", "k").delay(Duration::from_secs(400 * 24 * 3600)))
            .await,
        ErrorKind::InvalidInput,
        "delay",
    );
    assert_nothing_written(ctx).await;
}

/// the transactional enqueue commits with the caller's business row.
pub async fn transactional_enqueue_commits_with_business_rows<H: Harness>(ctx: &Ctx<H>) {
    let e = ctx
        .enqueue_in_tx("order-1", NewTask::new("PAY", "1"), true)
        .await
        .unwrap();
    assert!(e.created);
    assert!(ctx.harness.business_row_exists(&ctx.db, "order-1").await);
    let t = ctx.task(e.id).await;
    assert_eq!((t.status, t.attempts), (Status::Pending, 0));
    // a duplicate inside a transaction returns the existing id
    let dup = ctx
        .enqueue_in_tx("order-1b", NewTask::new("PAY", "1"), true)
        .await
        .unwrap();
    assert_eq!((dup.id, dup.created), (e.id, false));
    assert_eq!(ctx.count_all().await, 1);
}

/// the transactional enqueue rolls back with the caller's business row; bad input in the
/// transaction is refused.
pub async fn transactional_enqueue_rolls_back_with_business_rows<H: Harness>(ctx: &Ctx<H>) {
    let e = ctx
        .enqueue_in_tx("order-2", NewTask::new("PAY", "2"), false)
        .await
        .unwrap();
    assert!(e.created, "inside the transaction the task was new");
    assert!(!ctx.harness.business_row_exists(&ctx.db, "order-2").await);
    assert!(
        ctx.store.get(e.id).await.unwrap().is_none(),
        "task rolled back"
    );
    assert_nothing_written(ctx).await;
    let bad = ctx
        .enqueue_in_tx("order-3", NewTask::new("", "3"), true)
        .await;
    assert_kind(bad, ErrorKind::InvalidInput, "event_type");
    assert_nothing_written(ctx).await;
}

/// 8 concurrent enqueues of one (event_type, biz_key): one task, one `created = true`.
pub async fn concurrent_enqueue_of_one_key_creates_one_task<H: Harness>(ctx: &Ctx<H>) {
    let mut stores = Vec::new();
    for _ in 0..8 {
        stores.push(ctx.new_store().await);
    }
    for round in 0..5 {
        let barrier = Arc::new(tokio::sync::Barrier::new(stores.len()));
        let mut handles = Vec::new();
        for s in &stores {
            let s = s.clone();
            let barrier = Arc::clone(&barrier);
            handles.push(tokio::spawn(async move {
                barrier.wait().await;
                s.enqueue(NewTask::new("E", format!("same-{round}")))
                    .await
                    .unwrap()
            }));
        }
        let mut ids = HashSet::new();
        let mut created = 0;
        for e in joined("the racers", handles).await {
            ids.insert(e.id);
            created += usize::from(e.created);
        }
        assert_eq!(ids.len(), 1, "round {round}: one id for all");
        assert_eq!(created, 1, "round {round}: exactly one creator");
    }
    assert_eq!(ctx.count_all().await, 5);
}

/// enqueue stores the retry policy's jitter (25 % by default for exponential backoff,
/// none for fixed) and refuses more than 100 %; nothing written.
pub async fn enqueue_stores_the_retry_jitter<H: Harness>(ctx: &Ctx<H>) {
    let exp = RetryPolicy::exponential(4, Duration::from_secs(30));
    assert_eq!(exp.jitter_pct, RetryPolicy::DEFAULT_JITTER_PCT);
    for (key, policy, pct) in [
        ("default", exp, RetryPolicy::DEFAULT_JITTER_PCT),
        ("none", exp.jitter(0), 0),
        ("full", exp.jitter(100), 100),
        ("fixed", RetryPolicy::fixed(3, MINUTE), 0),
    ] {
        let e = ctx
            .store
            .enqueue(NewTask::new("J", key).retry(policy))
            .await
            .unwrap();
        let t = ctx.task(e.id).await;
        assert_eq!(t.retry, policy, "{key}");
        assert_eq!(t.retry.jitter_pct, pct, "{key}");
    }
    let count = ctx.count_all().await;
    assert_kind(
        ctx.store
            .enqueue(NewTask::new("J", "too-much").retry(exp.jitter(101)))
            .await,
        ErrorKind::InvalidInput,
        "jitter",
    );
    assert_eq!(ctx.count_all().await, count);
}
