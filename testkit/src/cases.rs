//! The conformance cases. Each is one line of the [`TaskStore`] contract, asserted on the
//! exact state it leaves (status, attempts, lease, owner, times), so it fails if the
//! behaviour it names is broken.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use backstop_core::limits::{MAX_BATCH, MAX_ERROR_BYTES};
use backstop_core::{
    Backoff, ErrorKind, Mark, NewTask, Owner, RetryPolicy, Status, StoreConfig, Task, TaskFilter,
    TaskId, TaskStore, TaskStoreExt,
};
use chrono::Utc;

use crate::{assert_between, chrono_dur, Ctx, Harness, TimeColumn};

const MINUTE: Duration = Duration::from_secs(60);
const HOUR: Duration = Duration::from_secs(3600);

fn owner(name: &str) -> Owner {
    Owner::new(name).unwrap()
}

#[track_caller]
fn assert_kind<T: std::fmt::Debug>(r: backstop_core::Result<T>, kind: ErrorKind, needle: &str) {
    match r {
        Ok(v) => panic!("expected a {kind:?} error mentioning {needle:?}, got Ok({v:?})"),
        Err(e) => {
            assert_eq!(e.kind(), kind, "wrong kind for error: {e}");
            assert!(
                e.to_string().contains(needle),
                "error {e:?} should mention {needle:?}"
            );
            assert!(!e.is_temporary(), "{e} must not be temporary");
        }
    }
}

/// migrate: idempotent, keeps existing rows.
pub async fn migrate_is_idempotent<H: Harness>(ctx: &Ctx<H>) {
    let id = ctx.enqueue("E", "k1").await;
    ctx.store.migrate().await.unwrap();
    ctx.store.migrate().await.unwrap();
    let other = ctx.new_store().await; // migrates again from another instance
    other.migrate().await.unwrap();
    assert_eq!(ctx.task(id).await.biz_key, "k1");
    assert_eq!(ctx.count_all().await, 1);
}

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
    let t = ctx.grab(first.id).await;
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

/// enqueue with delay: due at created_at + delay exactly, and not grabbable before.
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
        .grab_by_id(e.id, &ctx.owner)
        .await
        .unwrap()
        .is_none());
    let batch = ctx
        .store
        .grab_batch(&ctx.owner, &["E".into()], 10)
        .await
        .unwrap();
    assert!(batch.is_empty());
    assert_eq!(ctx.task(e.id).await, t, "a failed grab changes nothing");
}

async fn assert_nothing_written<H: Harness>(ctx: &Ctx<H>) {
    assert_eq!(ctx.count_all().await, 0, "bad input must write nothing");
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

/// opening a store with a bad table name or payload limit is a Config error.
pub async fn open_rejects_bad_table_name_and_config<H: Harness>(ctx: &Ctx<H>) {
    for bad in [
        "",
        "1abc",
        "a-b",
        "x; DROP TABLE y",
        "quote\"d",
        &"t".repeat(49),
    ] {
        let r = ctx
            .harness
            .open(&ctx.db, StoreConfig::default().table(bad))
            .await
            .map(|_| ());
        assert_kind(r, ErrorKind::Config, "table name");
    }
    let r = ctx
        .harness
        .open(&ctx.db, StoreConfig::default().max_payload_bytes(0))
        .await
        .map(|_| ());
    assert_kind(r, ErrorKind::Config, "max_payload_bytes");
    assert_nothing_written(ctx).await;
}

/// a store on a custom table uses that table only.
pub async fn custom_table_name_is_used_and_isolated<H: Harness>(ctx: &Ctx<H>) {
    let custom = ctx
        .harness
        .open(&ctx.db, StoreConfig::default().table("custom_tasks"))
        .await
        .unwrap();
    custom.migrate().await.unwrap();
    let e = custom.enqueue(NewTask::new("E", "k")).await.unwrap();
    assert!(e.created);
    assert_eq!(ctx.count_all().await, 0, "default table untouched");
    assert_eq!(custom.get(e.id).await.unwrap().unwrap().biz_key, "k");
    // the same key in the default table is a different task
    assert!(
        ctx.store
            .enqueue(NewTask::new("E", "k"))
            .await
            .unwrap()
            .created
    );
    // backdating works on the custom table too
    ctx.harness
        .backdate(&ctx.db, "custom_tasks", e.id, TimeColumn::UpdatedAt, HOUR)
        .await;
    let t = custom.get(e.id).await.unwrap().unwrap();
    assert!(t.updated_at < t.created_at);
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

/// grab_by_id: pending → running once; attempts and lease bumped; owner and updated_at set.
pub async fn grab_by_id_claims_a_due_task_once<H: Harness>(ctx: &Ctx<H>) {
    let id = ctx.enqueue("E", "k").await;
    ctx.backdate(id, TimeColumn::UpdatedAt, MINUTE).await;
    let before = ctx.task(id).await;
    let t0 = Utc::now();
    let t = ctx
        .store
        .grab_by_id(id, &ctx.owner)
        .await
        .unwrap()
        .expect("first grab wins");
    let t1 = Utc::now();
    assert_eq!(t.status, Status::Running);
    assert_eq!(t.attempts, 1);
    assert_eq!(t.lease, 1);
    assert_eq!(t.owner.as_deref(), Some("testkit-owner"));
    assert_between("updated_at", t.updated_at, t0, t1);
    assert_eq!(t.next_run_at, before.next_run_at);
    assert_eq!(t.created_at, before.created_at);
    assert_eq!(ctx.task(id).await, t, "the returned task is what is stored");
    assert!(ctx
        .store
        .grab_by_id(id, &owner("other"))
        .await
        .unwrap()
        .is_none());
    assert_eq!(ctx.task(id).await, t, "a losing grab changes nothing");
}

/// grab_by_id: only when next_run_at <= now.
pub async fn grab_by_id_waits_until_due<H: Harness>(ctx: &Ctx<H>) {
    let e = ctx
        .store
        .enqueue(NewTask::new("E", "k").delay(Duration::from_secs(600)))
        .await
        .unwrap();
    assert!(ctx
        .store
        .grab_by_id(e.id, &ctx.owner)
        .await
        .unwrap()
        .is_none());
    ctx.backdate(e.id, TimeColumn::NextRunAt, Duration::from_secs(599))
        .await;
    assert!(
        ctx.store
            .grab_by_id(e.id, &ctx.owner)
            .await
            .unwrap()
            .is_none(),
        "still one second early"
    );
    ctx.backdate(e.id, TimeColumn::NextRunAt, Duration::from_secs(2))
        .await;
    let t = ctx.grab(e.id).await;
    assert_eq!((t.status, t.attempts), (Status::Running, 1));
}

/// grab_by_id: never claims a running, succeeded, failed or missing task.
pub async fn grab_by_id_ignores_tasks_not_pending<H: Harness>(ctx: &Ctx<H>) {
    let running = ctx.enqueue("E", "running").await;
    ctx.grab(running).await;
    let done = ctx.enqueue("E", "done").await;
    let l = ctx.grab(done).await.lease();
    assert!(ctx.store.mark_success(l).await.unwrap());
    let failed = ctx.enqueue("E", "failed").await;
    let l = ctx.grab(failed).await.lease();
    assert!(ctx.store.mark_fail(l, "boom").await.unwrap());
    for id in [running, done, failed] {
        let before = ctx.task(id).await;
        assert!(ctx
            .store
            .grab_by_id(id, &owner("thief"))
            .await
            .unwrap()
            .is_none());
        assert_eq!(ctx.task(id).await, before);
    }
    assert!(ctx
        .store
        .grab_by_id(987_654_321, &ctx.owner)
        .await
        .unwrap()
        .is_none());
    assert!(ctx.store.get(987_654_321).await.unwrap().is_none());
}

/// grab_batch: oldest next_run_at first, id breaks ties; result in that order.
pub async fn grab_batch_claims_oldest_first<H: Harness>(ctx: &Ctx<H>) {
    let mut ids = Vec::new();
    for i in 0..6 {
        ids.push(ctx.enqueue("E", &format!("k{i}")).await);
    }
    // due times: k5 oldest, then k4, then k0..k3 (a tie, broken by id). The oldest are
    // the newest rows, so an id-ordered claim would pick other rows.
    ctx.backdate(ids[5], TimeColumn::NextRunAt, Duration::from_secs(300))
        .await;
    ctx.backdate(ids[4], TimeColumn::NextRunAt, Duration::from_secs(200))
        .await;
    for id in &ids[..4] {
        ctx.backdate(*id, TimeColumn::NextRunAt, Duration::from_secs(100))
            .await;
    }
    // make the tie exact: same next_run_at for k0..k3
    let base = ctx.task(ids[0]).await.next_run_at;
    for id in &ids[1..4] {
        let t = ctx.task(*id).await;
        let diff = (t.next_run_at - base).to_std().unwrap_or_default();
        ctx.backdate(*id, TimeColumn::NextRunAt, diff).await;
        assert_eq!(ctx.task(*id).await.next_run_at, base);
    }
    let got = ctx
        .store
        .grab_batch(&ctx.owner, &["E".into()], 3)
        .await
        .unwrap();
    let got_ids: Vec<TaskId> = got.iter().map(|t| t.id).collect();
    assert_eq!(got_ids, vec![ids[5], ids[4], ids[0]]);
    for t in &got {
        assert_eq!((t.status, t.attempts, t.lease), (Status::Running, 1, 1));
        assert_eq!(t.owner.as_deref(), Some("testkit-owner"));
    }
    let next = ctx
        .store
        .grab_batch(&ctx.owner, &["E".into()], 2)
        .await
        .unwrap();
    assert_eq!(
        next.iter().map(|t| t.id).collect::<Vec<_>>(),
        vec![ids[1], ids[2]],
        "ties go by id"
    );
}

/// grab_batch: never more than `limit`; 0 claims nothing; over the maximum is refused.
pub async fn grab_batch_respects_limit<H: Harness>(ctx: &Ctx<H>) {
    for i in 0..5 {
        ctx.enqueue("E", &format!("k{i}")).await;
    }
    let types = ["E".to_string()];
    assert!(ctx
        .store
        .grab_batch(&ctx.owner, &types, 0)
        .await
        .unwrap()
        .is_empty());
    assert_kind(
        ctx.store
            .grab_batch(&ctx.owner, &types, MAX_BATCH + 1)
            .await,
        ErrorKind::InvalidInput,
        "limit",
    );
    let s = ctx.store.stats().await.unwrap();
    assert_eq!(s.count(Status::Pending), 5, "nothing claimed so far");
    for expected in [2, 2, 1, 0] {
        let got = ctx.store.grab_batch(&ctx.owner, &types, 2).await.unwrap();
        assert_eq!(got.len(), expected);
    }
    assert_eq!(ctx.store.stats().await.unwrap().count(Status::Running), 5);
}

/// grab_batch: only tasks whose next_run_at has come.
pub async fn grab_batch_claims_only_due_tasks<H: Harness>(ctx: &Ctx<H>) {
    let due = ctx.enqueue("E", "due").await;
    let later = ctx
        .store
        .enqueue(NewTask::new("E", "later").delay(MINUTE))
        .await
        .unwrap()
        .id;
    let got = ctx
        .store
        .grab_batch(&ctx.owner, &["E".into()], 10)
        .await
        .unwrap();
    assert_eq!(got.iter().map(|t| t.id).collect::<Vec<_>>(), vec![due]);
    assert_eq!(ctx.task(later).await.status, Status::Pending);
    ctx.backdate(later, TimeColumn::NextRunAt, MINUTE).await;
    let got = ctx
        .store
        .grab_batch(&ctx.owner, &["E".into()], 10)
        .await
        .unwrap();
    assert_eq!(got.iter().map(|t| t.id).collect::<Vec<_>>(), vec![later]);
}

/// grab_batch: only the event types asked for; none asked → nothing claimed.
pub async fn grab_batch_claims_only_given_event_types<H: Harness>(ctx: &Ctx<H>) {
    let a = ctx.enqueue("A", "1").await;
    let b = ctx.enqueue("B", "1").await;
    let c = ctx.enqueue("C", "1").await;
    assert!(ctx
        .store
        .grab_batch(&ctx.owner, &[], 10)
        .await
        .unwrap()
        .is_empty());
    assert_kind(
        ctx.store
            .grab_batch(&ctx.owner, &["bad type".into()], 10)
            .await,
        ErrorKind::InvalidInput,
        "event_type",
    );
    let got = ctx
        .store
        .grab_batch(&ctx.owner, &["A".into(), "C".into(), "Z".into()], 10)
        .await
        .unwrap();
    let mut got_ids: Vec<TaskId> = got.iter().map(|t| t.id).collect();
    got_ids.sort();
    assert_eq!(got_ids, vec![a, c]);
    assert_eq!(ctx.task(b).await.status, Status::Pending);
}

/// every grab bumps attempts and lease, and a retry keeps the count.
pub async fn every_grab_bumps_attempts_and_lease<H: Harness>(ctx: &Ctx<H>) {
    let e = ctx
        .store
        .enqueue(NewTask::new("E", "k").retry(RetryPolicy::fixed(5, Duration::ZERO)))
        .await
        .unwrap();
    for n in 1..=3u32 {
        let t = if n % 2 == 1 {
            ctx.grab(e.id).await
        } else {
            let mut v = ctx
                .store
                .grab_batch(&ctx.owner, &["E".into()], 1)
                .await
                .unwrap();
            assert_eq!(v.len(), 1);
            v.remove(0)
        };
        assert_eq!(t.attempts, n);
        assert_eq!(t.lease, i64::from(n));
        assert!(ctx
            .store
            .mark_retry(t.lease(), Duration::ZERO, "again")
            .await
            .unwrap());
        let after = ctx.task(e.id).await;
        assert_eq!(
            (after.status, after.attempts, after.lease),
            (Status::Pending, n, i64::from(n))
        );
    }
}

/// mark_success with the current lease: succeeded, last_error cleared, owner kept.
pub async fn mark_success_with_current_lease<H: Harness>(ctx: &Ctx<H>) {
    let id = ctx.enqueue("E", "k").await;
    let t = ctx.grab(id).await;
    assert!(ctx
        .store
        .mark_retry(t.lease(), Duration::ZERO, "first try failed")
        .await
        .unwrap());
    let t = ctx.grab(id).await;
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

/// a stale lease (task recycled and grabbed again) can change nothing, and says so.
pub async fn stale_lease_changes_nothing<H: Harness>(ctx: &Ctx<H>) {
    let id = ctx.enqueue("E", "k").await;
    let old = ctx.grab(id).await;
    ctx.backdate(id, TimeColumn::UpdatedAt, Duration::from_secs(600))
        .await;
    let r = ctx.store.recycle_dead(MINUTE, 10).await.unwrap();
    assert_eq!(r.to_pending, 1);
    let new = ctx
        .store
        .grab_by_id(id, &owner("successor"))
        .await
        .unwrap()
        .expect("successor grabs");
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
    let t = ctx.grab(id).await;
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
        let t = ctx.grab(e.id).await;
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
                .grab_by_id(e.id, &ctx.owner)
                .await
                .unwrap()
                .is_none(),
            "not due before the backoff has passed"
        );
    }
}

/// mark_retry with the EXPONENTIAL policy: interval·2^(n−1), capped.
pub async fn mark_retry_exponential_doubles_and_caps<H: Harness>(ctx: &Ctx<H>) {
    let initial = Duration::from_secs(10);
    let cap = Duration::from_secs(35);
    let policy = RetryPolicy::exponential(6, initial).with_max_interval(cap);
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
        let t = ctx.grab(e.id).await;
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
        Backoff::Exponential { initial, max: cap }
    );
}

/// mark_retry on the last attempt parks the task as failed (next_run_at unchanged).
pub async fn mark_retry_on_last_attempt_fails_the_task<H: Harness>(ctx: &Ctx<H>) {
    let e = ctx
        .store
        .enqueue(NewTask::new("E", "k").retry(RetryPolicy::fixed(2, Duration::ZERO)))
        .await
        .unwrap();
    let t = ctx.grab(e.id).await;
    assert!(t.has_attempts_left());
    assert!(ctx
        .store
        .mark_retry(t.lease(), Duration::ZERO, "one")
        .await
        .unwrap());
    let t = ctx.grab(e.id).await;
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
        .grab_by_id(e.id, &ctx.owner)
        .await
        .unwrap()
        .is_none());
}

/// mark_fail: failed for good, whatever attempts remain.
pub async fn mark_fail_parks_the_task_as_failed<H: Harness>(ctx: &Ctx<H>) {
    let id = ctx.enqueue("E", "k").await;
    let t = ctx.grab(id).await;
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

/// mark: a batch applies each mark in order and answers one flag per mark.
pub async fn mark_batch_applies_in_order_and_reports_each<H: Harness>(ctx: &Ctx<H>) {
    let mut tasks = Vec::new();
    for i in 0..4 {
        let id = ctx.enqueue("E", &format!("k{i}")).await;
        tasks.push(ctx.grab(id).await);
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
    let t = ctx.grab(e.id).await;
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
    let again = ctx.grab(e.id).await;
    assert_eq!((again.attempts, again.lease), (1, 2));
    assert!(
        !ctx.store.release(t.lease()).await.unwrap(),
        "old lease is stale"
    );
}

/// recycle_dead: a silent running task with attempts left goes back to pending.
pub async fn recycle_dead_returns_task_to_pending_when_attempts_remain<H: Harness>(ctx: &Ctx<H>) {
    let id = ctx.enqueue("E", "k").await;
    let t = ctx.grab(id).await;
    ctx.backdate(id, TimeColumn::UpdatedAt, Duration::from_secs(181))
        .await;
    let t0 = Utc::now();
    let r = ctx
        .store
        .recycle_dead(Duration::from_secs(180), 50)
        .await
        .unwrap();
    let t1 = Utc::now();
    assert_eq!((r.to_pending, r.to_failed), (1, 0));
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
    assert_eq!(ctx.grab(id).await.attempts, 2);
}

/// recycle_dead: a silent running task on its last attempt parks as failed.
pub async fn recycle_dead_fails_task_on_its_last_attempt<H: Harness>(ctx: &Ctx<H>) {
    let e = ctx
        .store
        .enqueue(NewTask::new("E", "k").retry(RetryPolicy::fixed(1, Duration::ZERO)))
        .await
        .unwrap();
    ctx.grab(e.id).await;
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

/// recycle_dead: never touches a running task that is alive, nor any task not running.
pub async fn recycle_dead_never_touches_live_or_finished_tasks<H: Harness>(ctx: &Ctx<H>) {
    let live = ctx.enqueue("E", "live").await;
    ctx.grab(live).await;
    ctx.backdate(live, TimeColumn::UpdatedAt, Duration::from_secs(50))
        .await;
    let pending = ctx.enqueue("E", "pending").await;
    let done = ctx.enqueue("E", "done").await;
    let l = ctx.grab(done).await.lease();
    ctx.store.mark_success(l).await.unwrap();
    let failed = ctx.enqueue("E", "failed").await;
    let l = ctx.grab(failed).await.lease();
    ctx.store.mark_fail(l, "x").await.unwrap();
    for id in [pending, done, failed] {
        ctx.backdate(id, TimeColumn::UpdatedAt, HOUR).await;
    }
    let mut before = Vec::new();
    for id in [live, pending, done, failed] {
        before.push(ctx.task(id).await);
    }
    let r = ctx.store.recycle_dead(MINUTE, 50).await.unwrap();
    assert_eq!(r.total(), 0);
    for t in before {
        assert_eq!(ctx.task(t.id).await, t);
    }
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
        ctx.grab(id).await;
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

/// heartbeat: refreshes updated_at of held leases so recycling skips them; reports each.
pub async fn heartbeat_keeps_a_long_task_alive<H: Harness>(ctx: &Ctx<H>) {
    let a = ctx.enqueue("E", "a").await;
    let b = ctx.enqueue("E", "b").await;
    let ta = ctx.grab(a).await;
    let tb = ctx.grab(b).await;
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

/// manual_reset: failed → pending, attempts 0, due now, last_error kept.
pub async fn manual_reset_restarts_a_failed_task<H: Harness>(ctx: &Ctx<H>) {
    let e = ctx
        .store
        .enqueue(NewTask::new("E", "k").retry(RetryPolicy::fixed(1, HOUR)))
        .await
        .unwrap();
    let t = ctx.grab(e.id).await;
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
    let again = ctx.grab(e.id).await;
    assert_eq!((again.attempts, again.lease), (1, 2));
}

/// manual_reset: a running task whose owner is gone (stale updated_at) is reset too —
/// the seed's "stuck" case, typically on its last attempt.
pub async fn manual_reset_recovers_a_stuck_running_task<H: Harness>(ctx: &Ctx<H>) {
    let e = ctx
        .store
        .enqueue(NewTask::new("E", "k").retry(RetryPolicy::fixed(1, Duration::ZERO)))
        .await
        .unwrap();
    let t = ctx.grab(e.id).await;
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
    let l = ctx.grab(done).await.lease();
    ctx.store.mark_success(l).await.unwrap();
    // running on its last attempt with a live owner: normal, not stuck
    let live = ctx
        .store
        .enqueue(NewTask::new("E", "live").retry(RetryPolicy::fixed(1, Duration::ZERO)))
        .await
        .unwrap()
        .id;
    ctx.grab(live).await;
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
        let t = ctx.grab(e.id).await;
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
                claimed += store.grab_batch(&me, &types, 10).await.unwrap().len();
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
    let mut claimed = 0;
    for c in claimers {
        claimed += c.await.unwrap();
    }
    // every reset task is claimed again (exactly once) by the racing claimers
    assert_eq!(claimed, TASKS);
    for id in &ids {
        let t = ctx.task(*id).await;
        assert_eq!((t.status, t.attempts), (Status::Running, 1), "task {id}");
    }
}

/// purge_succeeded: deletes succeeded tasks older than the retention, at most `limit`,
/// never any other status.
pub async fn purge_succeeded_deletes_only_old_succeeded_tasks<H: Harness>(ctx: &Ctx<H>) {
    let week = Duration::from_secs(7 * 24 * 3600);
    let mut old_done = Vec::new();
    for i in 0..3 {
        let id = ctx.enqueue("E", &format!("old{i}")).await;
        let l = ctx.grab(id).await.lease();
        ctx.store.mark_success(l).await.unwrap();
        ctx.backdate(id, TimeColumn::UpdatedAt, week + HOUR).await;
        old_done.push(id);
    }
    let fresh_done = ctx.enqueue("E", "fresh").await;
    let l = ctx.grab(fresh_done).await.lease();
    ctx.store.mark_success(l).await.unwrap();
    let old_failed = ctx.enqueue("E", "failed").await;
    let l = ctx.grab(old_failed).await.lease();
    ctx.store.mark_fail(l, "x").await.unwrap();
    ctx.backdate(old_failed, TimeColumn::UpdatedAt, week + HOUR)
        .await;
    let old_pending = ctx.enqueue("E", "pending").await;
    ctx.backdate(old_pending, TimeColumn::UpdatedAt, week + HOUR)
        .await;

    assert_eq!(ctx.store.purge_succeeded(week, 2).await.unwrap(), 2);
    assert_eq!(ctx.store.purge_succeeded(week, 10).await.unwrap(), 1);
    assert_eq!(ctx.store.purge_succeeded(week, 10).await.unwrap(), 0);
    for id in old_done {
        assert!(ctx.store.get(id).await.unwrap().is_none());
    }
    for id in [fresh_done, old_failed, old_pending] {
        assert!(ctx.store.get(id).await.unwrap().is_some());
    }
    // an enqueue after purge never reuses a purged id
    let newer = ctx.enqueue("E", "newer").await;
    assert!(newer > old_pending);
}

/// delete_succeeded: deletes exactly the listed tasks that are succeeded.
pub async fn delete_succeeded_deletes_only_succeeded_tasks<H: Harness>(ctx: &Ctx<H>) {
    let mut done = Vec::new();
    for i in 0..3 {
        let id = ctx.enqueue("E", &format!("done{i}")).await;
        let l = ctx.grab(id).await.lease();
        ctx.store.mark_success(l).await.unwrap();
        done.push(id);
    }
    let failed = ctx.enqueue("E", "failed").await;
    let l = ctx.grab(failed).await.lease();
    ctx.store.mark_fail(l, "x").await.unwrap();
    let pending = ctx.enqueue("E", "pending").await;
    let n = ctx
        .store
        .delete_succeeded(&[done[0], done[2], failed, pending, 987_654_321])
        .await
        .unwrap();
    assert_eq!(n, 2);
    assert!(ctx.store.get(done[0]).await.unwrap().is_none());
    assert!(ctx.store.get(done[2]).await.unwrap().is_none());
    for id in [done[1], failed, pending] {
        assert!(ctx.store.get(id).await.unwrap().is_some());
    }
    assert_eq!(ctx.store.delete_succeeded(&[]).await.unwrap(), 0);
    let too_many: Vec<TaskId> = (0..=MAX_BATCH as i64).collect();
    assert_kind(
        ctx.store.delete_succeeded(&too_many).await,
        ErrorKind::InvalidInput,
        "ids",
    );
}

/// stats: counts per status and event type; age of the oldest due pending task.
pub async fn stats_counts_per_status_and_event_type<H: Harness>(ctx: &Ctx<H>) {
    let s = ctx.store.stats().await.unwrap();
    assert!(s.counts.is_empty());
    assert_eq!(s.oldest_due_pending, None);
    let a1 = ctx.enqueue("A", "1").await;
    ctx.enqueue("A", "2").await;
    let b1 = ctx.enqueue("B", "1").await;
    ctx.store
        .enqueue(NewTask::new("B", "later").delay(HOUR))
        .await
        .unwrap();
    let l = ctx.grab(b1).await.lease();
    ctx.store.mark_success(l).await.unwrap();
    ctx.backdate(a1, TimeColumn::NextRunAt, Duration::from_secs(100))
        .await;
    let s = ctx.store.stats().await.unwrap();
    assert_eq!(s.count_for("A", Status::Pending), 2);
    assert_eq!(
        s.count_for("B", Status::Pending),
        1,
        "not-due tasks are counted"
    );
    assert_eq!(s.count_for("B", Status::Succeeded), 1);
    assert_eq!(s.count(Status::Running), 0);
    assert_eq!(s.count(Status::Pending), 3);
    let age = s.oldest_due_pending.expect("a due task exists");
    assert!(
        age >= Duration::from_secs(100) && age < Duration::from_secs(100) + Duration::from_secs(5),
        "oldest due pending age {age:?}"
    );
}

/// list: filters by status and event type, pages by id.
pub async fn list_filters_and_pages<H: Harness>(ctx: &Ctx<H>) {
    let mut a = Vec::new();
    for i in 0..5 {
        a.push(ctx.enqueue("A", &format!("{i}")).await);
    }
    let b = ctx.enqueue("B", "0").await;
    let l = ctx.grab(a[1]).await.lease();
    ctx.store.mark_fail(l, "x").await.unwrap();
    let ids = |v: Vec<Task>| v.into_iter().map(|t| t.id).collect::<Vec<_>>();
    let all = ctx.store.list(&TaskFilter::default()).await.unwrap();
    assert_eq!(ids(all), vec![a[0], a[1], a[2], a[3], a[4], b]);
    let f = TaskFilter {
        status: Some(Status::Failed),
        ..TaskFilter::default()
    };
    assert_eq!(ids(ctx.store.list(&f).await.unwrap()), vec![a[1]]);
    let f = TaskFilter {
        event_type: Some("A".into()),
        status: Some(Status::Pending),
        limit: 2,
        ..TaskFilter::default()
    };
    let page1 = ids(ctx.store.list(&f).await.unwrap());
    assert_eq!(page1, vec![a[0], a[2]]);
    let f2 = TaskFilter {
        after_id: Some(a[2]),
        ..f.clone()
    };
    assert_eq!(ids(ctx.store.list(&f2).await.unwrap()), vec![a[3], a[4]]);
    // by age of updated_at
    ctx.backdate(a[3], TimeColumn::UpdatedAt, HOUR).await;
    ctx.backdate(b, TimeColumn::UpdatedAt, 2 * HOUR).await;
    let f_age = TaskFilter {
        older_than: Some(MINUTE),
        ..TaskFilter::default()
    };
    assert_eq!(ids(ctx.store.list(&f_age).await.unwrap()), vec![a[3], b]);
    let f_age = TaskFilter {
        older_than: Some(HOUR + MINUTE),
        ..TaskFilter::default()
    };
    assert_eq!(ids(ctx.store.list(&f_age).await.unwrap()), vec![b]);
    let f3 = TaskFilter {
        limit: MAX_BATCH + 1,
        ..TaskFilter::default()
    };
    assert_kind(ctx.store.list(&f3).await, ErrorKind::InvalidInput, "limit");
}

/// last_error is cut to MAX_ERROR_BYTES at a character boundary.
pub async fn last_error_is_bounded<H: Harness>(ctx: &Ctx<H>) {
    let id = ctx.enqueue("E", "k").await;
    let t = ctx.grab(id).await;
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

/// the store works behind `Arc<dyn TaskStore>`, conveniences included.
pub async fn store_works_as_dyn_task_store<H: Harness>(ctx: &Ctx<H>) {
    let store: Arc<dyn TaskStore> = Arc::new(ctx.store.clone());
    let e = store.enqueue(NewTask::new("E", "dyn")).await.unwrap();
    let t = store.grab_by_id(e.id, &ctx.owner).await.unwrap().unwrap();
    assert!(store.mark_success(t.lease()).await.unwrap());
    assert_eq!(ctx.task(e.id).await.status, Status::Succeeded);
}

/// 1,000 due tasks, 8 claimers on separate store instances racing: every task claimed
/// exactly once.
pub async fn concurrent_grab_batch_claims_each_task_once<H: Harness>(ctx: &Ctx<H>) {
    const TASKS: usize = 1000;
    const CLAIMERS: usize = 8;
    let mut handles = Vec::new();
    // enqueue from 4 producers
    for p in 0..4 {
        let s = ctx.store.clone();
        handles.push(tokio::spawn(async move {
            for i in (p..TASKS).step_by(4) {
                let et = if i % 2 == 0 { "A" } else { "B" };
                s.enqueue(NewTask::new(et, format!("k{i}"))).await.unwrap();
            }
        }));
    }
    for h in handles {
        h.await.unwrap();
    }
    let mut claimers = Vec::new();
    for c in 0..CLAIMERS {
        let store = ctx.new_store().await;
        claimers.push(tokio::spawn(async move {
            let me = Owner::new(format!("claimer-{c}")).unwrap();
            let types = vec!["A".to_string(), "B".to_string()];
            let mut got = Vec::new();
            loop {
                let batch = store.grab_batch(&me, &types, 7).await.unwrap();
                assert!(batch.len() <= 7);
                if batch.is_empty() {
                    break;
                }
                for t in &batch {
                    assert_eq!(t.owner.as_deref(), Some(me.as_str()));
                }
                got.extend(batch.into_iter().map(|t| (t.id, t.attempts, t.lease)));
            }
            got
        }));
    }
    let mut seen: HashMap<TaskId, usize> = HashMap::new();
    let mut per_claimer = Vec::new();
    for c in claimers {
        let got = c.await.unwrap();
        per_claimer.push(got.len());
        for (id, attempts, lease) in got {
            assert_eq!(
                (attempts, lease),
                (1, 1),
                "task {id} claimed more than once"
            );
            *seen.entry(id).or_default() += 1;
        }
    }
    assert_eq!(seen.len(), TASKS, "every task claimed");
    assert!(seen.values().all(|n| *n == 1), "no task claimed twice");
    let s = ctx.store.stats().await.unwrap();
    assert_eq!(s.count(Status::Running), TASKS as u64);
    assert_eq!(per_claimer.iter().sum::<usize>(), TASKS);
}

/// 8 pollers claiming and completing while 4 producers insert: no deadlock or lock
/// timeout escapes to the caller, and every task is claimed exactly once.
pub async fn concurrent_claims_and_inserts_never_deadlock<H: Harness>(ctx: &Ctx<H>) {
    use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
    const TASKS: usize = 1200;
    const POLLERS: usize = 8;
    let inserted = Arc::new(AtomicBool::new(false));
    let done = Arc::new(AtomicUsize::new(0));
    let mut pollers = Vec::new();
    for p in 0..POLLERS {
        let store = ctx.new_store().await;
        let (inserted, done) = (Arc::clone(&inserted), Arc::clone(&done));
        pollers.push(tokio::spawn(async move {
            let me = Owner::new(format!("poller-{p}")).unwrap();
            let types = vec!["A".to_string(), "B".to_string()];
            let mut mine = Vec::new();
            loop {
                let batch = store.grab_batch(&me, &types, 10).await.unwrap();
                if batch.is_empty() {
                    if inserted.load(Ordering::SeqCst) && done.load(Ordering::SeqCst) == TASKS {
                        return mine;
                    }
                    tokio::time::sleep(Duration::from_millis(2)).await;
                    continue;
                }
                let marks: Vec<Mark> = batch.iter().map(|t| Mark::success(t.lease())).collect();
                let flags = store.mark(&marks).await.unwrap();
                assert!(flags.iter().all(|f| *f), "a fresh claim's mark was refused");
                done.fetch_add(batch.len(), Ordering::SeqCst);
                mine.extend(batch.into_iter().map(|t| (t.id, t.attempts)));
            }
        }));
    }
    let mut producers = Vec::new();
    for p in 0..4 {
        let store = ctx.new_store().await;
        producers.push(tokio::spawn(async move {
            for i in (p..TASKS).step_by(4) {
                let et = if i % 3 == 0 { "A" } else { "B" };
                store
                    .enqueue(NewTask::new(et, format!("k{i}")))
                    .await
                    .unwrap();
            }
        }));
    }
    for p in producers {
        p.await.unwrap();
    }
    inserted.store(true, Ordering::SeqCst);
    let mut seen: HashMap<TaskId, u32> = HashMap::new();
    for p in pollers {
        for (id, attempts) in p.await.unwrap() {
            assert_eq!(attempts, 1, "task {id} claimed more than once");
            assert!(
                seen.insert(id, attempts).is_none(),
                "task {id} claimed twice"
            );
        }
    }
    assert_eq!(seen.len(), TASKS);
    let s = ctx.store.stats().await.unwrap();
    assert_eq!(s.count(Status::Succeeded), TASKS as u64);
    assert_eq!(s.count(Status::Running) + s.count(Status::Pending), 0);
}

/// 8 concurrent grab_by_id on one task, from separate store instances: exactly one wins.
pub async fn concurrent_grab_by_id_has_one_winner<H: Harness>(ctx: &Ctx<H>) {
    let mut stores = Vec::new();
    for _ in 0..8 {
        stores.push(ctx.new_store().await);
    }
    for round in 0..10 {
        let id = ctx.enqueue("E", &format!("k{round}")).await;
        let barrier = Arc::new(tokio::sync::Barrier::new(stores.len()));
        let mut handles = Vec::new();
        for (i, s) in stores.iter().enumerate() {
            let s = s.clone();
            let barrier = Arc::clone(&barrier);
            handles.push(tokio::spawn(async move {
                let me = Owner::new(format!("racer-{i}")).unwrap();
                barrier.wait().await;
                s.grab_by_id(id, &me).await.unwrap().map(|t| (me, t))
            }));
        }
        let mut winners = Vec::new();
        for h in handles {
            if let Some(w) = h.await.unwrap() {
                winners.push(w);
            }
        }
        assert_eq!(winners.len(), 1, "round {round}: exactly one grab wins");
        let (me, t) = &winners[0];
        let stored = ctx.task(id).await;
        assert_eq!(stored.owner.as_deref(), Some(me.as_str()));
        assert_eq!((stored.attempts, stored.lease), (1, 1));
        assert_eq!(&stored, t);
    }
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
        for h in handles {
            let e = h.await.unwrap();
            ids.insert(e.id);
            created += usize::from(e.created);
        }
        assert_eq!(ids.len(), 1, "round {round}: one id for all");
        assert_eq!(created, 1, "round {round}: exactly one creator");
    }
    assert_eq!(ctx.count_all().await, 5);
}
