//! Prometheus through the console's `/metrics`: an engine on a real SQLite store runs
//! tasks (one fails for good), and the scrape shows every path counted, histograms with
//! explicit buckets (no summaries), no task ids or business keys in labels, help texts,
//! and backlog gauges that drop to 0 when their tasks go. One test: the recorder is
//! global to the process.
#![allow(clippy::expect_used, clippy::unwrap_used)] // test code

use std::time::{Duration, Instant};

use axum::body::Body;
use axum::http::{header, Request, StatusCode};
use backstop_console::{Console, Metrics, TokenAuth};
use backstop_core::{
    handler_fn, Audit, Engine, EngineConfig, HandlerError, HandlerOptions, NewTask, QueueChange,
    RetryPolicy, SagaCommand, SagaDef, SagaStatus, SagaStep, Status, Task, TaskStore,
};
use backstop_sqlite::SqliteStore;
use tower::ServiceExt;

const TOKEN: &str = "metrics-token-0123456789";

async fn scrape(app: &axum::Router) -> String {
    let req = Request::get("/metrics")
        .header(header::AUTHORIZATION, format!("Bearer {TOKEN}"))
        .body(Body::empty())
        .unwrap();
    let resp = app.clone().oneshot(req).await.unwrap();
    assert_eq!(resp.status(), StatusCode::OK);
    let ct = resp.headers()[header::CONTENT_TYPE]
        .to_str()
        .unwrap()
        .to_owned();
    assert!(ct.starts_with("text/plain; version=0.0.4"), "{ct}");
    let bytes = axum::body::to_bytes(resp.into_body(), 1 << 22)
        .await
        .unwrap();
    String::from_utf8(bytes.to_vec()).unwrap()
}

fn value(page: &str, series: &str) -> Option<f64> {
    page.lines()
        .find(|l| l.starts_with(series) && l[series.len()..].starts_with(' '))
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|v| v.parse().ok())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_scrape_counts_every_path_with_explicit_buckets_and_no_ids() {
    let metrics = Metrics::install().unwrap();
    assert!(
        Metrics::install().is_ok(),
        "a second install returns the same recorder"
    );
    let dir = tempfile::tempdir().unwrap();
    let store = SqliteStore::open(dir.path().join("m.db")).await.unwrap();
    store.migrate().await.unwrap();
    let app = Console::new(store.clone())
        .authorizer(TokenAuth::default().read_only(TOKEN).unwrap())
        .metrics(metrics, true)
        .router();

    let engine = Engine::builder(store.clone())
        .config(
            EngineConfig::default()
                .poll_interval(Duration::from_millis(50))
                .first_poll_delay(Duration::ZERO)
                .backlog_gauges(false),
        )
        .handler(
            "MAIL",
            handler_fn(|t: Task| async move {
                if t.biz_key == "secret-key-7" {
                    Err(HandlerError::fail("mailbox gone"))
                } else {
                    Ok(())
                }
            }),
            HandlerOptions::default().retry(RetryPolicy::fixed(1, Duration::from_millis(10))),
        )
        .start()
        .unwrap();
    // three paths: the store's enqueue (run by the poller), the engine's, a transaction
    store
        .enqueue(NewTask::new("MAIL", "secret-key-7"))
        .await
        .unwrap();
    let (e, _) = engine.enqueue(engine.task("MAIL", "k2")).await.unwrap();
    let t = engine.task("MAIL", "k3");
    store.transaction(move |tx| tx.enqueue(&t)).await.unwrap();
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let s = store.stats().await.unwrap();
        if s.count(Status::Succeeded) == 2 && s.count(Status::Failed) == 1 {
            break;
        }
        assert!(Instant::now() < deadline, "tasks did not finish: {s:?}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    engine.shutdown().await;
    assert!(store.get(e.id).await.unwrap().is_some());
    // a task of an event type no engine has a handler for (the engine registered MAIL)
    store
        .enqueue(NewTask::new("MAIL_TYPO", "lost"))
        .await
        .unwrap();
    // a batch: two new tasks counted, its duplicates not
    let batch = [
        NewTask::new("BULK", "b1"),
        NewTask::new("BULK", "b2"),
        NewTask::new("BULK", "b1"),
        NewTask::new("MAIL_TYPO", "lost"),
    ];
    let created: Vec<bool> = store
        .enqueue_many(&batch)
        .await
        .unwrap()
        .iter()
        .map(|e| e.created)
        .collect();
    assert_eq!(created, [true, true, false, false]);
    // a parked saga (the saga gauges come with the backlog's)
    let order = SagaDef::builder("order")
        .step(SagaStep::new("pay"))
        .build()
        .unwrap();
    let saga = store
        .start_saga(&order.start("secret-order-9", &1).unwrap())
        .await
        .unwrap();
    store
        .command_saga(saga.id, SagaCommand::Park, &Audit::new("ops", "checking"))
        .await
        .unwrap();
    // a paused queue, and one paused and resumed
    for (t, changes) in [
        ("HELD", &[QueueChange::Pause][..]),
        ("BACK", &[QueueChange::Pause, QueueChange::Resume][..]),
    ] {
        for c in changes {
            store
                .set_queue(t, *c, &Audit::new("ops", "drill"))
                .await
                .unwrap();
        }
    }

    let page = scrape(&app).await;
    let parked = "backstop_sagas{saga=\"order\",status=\"parked\"}";
    assert_eq!(value(&page, parked), Some(1.0), "{page}");
    let age = "backstop_saga_unchanged_seconds{saga=\"order\",status=\"parked\"}";
    assert!(
        value(&page, age).is_some_and(|s| (0.0..60.0).contains(&s)),
        "{page}"
    );
    assert!(!page.contains("secret-order-9"), "{page}");
    assert_eq!(
        value(&page, "backstop_unhandled_tasks{event_type=\"MAIL_TYPO\"}"),
        Some(1.0),
        "{page}"
    );
    assert_eq!(
        value(&page, "backstop_queue_paused{event_type=\"HELD\"}"),
        Some(1.0),
        "{page}"
    );
    assert_eq!(
        value(&page, "backstop_queue_paused{event_type=\"BACK\"}"),
        Some(0.0),
        "{page}"
    );
    assert_eq!(
        value(&page, "backstop_unhandled_tasks{event_type=\"MAIL\"}"),
        None,
        "{page}"
    );
    assert_eq!(
        value(&page, "backstop_enqueued_total{event_type=\"MAIL\"}"),
        Some(3.0),
        "{page}"
    );
    assert_eq!(
        value(&page, "backstop_enqueued_total{event_type=\"BULK\"}"),
        Some(2.0),
        "{page}"
    );
    assert_eq!(
        value(&page, "backstop_succeeded_total{event_type=\"MAIL\"}"),
        Some(2.0),
        "{page}"
    );
    assert_eq!(
        value(&page, "backstop_failed_total{event_type=\"MAIL\"}"),
        Some(1.0),
        "{page}"
    );
    assert!(
        page.contains("# HELP backstop_enqueued_total Tasks created, by any path"),
        "{page}"
    );
    // histograms: explicit buckets, a +Inf bucket, a count; no summary quantiles
    for h in [
        "backstop_handler_duration_seconds",
        "backstop_start_delay_seconds",
    ] {
        assert!(
            page.contains(&format!("# TYPE {h} histogram")),
            "{h}: {page}"
        );
        assert!(
            page.contains(&format!("{h}_bucket{{event_type=\"MAIL\",le=\"0.005\"}}")),
            "{h}: {page}"
        );
        assert_eq!(
            value(
                &page,
                &format!("{h}_bucket{{event_type=\"MAIL\",le=\"+Inf\"}}")
            ),
            Some(3.0),
            "{h}"
        );
        assert_eq!(
            value(&page, &format!("{h}_count{{event_type=\"MAIL\"}}")),
            Some(3.0),
            "{h}"
        );
    }
    assert!(!page.contains("quantile="), "{page}");
    // labels: event types and statuses only
    assert!(
        !page.contains("secret-key-7") && !page.contains("task_id") && !page.contains("k2"),
        "{page}"
    );
    // backlog gauges from the console (the engine's are off): one failed task, then none
    assert_eq!(
        value(
            &page,
            "backstop_tasks{event_type=\"MAIL\",status=\"failed\"}"
        ),
        Some(1.0),
        "{page}"
    );
    assert_eq!(
        value(&page, "backstop_tasks_total{status=\"failed\"}"),
        Some(1.0),
        "{page}"
    );
    let failed = store
        .list(&backstop_core::TaskFilter::default().status(Status::Failed))
        .await
        .unwrap();
    store
        .reset(failed[0].id, &Audit::new("ops", ""))
        .await
        .unwrap();
    store
        .cancel(failed[0].id, &Audit::new("ops", ""))
        .await
        .unwrap();
    store
        .delete(failed[0].id, &Audit::new("ops", ""))
        .await
        .unwrap();
    let page = scrape(&app).await; // the console refreshes at most every 15 s: unchanged
    assert_eq!(
        value(
            &page,
            "backstop_tasks{event_type=\"MAIL\",status=\"failed\"}"
        ),
        Some(1.0)
    );
    // a recorder that saw the failed count, then its absence, writes 0
    let mut seen = backstop_core::BacklogGauges::default();
    seen.record(&backlog_with_failed(&store).await);
    seen.record(&store.backlog().await.unwrap());
    seen.record_sagas(&store.saga_backlog().await.unwrap());
    store
        .command_saga(
            saga.id,
            SagaCommand::Resolve(SagaStatus::Completed),
            &Audit::new("ops", "done by hand"),
        )
        .await
        .unwrap();
    seen.record_sagas(&store.saga_backlog().await.unwrap());
    let page = scrape(&app).await;
    assert_eq!(value(&page, parked), Some(0.0), "{page}");
    assert_eq!(value(&page, age), Some(0.0), "{page}");
    assert_eq!(
        value(
            &page,
            "backstop_tasks{event_type=\"MAIL\",status=\"failed\"}"
        ),
        Some(0.0),
        "{page}"
    );
    assert_eq!(
        value(&page, "backstop_tasks_total{status=\"failed\"}"),
        Some(0.0),
        "{page}"
    );
}

/// Every metric the alerting rules use is one backstop records (a renamed metric would
/// leave a rule silently matching nothing).
#[test]
fn the_alerting_rules_use_recorded_metrics() {
    let rules = include_str!("../../deploy/prometheus/backstop-alerts.yml");
    let known = backstop_core::metric_names();
    let mut used = 0;
    for (i, _) in rules.match_indices("backstop_") {
        let name: String = rules[i..]
            .chars()
            .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
            .collect();
        let base = name.strip_suffix("_bucket").unwrap_or(&name);
        assert!(
            known.contains(&base),
            "the rules use {name}, which backstop does not record"
        );
        used += 1;
    }
    assert!(used >= 7, "{used}");
}

/// Backlog counts while one MAIL task is failed (made and removed again here).
async fn backlog_with_failed(store: &SqliteStore) -> backstop_core::Stats {
    let id = backstop_testkit::park_failed(store, NewTask::new("MAIL", "again"), "x").await;
    let stats = store.backlog().await.unwrap();
    store.delete(id, &Audit::new("ops", "")).await.unwrap();
    stats
}
