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
