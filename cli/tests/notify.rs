//! An operator's cancel from the command line reaches a running handler in another
//! process's engine at once, through the engines' notifier: PostgreSQL's `NOTIFY` with
//! nothing to configure, Redis pub/sub named by `--notify-redis` / `--notify-channel` on
//! MySQL and SQLite. The engine's heartbeat is an hour away, so only the announcement can
//! tell the handler within the case.
#![allow(clippy::expect_used, clippy::unwrap_used)] // test code

mod common;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use backstop::{
    handler_fn, Cancelled, Context, Engine, EngineConfig, HandlerError, HandlerOptions, NewTask,
    Notifier, Status, StoreConfig, Task, TaskStore,
};
use common::*;

const HOUR: Duration = Duration::from_secs(3600);
const PATIENCE: Duration = Duration::from_secs(20);

/// The notifier engines on `db` listen to, and the CLI's arguments to announce to it:
/// PostgreSQL's own, or a Redis channel of this test's. `None` (printed) without Redis
/// when it is not required.
fn notifier(db: &Db) -> Option<(Arc<dyn Notifier>, Vec<String>)> {
    if let Some(native) = db.store.native_notifier().unwrap() {
        return Some((native, Vec::new()));
    }
    let redis = match backstop_testkit::server_url("BACKSTOP_TEST_REDIS_URL") {
        Ok(url) => url,
        Err(why) => {
            assert!(!backstop_testkit::required("redis"), "redis: {}", why.0);
            eprintln!(
                "SKIPPED a_cancel_from_the_cli_reaches_a_running_handler: {}",
                why.0
            );
            return None;
        }
    };
    let channel = format!("backstop-cli-test:{}", db.table);
    let n = backstop::redis::RedisNotifier::open(&redis, channel.clone()).unwrap();
    let args = vec![
        "--notify-redis".to_owned(),
        redis,
        "--notify-channel".to_owned(),
        channel,
    ];
    Some((Arc::new(n), args))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancel_from_the_cli_reaches_a_running_handler() {
    for db in databases("a_cancel_from_the_cli_reaches_a_running_handler").await {
        let Some((notifier, notify_args)) = notifier(&db) else {
            continue;
        };
        let told: Arc<Mutex<HashMap<String, Cancelled>>> = Arc::default();
        let started: Arc<Mutex<Vec<String>>> = Arc::default();
        let long = {
            let (told, started) = (Arc::clone(&told), Arc::clone(&started));
            handler_fn(move |task: Task| {
                let (told, started) = (Arc::clone(&told), Arc::clone(&started));
                async move {
                    let cx = Context::current().unwrap();
                    started.lock().unwrap().push(task.biz_key.clone());
                    let why = cx.cancelled().await;
                    told.lock().unwrap().insert(task.biz_key.clone(), why);
                    Err(HandlerError::retry(format!("stopped: {why}")))
                }
            })
        };
        let probes: Arc<Mutex<Vec<String>>> = Arc::default();
        let probe = {
            let probes = Arc::clone(&probes);
            handler_fn(move |task: Task| {
                let probes = Arc::clone(&probes);
                async move {
                    probes.lock().unwrap().push(task.biz_key);
                    Ok(())
                }
            })
        };
        // the engine of another process: no poll, no heartbeat within the test
        let engine = Engine::builder(db.store.clone())
            .config(
                EngineConfig::default()
                    .first_poll_delay(HOUR)
                    .poll_interval(HOUR)
                    .dead_after(4 * HOUR)
                    .heartbeat_interval(HOUR),
            )
            .handler("LONG", long, HandlerOptions::default())
            .handler("PROBE", probe, HandlerOptions::default())
            .notifier(Arc::clone(&notifier))
            .start()
            .unwrap();
        // subscribed once a probe announced from elsewhere runs
        let elsewhere = backstop::connect_with(
            &db.url,
            StoreConfig::default()
                .table(db.table.clone())
                .notifier(notifier),
        )
        .await
        .unwrap();
        let deadline = Instant::now() + PATIENCE;
        'heard: for i in 0.. {
            let key = format!("probe-{i}");
            elsewhere
                .enqueue(NewTask::new("PROBE", &key))
                .await
                .unwrap();
            for _ in 0..40 {
                if probes.lock().unwrap().contains(&key) {
                    break 'heard;
                }
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
            assert!(Instant::now() < deadline, "the engine never heard a probe");
        }
        let (e, _) = engine.enqueue(NewTask::new("LONG", "job")).await.unwrap();
        let until = Instant::now() + PATIENCE;
        while !started.lock().unwrap().contains(&"job".to_owned()) {
            assert!(Instant::now() < until, "the task never started");
            tokio::time::sleep(Duration::from_millis(5)).await;
        }

        let t0 = Instant::now();
        let mut args: Vec<&str> = notify_args.iter().map(String::as_str).collect();
        let id = e.id.to_string();
        args.extend(["tasks", "cancel", &id, "--yes", "--reason", "stop it"]);
        let out = db.cli(&args);
        assert_eq!(code(&out), 0, "{}", stderr(&out));
        while !told.lock().unwrap().contains_key("job") {
            // the process and a round trip or two; the heartbeat is an hour away
            assert!(
                t0.elapsed() < Duration::from_secs(10),
                "{}: the handler never heard of the cancel",
                db.url
            );
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        assert_eq!(told.lock().unwrap()["job"], Cancelled::LeaseLost);
        engine.shutdown().await;
        let t = db.store.get(e.id).await.unwrap().unwrap();
        assert_eq!((t.status, t.attempts), (Status::Cancelled, 1));
    }
}
