//! The retention job.

use super::*;
use backstop_core::Processed;

/// retention purges old succeeded tasks in batches, after the archive has seen them.
pub async fn engine_retention_archives_then_purges_old_succeeded_tasks<H: Harness>(ctx: &Ctx<H>) {
    struct Keep(Arc<Mutex<Vec<TaskId>>>);
    #[backstop_core::async_trait]
    impl Archive for Keep {
        async fn archive(&self, tasks: &[Task]) -> Result<(), BoxError> {
            assert!(tasks.iter().all(|t| t.status == Status::Succeeded));
            self.0.lock().unwrap().extend(tasks.iter().map(|t| t.id));
            Ok(())
        }
    }
    let mut old = Vec::new();
    for i in 0..7 {
        let id = ctx.enqueue("E", &format!("old{i}")).await;
        let l = ctx.claim(id).await.lease();
        assert!(backstop_core::TaskStoreExt::mark_success(&ctx.store, l)
            .await
            .unwrap());
        ctx.backdate(id, TimeColumn::UpdatedAt, 2 * HOUR).await;
        old.push(id);
    }
    let fresh = ctx.enqueue("E", "fresh").await;
    let l = ctx.claim(fresh).await.lease();
    backstop_core::TaskStoreExt::mark_success(&ctx.store, l)
        .await
        .unwrap();
    let failed = ctx.enqueue("E", "failed").await;
    let l = ctx.claim(failed).await.lease();
    backstop_core::TaskStoreExt::mark_fail(&ctx.store, l, "x")
        .await
        .unwrap();
    ctx.backdate(failed, TimeColumn::UpdatedAt, 2 * HOUR).await;

    let archived = Arc::new(Mutex::new(Vec::new()));
    let engine = Engine::builder(ctx.store.clone())
        .config(
            fast_config()
                .retention(Some(HOUR))
                .purge_interval(Duration::from_millis(50))
                .purge_batch(3),
        )
        .handler("E", flaky(Calls::default(), 0), opts())
        .archive(Keep(Arc::clone(&archived)))
        .start()
        .unwrap();
    eventually("old succeeded tasks to be purged", || async {
        ctx.store.stats().await.unwrap().count(Status::Succeeded) == 1
    })
    .await;
    engine.shutdown().await;
    let mut got = archived.lock().unwrap().clone();
    got.sort();
    assert_eq!(got, old, "each purged task archived once");
    for id in &old {
        assert!(ctx.store.get(*id).await.unwrap().is_none());
    }
    assert!(ctx.store.get(fresh).await.unwrap().is_some());
    assert!(ctx.store.get(failed).await.unwrap().is_some());
}

/// The retention job purges the participant barrier's records older than
/// `barrier_retention` and keeps younger ones: a forward call its compensation preceded
/// hangs while the records are kept, and runs once they are purged.
pub async fn engine_retention_purges_old_barrier_records<H: Harness>(ctx: &Ctx<H>) {
    use backstop_core::{Barrier, BranchCall, BranchOp};
    let decide = |branch: &'static str, op, row: &'static str| async move {
        let call = BranchCall::new("retained", branch, op).unwrap();
        ctx.barrier_via(crate::TxPath::Native, row, call, true)
            .await
            .unwrap()
    };
    let records = || async {
        let mut r: Vec<_> = ctx
            .store
            .barrier_records("retained")
            .await
            .unwrap()
            .into_iter()
            .map(|r| (r.branch_id, r.op))
            .collect();
        r.sort_by_key(|(b, op)| (b.clone(), op.as_str()));
        r
    };
    // two records two hours old, one written now
    assert_eq!(
        decide("old", BranchOp::Compensate, "r1").await,
        Barrier::EmptyCompensation
    );
    ctx.harness
        .backdate_rows(&ctx.db, "backstop_task_barrier", "created_at", 2 * HOUR)
        .await;
    assert_eq!(decide("new", BranchOp::Action, "r2").await, Barrier::Run);
    assert_eq!(
        decide("old", BranchOp::Action, "r3").await,
        Barrier::Hanging
    );
    let engine = Engine::builder(ctx.store.clone())
        .config(
            fast_config()
                .retention(None)
                .barrier_retention(Some(HOUR))
                .purge_interval(Duration::from_millis(50)),
        )
        .handler("E", flaky(Calls::default(), 0), opts())
        .start()
        .unwrap();
    eventually("the old barrier records to be purged", || async {
        !records().await.iter().any(|(b, _)| b == "old")
    })
    .await;
    engine.shutdown().await;
    assert_eq!(
        records().await,
        [("new".to_owned(), BranchOp::Action)],
        "the young record stays"
    );
    assert_eq!(decide("old", BranchOp::Action, "r4").await, Barrier::Run);
}

/// Each finished state is purged by its own age, through the archive: succeeded after
/// `retention` (1 h), failed after `failed_retention` (3 h: one 2 h old is kept, one
/// 4 h old purged), cancelled never (`cancelled_retention` off, one 30 days old kept).
/// The archive sees exactly the purged tasks, each once, in their states.
pub async fn engine_retention_purges_each_finished_state_by_its_own_age<H: Harness>(ctx: &Ctx<H>) {
    struct Keep(Arc<Mutex<Vec<(TaskId, Status)>>>);
    #[backstop_core::async_trait]
    impl Archive for Keep {
        async fn archive(&self, tasks: &[Task]) -> Result<(), BoxError> {
            let mut seen = self.0.lock().unwrap();
            seen.extend(tasks.iter().map(|t| (t.id, t.status)));
            Ok(())
        }
    }
    let finished = |key: &'static str, fail: bool, age: Duration| async move {
        let id = ctx.enqueue("E", key).await;
        let l = ctx.claim(id).await.lease();
        let store = &ctx.store;
        if fail {
            backstop_core::TaskStoreExt::mark_fail(store, l, "x")
                .await
                .unwrap();
        } else {
            backstop_core::TaskStoreExt::mark_success(store, l)
                .await
                .unwrap();
        }
        ctx.backdate(id, TimeColumn::UpdatedAt, age).await;
        id
    };
    let succeeded = finished("s", false, 2 * HOUR).await;
    let failed_young = finished("f-2h", true, 2 * HOUR).await;
    let failed_old = finished("f-4h", true, 4 * HOUR).await;
    let cancelled = ctx.enqueue("E", "c").await;
    ctx.store
        .cancel(cancelled, &backstop_core::Audit::new("op", "no"))
        .await
        .unwrap();
    ctx.backdate(cancelled, TimeColumn::UpdatedAt, 30 * 24 * HOUR)
        .await;

    let archived = Arc::new(Mutex::new(Vec::new()));
    let engine = Engine::builder(ctx.store.clone())
        .config(
            fast_config()
                .retention(Some(HOUR))
                .failed_retention(Some(3 * HOUR))
                .cancelled_retention(None)
                .purge_interval(Duration::from_millis(50)),
        )
        .handler("E", flaky(Calls::default(), 0), opts())
        .archive(Keep(Arc::clone(&archived)))
        .start()
        .unwrap();
    eventually(
        "the old succeeded and failed tasks to be purged",
        || async {
            ctx.store.get(succeeded).await.unwrap().is_none()
                && ctx.store.get(failed_old).await.unwrap().is_none()
        },
    )
    .await;
    // another round or two: nothing more goes
    tokio::time::sleep(Duration::from_millis(200)).await;
    engine.shutdown().await;
    let mut got = archived.lock().unwrap().clone();
    got.sort_by_key(|(id, _)| *id);
    assert_eq!(
        got,
        vec![(succeeded, Status::Succeeded), (failed_old, Status::Failed)]
    );
    for id in [failed_young, cancelled] {
        assert!(ctx.store.get(id).await.unwrap().is_some(), "task {id} kept");
    }
}

/// The retention job also purges the operators' logs (`audit_retention`), the
/// registry's decommissioned event types (`registry_retention`; the engine's own types,
/// registered at start, stay) and, given the store's inbox (`inbox_retention`), its old
/// rows — with no stream consumer running. Younger rows of each stay.
pub async fn engine_retention_purges_logs_registry_and_inbox<H: Harness>(ctx: &Ctx<H>) {
    let day = 24 * HOUR;
    let audit = backstop_core::Audit::new("op", "why");
    let old = ctx.enqueue("E", "old").await;
    ctx.store.cancel(old, &audit).await.unwrap();
    ctx.store
        .register_event_types(&["GONE".to_owned()])
        .await
        .unwrap();
    let (h, db, s) = (&ctx.harness, &ctx.db, &ctx.store);
    let r = h
        .idempotent_business_row(db, s, "c", "m-old", "row-old", false)
        .await;
    assert_eq!(r.unwrap(), Processed::Done(()));
    h.backdate_rows(db, "backstop_task_audit", "at", 2 * HOUR)
        .await;
    h.backdate_rows(db, "backstop_task_handlers", "last_seen_at", 3 * day)
        .await;
    h.backdate_rows(db, "backstop_task_inbox", "processed_at", 2 * HOUR)
        .await;
    let young = ctx.enqueue("E", "young").await;
    ctx.store.cancel(young, &audit).await.unwrap();
    let r = h
        .idempotent_business_row(db, s, "c", "m-young", "row-young", false)
        .await;
    assert_eq!(r.unwrap(), Processed::Done(()));

    let engine = Engine::builder(ctx.store.clone())
        .config(
            fast_config()
                .cancelled_retention(None)
                .audit_retention(Some(HOUR))
                .registry_retention(Some(2 * day))
                .purge_interval(Duration::from_millis(50)),
        )
        .handler("E", flaky(Calls::default(), 0), opts())
        .inbox_retention(HOUR)
        .start()
        .unwrap();
    eventually("the old log entry and registry row to go", || async {
        ctx.store.audit_log(old).await.unwrap().is_empty()
            && ctx
                .store
                .event_types()
                .await
                .unwrap()
                .iter()
                .all(|t| t.event_type != "GONE")
    })
    .await;
    // the inbox round comes after those in the same pass: give it one
    tokio::time::sleep(Duration::from_millis(200)).await;
    engine.shutdown().await;
    assert_eq!(ctx.store.audit_log(young).await.unwrap().len(), 1);
    let types: Vec<String> = ctx
        .store
        .event_types()
        .await
        .unwrap()
        .into_iter()
        .map(|t| t.event_type)
        .collect();
    assert_eq!(types, vec!["E".to_owned()]);
    let again = h
        .idempotent_business_row(db, s, "c", "m-old", "row-old-2", false)
        .await;
    assert_eq!(
        again.unwrap(),
        Processed::Done(()),
        "the old inbox row was purged"
    );
    let again = h
        .idempotent_business_row(db, s, "c", "m-young", "row-young-2", false)
        .await;
    assert_eq!(
        again.unwrap(),
        Processed::Duplicate,
        "the young one was kept"
    );
}

/// An event type whose engines are all gone for longer than `HANDLERS_GONE_AFTER` (a
/// day) is reported unhandled, with its waiting tasks, as one no engine ever handled;
/// one registered within the day is not.
pub async fn decommissioned_event_type_is_reported_unhandled<H: Harness>(ctx: &Ctx<H>) {
    let types = ["RETIRED".to_owned(), "LIVE".to_owned()];
    ctx.store.register_event_types(&types).await.unwrap();
    for t in &types {
        ctx.enqueue(t, "k").await;
    }
    let fresh = backstop_core::BacklogGauges::default()
        .refresh(&ctx.store)
        .await
        .unwrap();
    assert!(fresh.is_empty(), "{fresh:?}");
    ctx.harness
        .backdate_rows(&ctx.db, "backstop_task_handlers", "last_seen_at", 25 * HOUR)
        .await;
    ctx.store
        .register_event_types(&["LIVE".to_owned()])
        .await
        .unwrap();
    let gone = backstop_core::BacklogGauges::default()
        .refresh(&ctx.store)
        .await
        .unwrap();
    assert_eq!(gone, vec![("RETIRED".to_owned(), 1)]);
}
