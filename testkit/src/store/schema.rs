//! Migration, store settings and the trait object.

use backstop_core::driver::schema::LATEST;
use backstop_core::{Lease, Priority};

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
    let t = store.claim_by_id(e.id, &ctx.owner).await.unwrap().unwrap();
    assert!(store.mark_success(t.lease()).await.unwrap());
    assert_eq!(ctx.task(e.id).await.status, Status::Succeeded);
}

/// The columns of schema version 1, which every later version keeps.
const V1_COLUMNS: &str = "event_type, biz_key, payload, status, attempts, max_attempts, \
    retry_strategy, retry_interval_ms, retry_max_interval_ms, next_run_at, owner, lease, \
    last_error, created_at, updated_at";

/// migrate: a table of every earlier schema version — and one made before versions were
/// recorded — is upgraded with its rows intact, and every operation works on them.
pub async fn migrate_upgrades_a_table_of_every_earlier_version<H: Harness>(ctx: &Ctx<H>) {
    for from in 0..LATEST {
        let table = format!("upg_v{from}");
        let store = ctx
            .harness
            .open(&ctx.db, StoreConfig::default().table(&table))
            .await
            .unwrap();
        store.migrate_to(from.max(1)).await.unwrap();
        if from == 0 {
            // a table made before versioning has no version table
            ctx.harness
                .execute(&ctx.db, &format!("DROP TABLE {table}_migrations"))
                .await;
        }
        ctx.harness
            .execute(
                &ctx.db,
                &format!(
                    "INSERT INTO {table} ({V1_COLUMNS}) VALUES
                    ('OLD', 'due', '{{\"n\":1}}', 0, 0, 3, 'FIXED', 1000, 1000, {{now}}, NULL, 0, NULL, {{now}}, {{now}}),
                    ('OLD', 'failed', '{{}}', 2, 3, 3, 'EXPONENTIAL', 10000, 86400000, {{now}}, NULL, 3, 'boom', {{now}}, {{now}}),
                    ('OLD', 'done', '{{}}', 1, 1, 5, 'EXPONENTIAL', 10000, 86400000, {{now}}, 'w-1', 1, NULL, {{now}}, {{now}}),
                    ('OLD', 'busy', '{{}}', 3, 1, 5, 'FIXED', 5000, 5000, {{now}}, 'w-2', 4, NULL, {{now}}, {{now}}),
                    ('OTHER', 'due', '{{}}', 0, 0, 5, 'FIXED', 1000, 1000, {{now}}, NULL, 0, NULL, {{now}}, {{now}})"
                ),
            )
            .await;
        store.migrate().await.unwrap();
        store.migrate().await.unwrap(); // idempotent
        store.migrate_to(1).await.unwrap(); // no downgrade: nothing changes

        // the rows are intact
        let rows = store
            .list(&TaskFilter::default().event_type("OLD"))
            .await
            .unwrap();
        let by_key: HashMap<&str, &Task> = rows.iter().map(|t| (t.biz_key.as_str(), t)).collect();
        assert_eq!(rows.len(), 4, "from v{from}: {rows:?}");
        let due = by_key["due"];
        assert_eq!(
            (due.status, due.attempts, due.lease, due.payload.as_str()),
            (Status::Pending, 0, 0, "{\"n\":1}"),
            "from v{from}"
        );
        assert_eq!(due.retry, RetryPolicy::fixed(3, Duration::from_secs(1)));
        let failed = by_key["failed"];
        assert_eq!(
            (failed.status, failed.attempts, failed.lease),
            (Status::Failed, 3, 3)
        );
        assert_eq!(failed.last_error.as_deref(), Some("boom"));
        // rows from before jitter keep their exact schedule
        assert_eq!(
            failed.retry,
            RetryPolicy::exponential(3, Duration::from_secs(10)).jitter(0)
        );
        assert_eq!(
            (failed.priority, due.priority),
            (Priority::NORMAL, Priority::NORMAL)
        );
        let busy = by_key["busy"];
        assert_eq!(
            (busy.status, busy.owner.as_deref(), busy.lease),
            (Status::Running, Some("w-2"), 4)
        );
        assert_eq!(by_key["done"].status, Status::Succeeded);

        // the unique key holds across the upgrade, per (event_type, biz_key)
        let again = store.enqueue(NewTask::new("OLD", "due")).await.unwrap();
        assert_eq!((again.id, again.created), (due.id, false), "from v{from}");
        // a business key alone finds its tasks of every type
        let keyed = store
            .list(&TaskFilter::default().biz_key("due"))
            .await
            .unwrap();
        assert_eq!(keyed.len(), 2, "from v{from}: {keyed:?}");

        // claims, marks, fenced marks and resets work on the old rows
        let claimed = store
            .claim_batch(&ctx.owner, &["OLD".to_owned()], 10)
            .await
            .unwrap();
        assert_eq!(claimed.len(), 1, "only the due pending task: {claimed:?}");
        assert_eq!(
            (claimed[0].id, claimed[0].attempts, claimed[0].lease),
            (due.id, 1, 1)
        );
        assert!(store.mark_success(claimed[0].lease()).await.unwrap());
        assert!(!store
            .mark_success(Lease {
                task_id: busy.id,
                token: 3
            })
            .await
            .unwrap());
        let reset = store.manual_reset(failed.id, HOUR).await.unwrap();
        assert_eq!((reset.status, reset.attempts), (Status::Pending, 0));

        // new tasks go in beside them
        let fresh = store.enqueue(NewTask::new("OLD", "new")).await.unwrap();
        assert!(fresh.created);
        let t = store.claim_by_id(fresh.id, &ctx.owner).await.unwrap();
        assert!(t.is_some(), "from v{from}: a new task is claimable");
        let s = store.stats().await.unwrap();
        assert_eq!(
            (
                s.count(Status::Pending),
                s.count(Status::Running),
                s.count(Status::Succeeded),
                s.count(Status::Failed)
            ),
            (2, 2, 2, 0),
            "from v{from}: {s:?}"
        );
    }
    assert_nothing_written_to_default_table(ctx).await;
}

/// migrate: instances that start together migrate a fresh table once, all successfully.
pub async fn migrate_runs_once_when_instances_race<H: Harness>(ctx: &Ctx<H>) {
    let mut stores = Vec::new();
    for _ in 0..4 {
        stores.push(
            ctx.harness
                .open(&ctx.db, StoreConfig::default().table("raced"))
                .await
                .unwrap(),
        );
    }
    let results = within(
        "the migrations",
        futures_util::future::join_all(stores.iter().map(|s| s.migrate())),
    )
    .await;
    for r in results {
        r.unwrap();
    }
    let e = stores[0].enqueue(NewTask::new("E", "k")).await.unwrap();
    let seen = stores[3].get(e.id).await.unwrap().unwrap();
    assert_eq!(seen.biz_key, "k");
}

/// migrate: a version table with a gap is a `Config` error; one from a newer release is
/// accepted as it is (its migrations only add); an unknown target is `InvalidInput`.
pub async fn migrate_checks_the_recorded_versions<H: Harness>(ctx: &Ctx<H>) {
    let table = crate::version_table(&ctx.config.table);
    ctx.harness
        .execute(&ctx.db, &format!("DELETE FROM {table} WHERE version = 1"))
        .await;
    assert_kind(ctx.store.migrate().await, ErrorKind::Config, &table);
    ctx.harness
        .execute(
            &ctx.db,
            &format!(
                "INSERT INTO {table} (version, name, applied_at) VALUES (1, 'restored', {{now}}), \
                 ({}, 'from a newer release', {{now}})",
                LATEST + 1
            ),
        )
        .await;
    ctx.store.migrate().await.unwrap();
    let id = ctx.enqueue("E", "after").await;
    assert_eq!(ctx.task(id).await.status, Status::Pending);
    assert_kind(
        ctx.store.migrate_to(LATEST + 1).await,
        ErrorKind::InvalidInput,
        "no schema version",
    );
    assert_kind(
        ctx.store.migrate_to(0).await,
        ErrorKind::InvalidInput,
        "no schema version",
    );
}

async fn assert_nothing_written_to_default_table<H: Harness>(ctx: &Ctx<H>) {
    assert_eq!(ctx.count_all().await, 0, "the default table is untouched");
}
