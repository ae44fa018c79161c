//! Retention: purging and deleting succeeded tasks.

use super::*;

/// purge_succeeded: deletes succeeded tasks older than the retention, at most `limit`,
/// never any other status.
pub async fn purge_succeeded_deletes_only_old_succeeded_tasks<H: Harness>(ctx: &Ctx<H>) {
    let week = Duration::from_secs(7 * 24 * 3600);
    let mut old_done = Vec::new();
    for i in 0..3 {
        let id = ctx.enqueue("E", &format!("old{i}")).await;
        let l = ctx.claim(id).await.lease();
        ctx.store.mark_success(l).await.unwrap();
        ctx.backdate(id, TimeColumn::UpdatedAt, week + HOUR).await;
        old_done.push(id);
    }
    let fresh_done = ctx.enqueue("E", "fresh").await;
    let l = ctx.claim(fresh_done).await.lease();
    ctx.store.mark_success(l).await.unwrap();
    let old_failed = ctx.enqueue("E", "failed").await;
    let l = ctx.claim(old_failed).await.lease();
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
        let l = ctx.claim(id).await.lease();
        ctx.store.mark_success(l).await.unwrap();
        done.push(id);
    }
    let failed = ctx.enqueue("E", "failed").await;
    let l = ctx.claim(failed).await.lease();
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

/// A task of `ctx` in `status` (succeeded, failed or cancelled), its `updated_at` moved
/// back by `age`.
async fn finished<H: Harness>(ctx: &Ctx<H>, key: &str, status: Status, age: Duration) -> TaskId {
    let id = ctx.enqueue("E", key).await;
    match status {
        Status::Cancelled => {
            ctx.store
                .cancel(id, &backstop_core::Audit::new("op", "not needed"))
                .await
                .unwrap();
        }
        _ => {
            let l = ctx.claim(id).await.lease();
            if status == Status::Succeeded {
                ctx.store.mark_success(l).await.unwrap();
            } else {
                ctx.store.mark_fail(l, "x").await.unwrap();
            }
        }
    }
    if !age.is_zero() {
        ctx.backdate(id, TimeColumn::UpdatedAt, age).await;
    }
    id
}

/// purge_finished: each terminal state is purged by its own call and age, at most
/// `limit` at a time, oldest first; tasks of the other states, young ones, and pending
/// or running tasks however old are kept; a status that is not terminal is
/// `InvalidInput` naming `status`, and deletes nothing.
pub async fn purge_finished_purges_each_terminal_state_on_its_own<H: Harness>(ctx: &Ctx<H>) {
    let week = Duration::from_secs(7 * 24 * 3600);
    let mut old: HashMap<Status, Vec<TaskId>> = HashMap::new();
    let mut kept = Vec::new();
    for status in [Status::Succeeded, Status::Failed, Status::Cancelled] {
        for i in 0..2 {
            let key = format!("old-{status}-{i}");
            let age = week + HOUR * (2 - i);
            old.entry(status)
                .or_default()
                .push(finished(ctx, &key, status, age).await);
        }
        kept.push(finished(ctx, &format!("young-{status}"), status, Duration::ZERO).await);
    }
    let pending = ctx.enqueue("E", "pending").await;
    ctx.backdate(pending, TimeColumn::UpdatedAt, 2 * week).await;
    let running = ctx.enqueue("E", "running").await;
    ctx.claim(running).await;
    ctx.backdate(running, TimeColumn::UpdatedAt, 2 * week).await;
    kept.extend([pending, running]);

    for status in [Status::Pending, Status::Running, Status::Waiting] {
        assert_kind(
            ctx.store.purge_finished(status, Duration::ZERO, 10).await,
            ErrorKind::InvalidInput,
            "status",
        );
    }
    for status in [Status::Failed, Status::Cancelled, Status::Succeeded] {
        // one at a time: the oldest first
        assert_eq!(ctx.store.purge_finished(status, week, 1).await.unwrap(), 1);
        assert!(
            ctx.store.get(old[&status][0]).await.unwrap().is_none(),
            "{status}"
        );
        assert!(
            ctx.store.get(old[&status][1]).await.unwrap().is_some(),
            "{status}"
        );
        assert_eq!(ctx.store.purge_finished(status, week, 10).await.unwrap(), 1);
        assert_eq!(ctx.store.purge_finished(status, week, 10).await.unwrap(), 0);
        // the other states' old tasks are still there until their own purge
        let left = ctx.store.stats().await.unwrap();
        assert_eq!(left.count(status), 1, "{status}: the young one");
    }
    for id in kept {
        assert!(ctx.store.get(id).await.unwrap().is_some(), "task {id} kept");
    }
}

/// delete_finished: deletes exactly the listed tasks still in the given terminal
/// state; other listed tasks are kept; a non-terminal status is `InvalidInput`.
pub async fn delete_finished_deletes_listed_tasks_of_its_state<H: Harness>(ctx: &Ctx<H>) {
    let failed = finished(ctx, "f", Status::Failed, Duration::ZERO).await;
    let cancelled = finished(ctx, "c", Status::Cancelled, Duration::ZERO).await;
    let succeeded = finished(ctx, "s", Status::Succeeded, Duration::ZERO).await;
    let pending = ctx.enqueue("E", "p").await;
    let all = [failed, cancelled, succeeded, pending];
    assert_kind(
        ctx.store.delete_finished(Status::Pending, &all).await,
        ErrorKind::InvalidInput,
        "status",
    );
    assert_eq!(
        ctx.store
            .delete_finished(Status::Failed, &all)
            .await
            .unwrap(),
        1
    );
    assert_eq!(
        ctx.store
            .delete_finished(Status::Cancelled, &all)
            .await
            .unwrap(),
        1
    );
    assert!(ctx.store.get(failed).await.unwrap().is_none());
    assert!(ctx.store.get(cancelled).await.unwrap().is_none());
    for id in [succeeded, pending] {
        assert!(ctx.store.get(id).await.unwrap().is_some());
    }
}

/// purge_audit: entries of the tasks' audit log and of the queues' log older than the
/// age are deleted, oldest first, up to `limit` from each log; younger ones are kept.
pub async fn purge_audit_deletes_old_entries_of_both_logs<H: Harness>(ctx: &Ctx<H>) {
    let year = Duration::from_secs(365 * 24 * 3600);
    let audit = backstop_core::Audit::new("op", "why");
    let mut old_tasks = Vec::new();
    for i in 0..3 {
        let id = ctx.enqueue("E", &format!("old{i}")).await;
        ctx.store.cancel(id, &audit).await.unwrap();
        old_tasks.push(id);
    }
    ctx.store
        .set_queue("Q", backstop_core::QueueChange::Pause, &audit)
        .await
        .unwrap();
    for (table, column) in [
        ("backstop_task_audit", "at"),
        ("backstop_task_queue_audit", "at"),
    ] {
        ctx.harness
            .backdate_rows(&ctx.db, table, column, year + HOUR)
            .await;
    }
    let young = ctx.enqueue("E", "young").await;
    ctx.store.cancel(young, &audit).await.unwrap();
    ctx.store
        .set_queue("Q", backstop_core::QueueChange::Resume, &audit)
        .await
        .unwrap();

    // 2 task entries and the one old queue entry
    assert_eq!(ctx.store.purge_audit(year, 2).await.unwrap(), 3);
    assert!(ctx.store.audit_log(old_tasks[0]).await.unwrap().is_empty());
    assert_eq!(ctx.store.audit_log(old_tasks[2]).await.unwrap().len(), 1);
    assert_eq!(ctx.store.purge_audit(year, 10).await.unwrap(), 1);
    assert_eq!(ctx.store.purge_audit(year, 10).await.unwrap(), 0);
    assert!(ctx.store.audit_log(old_tasks[2]).await.unwrap().is_empty());
    assert_eq!(ctx.store.audit_log(young).await.unwrap().len(), 1);
    let q: Vec<String> = ctx
        .store
        .queue_log("Q")
        .await
        .unwrap()
        .into_iter()
        .map(|e| e.action)
        .collect();
    assert_eq!(q, vec!["resume".to_owned()]);
}

/// purge_event_types: event types no engine has registered for longer than the age
/// are removed from the registry; one registered again since is kept.
pub async fn purge_event_types_removes_decommissioned_types<H: Harness>(ctx: &Ctx<H>) {
    let month = Duration::from_secs(30 * 24 * 3600);
    let types = |names: &[&str]| names.iter().map(|s| (*s).to_owned()).collect::<Vec<_>>();
    ctx.store
        .register_event_types(&types(&["GONE", "OLD", "LIVE"]))
        .await
        .unwrap();
    ctx.harness
        .backdate_rows(
            &ctx.db,
            "backstop_task_handlers",
            "last_seen_at",
            month + HOUR,
        )
        .await;
    ctx.store
        .register_event_types(&types(&["LIVE"]))
        .await
        .unwrap();
    assert_eq!(ctx.store.purge_event_types(month, 1).await.unwrap(), 1);
    assert_eq!(ctx.store.purge_event_types(month, 10).await.unwrap(), 1);
    assert_eq!(ctx.store.purge_event_types(month, 10).await.unwrap(), 0);
    let left: Vec<String> = ctx
        .store
        .event_types()
        .await
        .unwrap()
        .into_iter()
        .map(|t| t.event_type)
        .collect();
    assert_eq!(left, types(&["LIVE"]));
}
