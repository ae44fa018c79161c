//! Migration, store settings and the trait object.

use super::*;

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

/// the store works behind `Arc<dyn TaskStore>`, conveniences included.
pub async fn store_works_as_dyn_task_store<H: Harness>(ctx: &Ctx<H>) {
    let store: Arc<dyn TaskStore> = Arc::new(ctx.store.clone());
    let e = store.enqueue(NewTask::new("E", "dyn")).await.unwrap();
    let t = store.grab_by_id(e.id, &ctx.owner).await.unwrap().unwrap();
    assert!(store.mark_success(t.lease()).await.unwrap());
    assert_eq!(ctx.task(e.id).await.status, Status::Succeeded);
}
