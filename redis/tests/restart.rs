//! Wake-ups survive a Redis restart: an announcement made while Redis is down is lost,
//! and the listener's reconnect poll finds the task; announcements work again after it.
//!
//! Runs a private `redis-server` (the binary named by `BACKSTOP_TEST_REDIS_SERVER`,
//! which scripts/test sets) on a port of its own, so restarting it disturbs no other
//! test. Engines run on one SQLite file through two stores (two "processes").
#![allow(clippy::expect_used, clippy::unwrap_used)] // test code

mod common;
use common::{free_port, required};

use std::net::TcpStream;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use backstop_core::{
    handler_fn, Engine, EngineConfig, HandlerError, HandlerOptions, RunAhead, Status, Task,
    TaskStore,
};
use backstop_redis::RedisNotifier;
use backstop_sqlite::SqliteStore;

const PATIENCE: Duration = Duration::from_secs(20);

struct Redis {
    bin: String,
    port: u16,
    dir: tempfile::TempDir,
    child: Option<Child>,
}

impl Redis {
    fn start(&mut self) {
        let child = Command::new(&self.bin)
            .args(["--port", &self.port.to_string(), "--bind", "127.0.0.1"])
            .args(["--save", "", "--appendonly", "no", "--dir"])
            .arg(self.dir.path())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start redis-server");
        self.child = Some(child);
        let deadline = Instant::now() + PATIENCE;
        while TcpStream::connect(("127.0.0.1", self.port)).is_err() {
            assert!(Instant::now() < deadline, "redis-server did not start");
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// `kill -9`: no goodbye to the clients.
    fn kill(&mut self) {
        if let Some(mut c) = self.child.take() {
            c.kill().unwrap();
            c.wait().unwrap();
        }
    }

    fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }
}

impl Drop for Redis {
    fn drop(&mut self) {
        self.kill();
    }
}

fn idle() -> EngineConfig {
    EngineConfig::default()
        .first_poll_delay(Duration::from_secs(3600))
        .poll_interval(Duration::from_secs(3600))
        .retention(None)
}

async fn until<F: FnMut() -> bool>(what: &str, mut f: F) {
    let deadline = Instant::now() + PATIENCE;
    while !f() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wake_up_lost_to_a_redis_restart_is_recovered_by_the_reconnect_poll() {
    let bin = std::env::var("BACKSTOP_TEST_REDIS_SERVER").unwrap_or_default();
    if bin.is_empty() {
        assert!(
            !required("redis"),
            "redis is required but BACKSTOP_TEST_REDIS_SERVER is not set"
        );
        eprintln!("SKIPPED: BACKSTOP_TEST_REDIS_SERVER is not set (scripts/test sets it)");
        return;
    }
    let mut redis = Redis {
        bin,
        port: free_port(),
        dir: tempfile::tempdir().unwrap(),
        child: None,
    };
    redis.start();

    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("tasks.db");
    let store_a = SqliteStore::open(&path).await.unwrap();
    store_a.migrate().await.unwrap();
    let store_b = SqliteStore::open(&path).await.unwrap();

    let ran = Arc::new(Mutex::new(Vec::<String>::new()));
    let sink = Arc::clone(&ran);
    let a = Engine::builder(store_a)
        .config(idle())
        .handler(
            "A_ONLY",
            handler_fn(|_t: Task| async { Ok::<_, HandlerError>(()) }),
            HandlerOptions::default(),
        )
        .notifier(RedisNotifier::open(&redis.url(), "restart").unwrap())
        .start()
        .unwrap();
    let b = Engine::builder(store_b)
        .config(idle())
        .handler(
            "WOKEN",
            handler_fn(move |t: Task| {
                let sink = Arc::clone(&sink);
                async move {
                    sink.lock().unwrap().push(t.biz_key.clone());
                    Ok::<_, HandlerError>(())
                }
            }),
            HandlerOptions::default(),
        )
        .notifier(RedisNotifier::open(&redis.url(), "restart").unwrap())
        .start()
        .unwrap();
    let has = |key: &str| ran.lock().unwrap().iter().any(|k| k == key);

    // B is listening once a probe wakes it
    let deadline = Instant::now() + PATIENCE;
    'probing: for i in 0.. {
        let key = format!("probe-{i}");
        a.enqueue(a.task("WOKEN", &key)).await.unwrap();
        for _ in 0..20 {
            if has(&key) {
                break 'probing;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        assert!(Instant::now() < deadline, "B never woke");
    }

    redis.kill();
    let before = a.counters();
    let (lost, run) = a.enqueue(a.task("WOKEN", "lost")).await.unwrap();
    assert_eq!(
        run,
        RunAhead::NoHandler,
        "a failed announcement fails nothing"
    );
    assert!(lost.created);
    let after = a.counters();
    assert_eq!(after.notified, before.notified, "the announcement failed");
    assert!(after.notifier_errors > before.notifier_errors);
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(!has("lost"));
    let t = b.store().get(lost.id).await.unwrap().unwrap();
    assert_eq!((t.status, t.attempts), (Status::Pending, 0));

    redis.start();
    until("B's reconnect poll to run the lost task", || has("lost")).await;
    until("its success mark", || {
        futures_block(b.store().get(lost.id)).is_some_and(|t| t.status == Status::Succeeded)
    })
    .await;
    assert!(b.counters().notifier_errors >= 1, "B saw its connection go");

    // announcements work again: the publisher reconnected
    let t0 = Instant::now();
    a.enqueue(a.task("WOKEN", "after")).await.unwrap();
    until("B to be woken for a new task", || has("after")).await;
    assert!(t0.elapsed() < Duration::from_secs(2), "{:?}", t0.elapsed());
    a.shutdown().await;
    b.shutdown().await;
}

/// Read a task from a synchronous condition (the store answers from another thread).
fn futures_block<F: std::future::Future<Output = backstop_core::Result<Option<Task>>>>(
    f: F,
) -> Option<Task> {
    tokio::task::block_in_place(|| tokio::runtime::Handle::current().block_on(f)).unwrap()
}
