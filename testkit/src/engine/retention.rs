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
        let l = ctx.grab(id).await.lease();
        assert!(backstop_core::TaskStoreExt::mark_success(&ctx.store, l)
            .await
            .unwrap());
        ctx.backdate(id, TimeColumn::UpdatedAt, 2 * HOUR).await;
        old.push(id);
    }
    let fresh = ctx.enqueue("E", "fresh").await;
    let l = ctx.grab(fresh).await.lease();
    backstop_core::TaskStoreExt::mark_success(&ctx.store, l)
        .await
        .unwrap();
    let failed = ctx.enqueue("E", "failed").await;
    let l = ctx.grab(failed).await.lease();
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
