//! The retention job.

use super::*;

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
