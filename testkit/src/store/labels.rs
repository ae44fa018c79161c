//! Tags, metadata, a trace context and a partition key set at enqueue (stored on every enqueue path; tags
//! and metadata filter `list` and `count_matching`), and the output a handler records
//! under its lease (`set_output`).

use backstop_core::{Enqueued, ErrorKind, Lease, TaskFilter};
use serde_json::json;

use super::*;
use crate::TxPath;

/// The metadata every task of these cases carries: a string, a number and an object.
fn meta(tenant: &str) -> serde_json::Value {
    json!({"tenant": tenant, "n": 7, "deep": {"tenant": "nested"}, "quote": "it's \"x\""})
}

/// The trace context every labelled task carries.
const TRACE: &str = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";

/// A tagged task of `key` with tenant `tenant`, and [`TRACE`].
fn labelled(key: &str, tenant: &str, tags: &[&str]) -> NewTask {
    NewTask::new("LBL", key)
        .tags(tags.iter().copied())
        .metadata(&meta(tenant))
        .traceparent(TRACE)
        .partition(tenant)
}

/// Assert task `id` holds `tags` (sorted) and the metadata of `tenant`.
async fn assert_labels<H: Harness>(
    ctx: &Ctx<H>,
    id: TaskId,
    tags: &[&str],
    tenant: &str,
    at: &str,
) {
    let t = ctx.task(id).await;
    assert_eq!(t.tags, tags, "{at}: tags");
    let stored: serde_json::Value =
        serde_json::from_str(t.metadata.as_deref().unwrap_or("null")).unwrap();
    assert_eq!(stored, meta(tenant), "{at}: metadata");
    assert_eq!(t.traceparent.as_deref(), Some(TRACE), "{at}: trace context");
    assert_eq!(t.partition.as_deref(), Some(tenant), "{at}: partition");
    assert_eq!(t.output, None, "{at}: no output yet");
}

/// The ids `filter` lists, and the count `count_matching` gives for it (the same).
async fn listed<H: Harness>(ctx: &Ctx<H>, filter: TaskFilter) -> Vec<TaskId> {
    let mut ids: Vec<TaskId> = ctx
        .store
        .list(&filter.clone().limit(1000))
        .await
        .unwrap()
        .iter()
        .map(|t| t.id)
        .collect();
    ids.sort();
    let n = ctx.store.count_matching(&filter).await.unwrap();
    assert_eq!(
        n,
        ids.len() as u64,
        "count_matching agrees with list: {filter:?}"
    );
    ids
}

/// Tags (sorted, each once), metadata and a trace context are stored as given on the
/// store's enqueue, its batch, and the caller's transaction along every path (one task
/// and a batch); a task without them has none. `list` and `count_matching` filter on them exactly: a tag is
/// matched whole (not `ab` for `a`, not `a_c` for `abc`), several tags and keys must all
/// match, a metadata key matches a string value only (not the number 7 for "7", not a
/// nested key, case sensitive).
pub async fn tags_and_metadata_are_stored_on_every_path_and_filter_the_list<H: Harness>(
    ctx: &Ctx<H>,
) {
    let mut acme = Vec::new();
    let e = ctx
        .store
        .enqueue(labelled("s1", "acme", &["b", "a", "a"]))
        .await
        .unwrap();
    assert_labels(ctx, e.id, &["a", "b"], "acme", "enqueue").await;
    acme.push(e.id);
    let batch = ctx
        .store
        .enqueue_many(&[
            labelled("m1", "acme", &["a"]),
            labelled("m2", "globex", &["ab", "a_c"]),
        ])
        .await
        .unwrap();
    assert_labels(ctx, batch[0].id, &["a"], "acme", "enqueue_many").await;
    assert_labels(ctx, batch[1].id, &["a_c", "ab"], "globex", "enqueue_many").await;
    acme.push(batch[0].id);
    let globex = batch[1].id;
    for path in TxPath::ALL {
        let one: Enqueued = ctx
            .enqueue_in_tx_on(
                &ctx.store,
                path,
                &format!("row-{path}"),
                labelled(&format!("t-{path}"), "acme", &["a", "tx"]),
                true,
            )
            .await
            .unwrap();
        assert_labels(ctx, one.id, &["a", "tx"], "acme", &format!("{path}")).await;
        let many = ctx
            .enqueue_many_in_tx_via(
                path,
                &format!("rows-{path}"),
                vec![labelled(&format!("tm-{path}"), "acme", &["a", "tx"])],
                true,
            )
            .await
            .unwrap();
        assert_labels(
            ctx,
            many[0].id,
            &["a", "tx"],
            "acme",
            &format!("{path} many"),
        )
        .await;
        acme.extend([one.id, many[0].id]);
    }
    let plain = ctx
        .store
        .enqueue(NewTask::new("LBL", "plain"))
        .await
        .unwrap();
    let t = ctx.task(plain.id).await;
    assert!(t.tags.is_empty() && t.metadata.is_none() && t.output.is_none());
    assert_eq!(t.traceparent, None, "no span, no trace context");
    // a number 7 under "n"; "7" as a string elsewhere
    let seven = ctx
        .store
        .enqueue(NewTask::new("LBL", "seven").metadata(&json!({"n": "7", "tenant": 7})))
        .await
        .unwrap();
    acme.sort();

    let f = TaskFilter::default;
    assert_eq!(
        listed(ctx, f().tag("a")).await,
        acme,
        "tag a: not ab, not a_c"
    );
    assert_eq!(listed(ctx, f().tag("ab")).await, vec![globex]);
    assert!(
        listed(ctx, f().tag("abc")).await.is_empty(),
        "a_c is not abc"
    );
    assert!(listed(ctx, f().tag("a").tag("ab")).await.is_empty(), "both");
    let tx: Vec<TaskId> = listed(ctx, f().tag("tx").tag("a")).await;
    assert_eq!(tx.len(), 2 * TxPath::ALL.len());
    assert_eq!(listed(ctx, f().metadata("tenant", "acme")).await, acme);
    assert_eq!(
        listed(ctx, f().metadata("tenant", "globex")).await,
        vec![globex]
    );
    assert!(listed(ctx, f().metadata("tenant", "ACME")).await.is_empty());
    assert!(listed(ctx, f().metadata("tenant", "nested"))
        .await
        .is_empty());
    assert_eq!(
        listed(ctx, f().metadata("n", "7")).await,
        vec![seven.id],
        "the number 7 is not the string \"7\""
    );
    assert_eq!(
        listed(ctx, f().metadata("quote", "it's \"x\"")).await.len(),
        acme.len() + 1
    );
    assert_eq!(
        listed(
            ctx,
            f().metadata("tenant", "acme").tag("b").event_type("LBL")
        )
        .await,
        vec![e.id]
    );
    assert!(listed(ctx, f().metadata("missing", "acme"))
        .await
        .is_empty());
    assert_eq!(
        listed(ctx, f().tag("a").status(Status::Pending)).await,
        acme,
        "with a status"
    );
}

/// `set_output` records a running task's output under its exact lease and changes
/// nothing else (status, attempts, lease, `updated_at`); a later call replaces it. A
/// stale lease, or a task no longer running, changes nothing (`false`); invalid JSON or
/// output over the limit is refused naming the output, nothing written. The output
/// survives the success mark.
pub async fn set_output_is_fenced_by_the_lease<H: Harness>(ctx: &Ctx<H>) {
    let id = ctx.enqueue("OUT", "o1").await;
    let claimed = ctx.claim(id).await;
    let lease = claimed.lease();
    assert!(ctx.store.set_output(lease, r#"{"rows":1}"#).await.unwrap());
    assert!(ctx.store.set_output(lease, r#"{"rows":2}"#).await.unwrap());
    let t = ctx.task(id).await;
    assert_eq!(t.output.as_deref(), Some(r#"{"rows":2}"#));
    assert_eq!(
        (t.status, t.attempts, t.lease, t.updated_at),
        (Status::Running, 1, claimed.lease, claimed.updated_at)
    );
    let stale = Lease {
        task_id: id,
        token: lease.token + 1,
    };
    assert!(!ctx.store.set_output(stale, "3").await.unwrap());
    for bad in [
        "{nope".to_owned(),
        format!(
            "\"{}\"",
            "x".repeat(backstop_core::limits::MAX_OUTPUT_BYTES)
        ),
    ] {
        let e = ctx.store.set_output(lease, &bad).await.unwrap_err();
        assert_eq!(e.kind(), ErrorKind::InvalidInput, "{e}");
        assert!(e.message().contains("output"), "{e}");
    }
    // the largest output fits
    let largest = format!(
        "\"{}\"",
        "y".repeat(backstop_core::limits::MAX_OUTPUT_BYTES - 2)
    );
    assert!(ctx.store.set_output(lease, &largest).await.unwrap());
    assert_eq!(ctx.task(id).await.output.as_deref(), Some(largest.as_str()));
    assert!(ctx.store.mark_success(lease).await.unwrap());
    assert!(!ctx.store.set_output(lease, "4").await.unwrap(), "finished");
    let t = ctx.task(id).await;
    assert_eq!(
        (t.status, t.output.as_deref()),
        (Status::Succeeded, Some(largest.as_str()))
    );
    assert!(!ctx
        .store
        .set_output(
            Lease {
                task_id: id + 1000,
                token: 1
            },
            "5"
        )
        .await
        .unwrap());
}

/// A bad tag (a comma, too long, too many), bad metadata (not an object, not JSON, over
/// its bound) or a trace context that is not W3C's is refused with `InvalidInput` naming it, on the store's enqueue, its
/// batch (the good task beside it is not written either) and the caller's transaction;
/// no row is written. A list filter with a bad tag or metadata key is refused too.
pub async fn bad_tags_and_metadata_are_refused_and_write_nothing<H: Harness>(ctx: &Ctx<H>) {
    let before = ctx.count_all().await;
    let big = "x".repeat(backstop_core::limits::MAX_METADATA_BYTES);
    let bad = [
        (NewTask::new("LBL", "b1").tag("a,b"), "tag"),
        (
            NewTask::new("LBL", "b2").tag("t".repeat(backstop_core::limits::MAX_TAG_BYTES + 1)),
            "tag",
        ),
        (
            NewTask::new("LBL", "b3")
                .tags((0..=backstop_core::limits::MAX_TAGS).map(|i| format!("t{i}"))),
            "tags",
        ),
        (NewTask::new("LBL", "b4").metadata(&json!([1])), "metadata"),
        (NewTask::new("LBL", "b5").metadata_raw("{nope"), "metadata"),
        (
            NewTask::new("LBL", "b6").metadata(&json!({ "a": big })),
            "metadata",
        ),
        (
            NewTask::new("LBL", "b7").traceparent("00-abc-def-01"),
            "traceparent",
        ),
        (
            NewTask::new("LBL", "b8").traceparent(TRACE.to_uppercase()),
            "traceparent",
        ),
    ];
    for (task, named) in bad {
        let check = |e: backstop_core::Error, at: &str| {
            assert_eq!(e.kind(), ErrorKind::InvalidInput, "{at}: {e}");
            assert!(e.message().contains(named), "{at}: {e}");
        };
        check(
            ctx.store.enqueue(task.clone()).await.unwrap_err(),
            "enqueue",
        );
        let batch = vec![NewTask::new("LBL", "good"), task.clone()];
        check(
            ctx.store.enqueue_many(&batch).await.unwrap_err(),
            "enqueue_many",
        );
        for path in TxPath::ALL {
            let e = ctx
                .enqueue_in_tx_on(&ctx.store, path, &format!("bad-{path}"), task.clone(), true)
                .await
                .unwrap_err();
            check(e, &format!("{path}"));
        }
    }
    assert_eq!(ctx.count_all().await, before, "nothing written");
    for filter in [
        TaskFilter::default().tag("a b"),
        TaskFilter::default().metadata("a.b", "v"),
    ] {
        let e = ctx.store.list(&filter).await.unwrap_err();
        assert_eq!(e.kind(), ErrorKind::InvalidInput, "{e}");
    }
}
