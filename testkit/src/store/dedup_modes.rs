//! What a duplicate does to the pending task it meets (`OnDuplicate`: keep, replace the
//! payload, or the payload and the due time), on every enqueue path, and keys made from
//! payload fields (`NewTask::unique_by`).

use backstop_core::{Enqueued, OnDuplicate};
use chrono::Utc;

use super::*;
use crate::TxPath;

/// Enqueue `task` on the store (`None`) or on the caller's transaction along `path`.
async fn put<H: Harness>(ctx: &Ctx<H>, path: Option<TxPath>, task: NewTask) -> Enqueued {
    match path {
        None => ctx.store.enqueue(task).await.unwrap(),
        Some(path) => {
            let row = format!(
                "row-{}-{}",
                path,
                Utc::now().timestamp_nanos_opt().unwrap_or(0)
            );
            ctx.enqueue_in_tx_on(&ctx.store, path, &row, task, true)
                .await
                .unwrap()
        }
    }
}

/// How far `t` is due from now (negative: past).
fn due_in(t: &Task) -> chrono::Duration {
    t.next_run_at - Utc::now()
}

/// OnDuplicate, on the store's own enqueue and on the caller's transaction along every
/// path: `Replace` replaces a pending duplicate's payload and due time (10 min from now
/// instead of an hour; a run-at already past makes it due now), `PreserveRunAt` its
/// payload only, `Keep` nothing; attempts and lease are kept; a running duplicate is
/// never changed.
pub async fn on_duplicate_replace_moves_the_due_time_preserve_keeps_it<H: Harness>(ctx: &Ctx<H>) {
    let min = |m: i64| chrono::Duration::minutes(m);
    let slack = chrono_dur(crate::CLOCK_SLACK) + chrono::Duration::seconds(5);
    let paths = std::iter::once(None).chain(TxPath::ALL.into_iter().map(Some));
    for path in paths {
        let key = format!("k-{path:?}");
        let task = |v: &str| NewTask::new("E", &key).json(&v);
        let first = put(ctx, path, task("v1").delay(HOUR)).await;
        assert!(first.created);
        let before = ctx.task(first.id).await;

        let moved = put(
            ctx,
            path,
            task("v2")
                .delay(Duration::from_secs(600))
                .on_duplicate(OnDuplicate::Replace),
        )
        .await;
        assert_eq!(
            (moved.id, moved.created, moved.replaced),
            (first.id, false, true)
        );
        let t = ctx.task(first.id).await;
        assert_eq!(t.payload, "\"v2\"", "{path:?}");
        let d = due_in(&t);
        assert!(
            d > min(10) - slack && d < min(10) + slack,
            "{path:?}: due in {d}"
        );
        assert_eq!((t.attempts, t.lease), (before.attempts, before.lease));

        let past = Utc::now() - chrono::Duration::days(2);
        put(
            ctx,
            path,
            task("v3").run_at(past).on_duplicate(OnDuplicate::Replace),
        )
        .await;
        let t = ctx.task(first.id).await;
        assert!(
            due_in(&t) < slack,
            "{path:?}: a past run-at is now: {}",
            t.next_run_at
        );
        let due_now = t.next_run_at;

        let kept_due = put(
            ctx,
            path,
            task("v4")
                .delay(2 * HOUR)
                .on_duplicate(OnDuplicate::PreserveRunAt),
        )
        .await;
        assert!(kept_due.replaced);
        let t = ctx.task(first.id).await;
        assert_eq!(
            (t.payload.as_str(), t.next_run_at),
            ("\"v4\"", due_now),
            "{path:?}"
        );

        let kept = put(
            ctx,
            path,
            task("v5").delay(HOUR).on_duplicate(OnDuplicate::Keep),
        )
        .await;
        assert!(!kept.replaced);
        let t = ctx.task(first.id).await;
        assert_eq!(
            (t.payload.as_str(), t.next_run_at),
            ("\"v4\"", due_now),
            "{path:?}"
        );

        ctx.claim(first.id).await;
        let running = put(ctx, path, task("v6").on_duplicate(OnDuplicate::Replace)).await;
        assert_eq!((running.status, running.replaced), (Status::Running, false));
        assert_eq!(ctx.task(first.id).await.payload, "\"v4\"");
    }
}

/// unique_by: tasks whose named payload fields are equal share one key (a duplicate,
/// whatever else their payloads hold, and whatever the order of a nested object's
/// keys); different fields make a new task; a missing field, a payload that is not an
/// object, or a key over 128 bytes is `InvalidInput` naming it, and writes nothing.
pub async fn unique_by_payload_fields_makes_equal_fields_one_task<H: Harness>(ctx: &Ctx<H>) {
    let digest = |v: serde_json::Value, fields: &[&str]| {
        NewTask::new("DIGEST", "-").json(&v).unique_by(fields)
    };
    let first = ctx
        .store
        .enqueue(digest(
            serde_json::json!({"user": 7, "day": "d1", "n": 1}),
            &["user", "day"],
        ))
        .await
        .unwrap();
    assert!(first.created);
    assert_eq!(ctx.task(first.id).await.biz_key, r#"user=7&day="d1""#);
    let same = ctx
        .store
        .enqueue(digest(
            serde_json::json!({"n": 2, "day": "d1", "user": 7}),
            &["user", "day"],
        ))
        .await
        .unwrap();
    assert_eq!((same.id, same.created), (first.id, false));
    let other = ctx
        .store
        .enqueue(digest(
            serde_json::json!({"user": 7, "day": "d2"}),
            &["user", "day"],
        ))
        .await
        .unwrap();
    assert!(other.created);
    // nested objects compare by content, not by key order
    let a = ctx
        .store
        .enqueue(digest(
            serde_json::json!({"u": {"a": 1, "b": [2, {"y": 1, "x": 0}]}}),
            &["u"],
        ))
        .await
        .unwrap();
    let b = ctx
        .store
        .enqueue(digest(
            serde_json::json!({"u": {"b": [2, {"x": 0, "y": 1}], "a": 1}}),
            &["u"],
        ))
        .await
        .unwrap();
    assert_eq!((b.id, b.created), (a.id, false));
    let nested = ctx
        .store
        .enqueue(digest(serde_json::json!({"c": {"id": 5}}), &["c.id"]))
        .await
        .unwrap();
    assert_eq!(ctx.task(nested.id).await.biz_key, "c.id=5");

    let before = ctx.store.stats().await.unwrap().count(Status::Pending);
    for (task, names) in [
        (digest(serde_json::json!({"user": 7}), &["day"]), "\"day\""),
        (
            digest(serde_json::json!([1, 2]), &["user"]),
            "not a JSON object",
        ),
        (digest(serde_json::json!({"user": 7}), &[]), "no field"),
        (
            digest(serde_json::json!({"big": "x".repeat(200)}), &["big"]),
            "over 128",
        ),
    ] {
        assert_kind(
            ctx.store.enqueue(task).await,
            ErrorKind::InvalidInput,
            names,
        );
    }
    assert_eq!(
        ctx.store.stats().await.unwrap().count(Status::Pending),
        before
    );
}
