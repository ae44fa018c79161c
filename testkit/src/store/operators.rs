//! Operators' changes: cancel and delete, fenced against claims, each recorded in the
//! task's audit log in the same transaction.

use super::*;
use backstop_core::limits::MAX_OPERATOR_BYTES;
use backstop_core::Audit;

fn audit() -> Audit {
    Audit::new("alice", "the customer withdrew the order")
}

/// cancel: a pending task becomes cancelled (lease bumped, the rest kept), is never
/// claimed afterwards (by id or in a batch), and the audit log says who, what, why and
/// when; stats count it as cancelled.
pub async fn cancel_a_pending_task_never_runs_it<H: Harness>(ctx: &Ctx<H>) {
    let id = ctx.enqueue("MAIL", "m1").await;
    let before = Utc::now();
    let t = ctx.store.cancel(id, &audit()).await.unwrap();
    let after = Utc::now();
    assert_eq!(
        (t.id, t.status, t.attempts, t.lease),
        (id, Status::Cancelled, 0, 1)
    );
    assert_between("updated_at", t.updated_at, before, after);
    assert_eq!(ctx.task(id).await, t, "returned as stored");
    assert!(ctx
        .store
        .claim_by_id(id, &ctx.owner)
        .await
        .unwrap()
        .is_none());
    let types = vec!["MAIL".to_owned()];
    assert!(ctx
        .store
        .claim_batch(&ctx.owner, &types, 10)
        .await
        .unwrap()
        .is_empty());
    let log = ctx.store.audit_log(id).await.unwrap();
    assert_eq!(log.len(), 1);
    let e = &log[0];
    assert_eq!(
        (
            e.task_id,
            e.action.as_str(),
            e.operator.as_str(),
            e.reason.as_str()
        ),
        (id, "cancel", "alice", "the customer withdrew the order")
    );
    assert_between("audit at", e.at, before, after);
    assert_eq!(ctx.store.stats().await.unwrap().count(Status::Cancelled), 1);
}

/// cancel: a running task is cancelled too; its holder's heartbeat and completion are
/// refused (the lease moved), so its outcome is never applied.
pub async fn cancel_a_running_task_refuses_its_completion<H: Harness>(ctx: &Ctx<H>) {
    let id = ctx.enqueue("MAIL", "m1").await;
    let held = ctx.claim(id).await;
    let t = ctx.store.cancel(id, &audit()).await.unwrap();
    assert_eq!(
        (t.status, t.attempts, t.lease),
        (Status::Cancelled, 1, held.lease + 1)
    );
    assert_eq!(
        ctx.store.heartbeat(&[held.lease()]).await.unwrap(),
        vec![false]
    );
    assert_eq!(
        ctx.store
            .mark(&[Mark::success(held.lease())])
            .await
            .unwrap(),
        vec![false]
    );
    let now = ctx.task(id).await;
    assert_eq!((now.status, now.lease), (Status::Cancelled, held.lease + 1));
}

/// cancel: a succeeded, failed or cancelled task is refused as `Conflict` naming its
/// status, a missing one as `NotFound`, bad audits as `InvalidInput`; nothing changes
/// and nothing is logged.
pub async fn cancel_refuses_finished_tasks_and_writes_nothing<H: Harness>(ctx: &Ctx<H>) {
    let done = ctx.enqueue("MAIL", "done").await;
    let l = ctx.claim(done).await.lease();
    ctx.store.mark(&[Mark::success(l)]).await.unwrap();
    let failed = ctx.enqueue("MAIL", "failed").await;
    let l = ctx.claim(failed).await.lease();
    ctx.store.mark(&[Mark::fail(l, "boom")]).await.unwrap();
    let cancelled = ctx.enqueue("MAIL", "cancelled").await;
    ctx.store.cancel(cancelled, &audit()).await.unwrap();
    for (id, status) in [
        (done, "succeeded"),
        (failed, "failed"),
        (cancelled, "cancelled"),
    ] {
        let before = ctx.task(id).await;
        assert_conflict(ctx.store.cancel(id, &audit()).await, status);
        assert_eq!(
            ctx.task(id).await,
            before,
            "a refused cancel changed {status}"
        );
    }
    assert_eq!(ctx.store.audit_log(done).await.unwrap(), vec![]);
    assert_eq!(ctx.store.audit_log(cancelled).await.unwrap().len(), 1);
    let missing = ctx.store.cancel(9_999_999, &audit()).await.unwrap_err();
    assert_eq!(missing.kind(), ErrorKind::NotFound);
    let pending = ctx.enqueue("MAIL", "pending").await;
    for bad in [
        Audit::new("", "why"),
        Audit::new("o".repeat(MAX_OPERATOR_BYTES + 1), "why"),
    ] {
        assert_kind(
            ctx.store.cancel(pending, &bad).await,
            ErrorKind::InvalidInput,
            "operator",
        );
        assert_kind(
            ctx.store.delete(pending, &bad).await,
            ErrorKind::InvalidInput,
            "operator",
        );
    }
    let t = ctx.task(pending).await;
    assert_eq!((t.status, t.lease), (Status::Pending, 0));
    assert_eq!(ctx.store.audit_log(pending).await.unwrap(), vec![]);
}

#[track_caller]
fn assert_conflict(r: backstop_core::Result<Task>, status: &str) {
    let e = r.expect_err("refused");
    assert_eq!(e.kind(), ErrorKind::Conflict, "{e}");
    assert!(e.to_string().contains(status), "{e} should name {status}");
    assert!(!e.is_temporary());
}

/// cancel vs claim: an operator cancels every task while several claimers take them on
/// their own connections. Each task ends cancelled, with one audit entry; every task a
/// claimer got has its lease moved on by one, so none of their completions applies.
pub async fn cancel_races_claims_and_no_claimed_completion_applies<H: Harness>(ctx: &Ctx<H>) {
    const TASKS: usize = 40;
    let mut ids = Vec::new();
    for i in 0..TASKS {
        ids.push(ctx.enqueue("RACE", &format!("r{i}")).await);
    }
    let claimers: Vec<_> = (0..3)
        .map(|c| async move {
            let store = ctx.new_store().await;
            let me = owner(&format!("claimer-{c}"));
            let types = vec!["RACE".to_owned()];
            let mut got = Vec::new();
            for _ in 0..20 {
                got.extend(store.claim_batch(&me, &types, 2).await.unwrap());
                tokio::task::yield_now().await;
            }
            got
        })
        .collect();
    let canceller = async {
        let store = ctx.new_store().await;
        for id in &ids {
            store.cancel(*id, &audit()).await.unwrap();
        }
    };
    let (claimed, ()) = within(
        "the claimers and the canceller",
        futures_util::future::join(futures_util::future::join_all(claimers), canceller),
    )
    .await;
    let claimed: Vec<Task> = claimed.into_iter().flatten().collect();
    for t in &claimed {
        assert_eq!(t.status, Status::Running);
        let now = ctx.task(t.id).await;
        assert_eq!(
            now.lease,
            t.lease + 1,
            "the cancel after the claim moved the lease"
        );
    }
    let marks: Vec<Mark> = claimed.iter().map(|t| Mark::success(t.lease())).collect();
    if !marks.is_empty() {
        assert!(ctx.store.mark(&marks).await.unwrap().iter().all(|ok| !ok));
    }
    for id in &ids {
        assert_eq!(ctx.task(*id).await.status, Status::Cancelled);
        assert_eq!(ctx.store.audit_log(*id).await.unwrap().len(), 1);
    }
}

/// delete: a task that is not running is removed (returned as it was) and the audit log
/// keeps an entry; a running one is refused (cancel it first), a missing one is
/// `NotFound`.
pub async fn delete_removes_a_task_that_is_not_running<H: Harness>(ctx: &Ctx<H>) {
    let pending = ctx.enqueue("MAIL", "p").await;
    let failed = ctx.enqueue("MAIL", "f").await;
    let l = ctx.claim(failed).await.lease();
    ctx.store.mark(&[Mark::fail(l, "boom")]).await.unwrap();
    for (id, status) in [(pending, Status::Pending), (failed, Status::Failed)] {
        let before = ctx.task(id).await;
        let gone = ctx.store.delete(id, &audit()).await.unwrap();
        assert_eq!(gone, before, "returned as it was");
        assert_eq!(gone.status, status);
        assert!(ctx.store.get(id).await.unwrap().is_none());
        let log = ctx.store.audit_log(id).await.unwrap();
        assert_eq!(log.len(), 1);
        assert_eq!(
            (log[0].action.as_str(), log[0].operator.as_str()),
            ("delete", "alice")
        );
    }
    let running = ctx.enqueue("MAIL", "r").await;
    let held = ctx.claim(running).await;
    assert_conflict(ctx.store.delete(running, &audit()).await, "running");
    assert_eq!(ctx.task(running).await, held);
    // cancelled first, then it can go
    ctx.store.cancel(running, &audit()).await.unwrap();
    ctx.store.delete(running, &audit()).await.unwrap();
    let actions: Vec<String> = ctx
        .store
        .audit_log(running)
        .await
        .unwrap()
        .into_iter()
        .map(|e| e.action)
        .collect();
    assert_eq!(actions, vec!["cancel", "delete"]);
    let missing = ctx.store.delete(running, &audit()).await.unwrap_err();
    assert_eq!(missing.kind(), ErrorKind::NotFound);
    assert_eq!(ctx.count_all().await, 0);
}

/// A task of `event_type`/`key` failed after `attempts` claims (the last with `error`).
async fn failed_task<H: Harness>(ctx: &Ctx<H>, event_type: &str, key: &str) -> TaskId {
    let id = ctx.enqueue(event_type, key).await;
    let l = ctx.claim(id).await.lease();
    ctx.store.mark(&[Mark::fail(l, "boom")]).await.unwrap();
    id
}

/// reset: a failed or cancelled task goes back to pending with no attempts spent, due
/// now, owner cleared, its last error kept for the record, and an audit entry; it needs
/// no engine setting. Pending, running and succeeded tasks are refused (`Conflict`,
/// nothing written), a missing one is `NotFound`.
pub async fn reset_brings_back_failed_and_cancelled_tasks<H: Harness>(ctx: &Ctx<H>) {
    let failed = failed_task(ctx, "PAY", "f").await;
    let cancelled = ctx.enqueue("PAY", "c").await;
    ctx.store.cancel(cancelled, &audit()).await.unwrap();
    for (id, last_error) in [(failed, Some("boom")), (cancelled, None)] {
        let before_change = ctx.task(id).await;
        let t0 = Utc::now();
        let t = ctx
            .store
            .reset(id, &Audit::new("bob", "fixed"))
            .await
            .unwrap();
        let t1 = Utc::now();
        assert_eq!(
            (t.status, t.attempts, t.lease, t.owner.as_deref()),
            (Status::Pending, 0, before_change.lease, None)
        );
        assert_eq!(t.last_error.as_deref(), last_error);
        assert_between("next_run_at", t.next_run_at, t0, t1);
        assert_eq!(ctx.task(id).await, t);
        let log = ctx.store.audit_log(id).await.unwrap();
        let last = log.last().unwrap();
        assert_eq!(
            (
                last.action.as_str(),
                last.operator.as_str(),
                last.reason.as_str()
            ),
            ("reset", "bob", "fixed")
        );
        // it runs again
        assert_eq!(ctx.claim(id).await.attempts, 1);
    }
    let pending = ctx.enqueue("PAY", "p").await;
    let running = ctx.enqueue("PAY", "r").await;
    ctx.claim(running).await;
    let done = ctx.enqueue("PAY", "d").await;
    let l = ctx.claim(done).await.lease();
    ctx.store.mark(&[Mark::success(l)]).await.unwrap();
    for (id, status) in [
        (pending, "pending"),
        (running, "running"),
        (done, "succeeded"),
    ] {
        let before = ctx.task(id).await;
        assert_conflict(ctx.store.reset(id, &audit()).await, status);
        assert_eq!(ctx.task(id).await, before);
        assert_eq!(ctx.store.audit_log(id).await.unwrap(), vec![]);
    }
    let missing = ctx.store.reset(9_999_999, &audit()).await.unwrap_err();
    assert_eq!(missing.kind(), ErrorKind::NotFound);
}

/// reset_matching: resets the failed (or cancelled) tasks the filter matches, at most
/// `limit` per call in id order, each with an audit entry; other event types and other
/// statuses are untouched; a filter asking for another status is refused.
pub async fn reset_matching_resets_a_filter_page_by_page<H: Harness>(ctx: &Ctx<H>) {
    let mut pay = Vec::new();
    for i in 0..5 {
        pay.push(failed_task(ctx, "PAY", &format!("p{i}")).await);
    }
    let ship = failed_task(ctx, "SHIP", "s").await;
    let cancelled = ctx.enqueue("PAY", "c").await;
    ctx.store.cancel(cancelled, &audit()).await.unwrap();
    let pending = ctx.enqueue("PAY", "waiting").await;
    let filter = TaskFilter::default()
        .event_type("PAY")
        .status(Status::Failed)
        .limit(3);
    let ids = |ts: Vec<Task>| ts.into_iter().map(|t| t.id).collect::<Vec<_>>();
    let first = ctx.store.reset_matching(&filter, &audit()).await.unwrap();
    assert!(first
        .iter()
        .all(|t| t.status == Status::Pending && t.attempts == 0));
    assert_eq!(ids(first), pay[..3].to_vec());
    let second = ctx.store.reset_matching(&filter, &audit()).await.unwrap();
    assert_eq!(ids(second), pay[3..].to_vec());
    assert!(ctx
        .store
        .reset_matching(&filter, &audit())
        .await
        .unwrap()
        .is_empty());
    assert_eq!(ctx.task(ship).await.status, Status::Failed);
    assert_eq!(ctx.task(cancelled).await.status, Status::Cancelled);
    assert_eq!(ctx.task(pending).await.attempts, 0);
    for id in &pay {
        assert_eq!(ctx.store.audit_log(*id).await.unwrap().len(), 1);
    }
    // without a status: failed and cancelled alike
    let both = ctx
        .store
        .reset_matching(&TaskFilter::default().limit(10), &audit())
        .await
        .unwrap();
    assert_eq!(ids(both), vec![ship, cancelled]);
    assert_kind(
        ctx.store
            .reset_matching(&TaskFilter::default().status(Status::Running), &audit())
            .await,
        ErrorKind::InvalidInput,
        "only failed or cancelled",
    );
}

/// reset_matching by two operators at once, on their own connections, over one filter:
/// every matching task is reset exactly once (the two answers are disjoint and cover
/// them all), with exactly one audit entry each.
pub async fn two_operators_resetting_one_filter_reset_each_task_once<H: Harness>(ctx: &Ctx<H>) {
    const TASKS: usize = 30;
    let mut all = Vec::new();
    for i in 0..TASKS {
        all.push(failed_task(ctx, "BULK", &format!("b{i}")).await);
    }
    let filter = TaskFilter::default()
        .event_type("BULK")
        .status(Status::Failed)
        .limit(100);
    let operator = |name: &'static str| {
        let filter = filter.clone();
        async move {
            let store = ctx.new_store().await;
            store
                .reset_matching(&filter, &Audit::new(name, "downstream fixed"))
                .await
                .unwrap()
        }
    };
    let (a, b) = tokio::join!(operator("alice"), operator("bob"));
    let mut got: Vec<TaskId> = a.iter().chain(b.iter()).map(|t| t.id).collect();
    got.sort_unstable();
    assert_eq!(got, all, "each task reset exactly once by one of the two");
    for id in &all {
        let log = ctx.store.audit_log(*id).await.unwrap();
        assert_eq!(log.len(), 1, "task {id}: {log:?}");
        let t = ctx.task(*id).await;
        assert_eq!((t.status, t.attempts), (Status::Pending, 0));
    }
}
