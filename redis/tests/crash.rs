//! Real crashes: the consumer's and the relay's processes are killed with `kill -9` at
//! the worst moments, and every message's business effect still happens exactly once.
//!
//! The parent test runs this test binary again as a child (`child_process`, which does
//! nothing unless `BACKSTOP_CRASH_ROLE` is set). The child prints `AT <point>` when it
//! reaches the moment to die and waits; the parent kills it with SIGKILL there.
#![allow(clippy::expect_used, clippy::unwrap_used)] // test code

mod common;
use common::{conn, redis_url, unique};

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use backstop_core::{
    async_trait, Engine, EngineConfig, Handler, HandlerError, HandlerOptions, Inbox, Message,
    NewTask, Processed, Status, Task, TaskStore,
};
use backstop_redis::redis::{self, Value};
use backstop_redis::{ConsumerOptions, RelayOptions, StreamConsumer, StreamRelay};
use backstop_sqlite::{sqlite_handler, SqliteHandler, SqliteStore};

const PATIENCE: Duration = Duration::from_secs(30);

/// Announce the point reached, then wait to be killed.
fn die_here(point: &str) -> ! {
    println!("AT {point}");
    use std::io::Write;
    let _ = std::io::stdout().flush();
    loop {
        std::thread::sleep(Duration::from_secs(60));
    }
}

fn uerr(e: impl std::fmt::Display) -> backstop_core::Error {
    backstop_core::Error::new(backstop_core::ErrorKind::Unexpected, "test", e.to_string())
}

/// The business effect: one row per message id (a second would violate the key).
fn effect(kill_before_commit: Option<String>) -> SqliteHandler {
    sqlite_handler(move |tx, m| {
        tx.execute("INSERT INTO effects (msg_id) VALUES (?1)", [&m.id])?;
        if kill_before_commit.as_deref() == Some(m.id.as_str()) {
            die_here(&format!("before-commit {}", m.id));
        }
        Ok(())
    })
}

/// The store's inbox, dying right after a chosen message's commit (before the XACK).
#[derive(Clone)]
struct DyingInbox {
    store: SqliteStore,
    after_commit: Option<String>,
}

#[async_trait]
impl Inbox for DyingInbox {
    type Handler = SqliteHandler;
    async fn process(
        &self,
        consumer: &str,
        message: &Message,
        handler: &SqliteHandler,
    ) -> Result<Processed<()>, HandlerError> {
        let done = self.store.process(consumer, message, handler).await?;
        if self.after_commit.as_deref() == Some(message.id.as_str()) {
            die_here(&format!("after-commit {}", message.id));
        }
        Ok(done)
    }
    async fn purge_inbox(&self, older_than: Duration, limit: usize) -> backstop_core::Result<u64> {
        self.store.purge_inbox(older_than, limit).await
    }
}

/// The relay, dying right after a chosen task's XADD (before its success mark).
struct DyingRelay {
    relay: StreamRelay,
    after_xadd: Option<String>,
}

#[async_trait]
impl Handler for DyingRelay {
    async fn handle(&self, task: &Task) -> Result<(), HandlerError> {
        self.relay.handle(task).await?;
        if self.after_xadd.as_deref() == Some(task.biz_key.as_str()) {
            die_here(&format!("after-xadd {}", task.biz_key));
        }
        Ok(())
    }
}

fn consumer_options(stream: &str) -> ConsumerOptions {
    ConsumerOptions::new(stream, "pay")
        .block(Duration::from_millis(200))
        .handler_timeout(Duration::from_millis(500))
        .reclaim_idle(Duration::from_millis(1000))
        .reclaim_interval(Duration::from_millis(100))
        .max_deliveries(10)
}

fn fast_engine() -> EngineConfig {
    EngineConfig::default()
        .poll_interval(Duration::from_millis(100))
        .first_poll_delay(Duration::from_millis(100))
        .dead_after(Duration::from_secs(2))
        .heartbeat_interval(Duration::from_millis(500))
        .retention(None)
}

/// The child's entry point: nothing unless `BACKSTOP_CRASH_ROLE` is set.
#[test]
fn child_process() {
    let Ok(role) = std::env::var("BACKSTOP_CRASH_ROLE") else {
        return;
    };
    let var = |k: &str| std::env::var(k).unwrap_or_default();
    let some = |k: &str| Some(var(k)).filter(|v| !v.is_empty());
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        let store = SqliteStore::open(var("CRASH_DB")).await.unwrap();
        match role.as_str() {
            "consumer" => {
                let inbox = DyingInbox {
                    store,
                    after_commit: some("KILL_AFTER_COMMIT"),
                };
                let _c = StreamConsumer::start(
                    &var("CRASH_REDIS"),
                    inbox,
                    effect(some("KILL_BEFORE_COMMIT")),
                    consumer_options(&var("CRASH_STREAM")),
                )
                .unwrap();
                tokio::time::sleep(PATIENCE).await;
            }
            "relay" => {
                let relay = DyingRelay {
                    relay: StreamRelay::open(
                        &var("CRASH_REDIS"),
                        RelayOptions::new(var("CRASH_STREAM")),
                    )
                    .unwrap(),
                    after_xadd: some("KILL_AFTER_XADD"),
                };
                let _e = Engine::builder(store)
                    .config(fast_engine())
                    .handler(
                        "ORDER_PLACED",
                        relay,
                        HandlerOptions::default().concurrency(1),
                    )
                    .start()
                    .unwrap();
                tokio::time::sleep(PATIENCE).await;
            }
            other => panic!("unknown role {other}"),
        }
        panic!("the child was not killed in time");
    });
}

/// Run the child with `env` until it prints `AT <point>`, then `kill -9` it.
fn run_child_until_killed(env: &[(&str, &str)], point: &str) {
    let mut cmd = Command::new(std::env::current_exe().unwrap());
    cmd.args([
        "--exact",
        "child_process",
        "--nocapture",
        "--test-threads=1",
    ])
    .stdout(Stdio::piped())
    .stderr(Stdio::null());
    for (k, v) in env {
        cmd.env(k, v);
    }
    let mut child: Child = cmd.spawn().unwrap();
    let stdout = child.stdout.take().unwrap();
    let want = format!("AT {point}");
    let deadline = Instant::now() + PATIENCE;
    for line in BufReader::new(stdout).lines() {
        let line = line.unwrap();
        if line.trim_end().ends_with(&want) {
            child.kill().unwrap(); // SIGKILL
            let status = child.wait().unwrap();
            assert!(!status.success(), "killed");
            return;
        }
        assert!(Instant::now() < deadline, "the child never reached {point}");
    }
    let status = child.wait().unwrap();
    panic!("the child ended ({status}) before reaching {point}");
}

async fn setup() -> (tempfile::TempDir, String, SqliteStore) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("crash.db").display().to_string();
    let store = SqliteStore::open(&path).await.unwrap();
    store.migrate().await.unwrap();
    store
        .transaction(|tx| {
            tx.execute_batch("CREATE TABLE effects (msg_id TEXT PRIMARY KEY)")
                .map_err(uerr)
        })
        .await
        .unwrap();
    (dir, path, store)
}

async fn count(store: &SqliteStore, sql: &'static str) -> i64 {
    store
        .transaction(move |tx| tx.query_row(sql, [], |r| r.get(0)).map_err(uerr))
        .await
        .unwrap()
}

async fn pending(c: &mut redis::aio::MultiplexedConnection, stream: &str) -> i64 {
    let v: Value = redis::cmd("XPENDING")
        .arg(stream)
        .arg("pay")
        .query_async(c)
        .await
        .unwrap();
    match v {
        Value::Array(p) => match p.first() {
            Some(Value::Int(n)) => *n,
            _ => 0,
        },
        _ => 0,
    }
}

/// Drain the stream with a consumer in this process until nothing is pending and every
/// message has its effect.
async fn drain(url: &str, stream: &str, store: &SqliteStore, messages: i64) -> StreamConsumer {
    let consumer =
        StreamConsumer::start(url, store.clone(), effect(None), consumer_options(stream)).unwrap();
    let mut c = conn(url).await;
    let deadline = Instant::now() + PATIENCE;
    loop {
        let effects = count(store, "SELECT COUNT(*) FROM effects").await;
        if effects == messages && pending(&mut c, stream).await == 0 {
            return consumer;
        }
        assert!(
            Instant::now() < deadline,
            "not drained: {effects} effects, {} pending, {:?}",
            pending(&mut c, stream).await,
            consumer.counters()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// consumer killed after its business commit (before XACK) and before its commit (after
/// the business write): every message's effect exactly once, nothing left pending,
/// nothing dead-lettered.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_consumer_killed_around_its_commit_applies_every_effect_once() {
    let Some(url) = redis_url("a_consumer_killed_around_its_commit_applies_every_effect_once")
    else {
        return;
    };
    let (_dir, path, store) = setup().await;
    let stream = unique("crash-consumer");
    let mut c = conn(&url).await;
    for i in 0..20 {
        let _: String = redis::cmd("XADD")
            .arg(&stream)
            .arg("*")
            .arg("msg_id")
            .arg(format!("m{i}"))
            .arg("event_type")
            .arg("ORDER_PLACED")
            .arg("biz_key")
            .arg(format!("o{i}"))
            .arg("payload")
            .arg("{}")
            .query_async(&mut c)
            .await
            .unwrap();
    }
    let base = [
        ("BACKSTOP_CRASH_ROLE", "consumer"),
        ("CRASH_DB", path.as_str()),
        ("CRASH_REDIS", url.as_str()),
        ("CRASH_STREAM", stream.as_str()),
    ];
    let mut env = base.to_vec();
    env.push(("KILL_AFTER_COMMIT", "m3"));
    run_child_until_killed(&env, "after-commit m3");
    // m3's effect committed, its XACK never happened
    assert_eq!(
        count(&store, "SELECT COUNT(*) FROM effects WHERE msg_id = 'm3'").await,
        1
    );
    assert!(pending(&mut c, &stream).await >= 1);

    let mut env = base.to_vec();
    env.push(("KILL_BEFORE_COMMIT", "m7"));
    run_child_until_killed(&env, "before-commit m7");
    assert_eq!(
        count(&store, "SELECT COUNT(*) FROM effects WHERE msg_id = 'm7'").await,
        0,
        "the uncommitted write died with the process"
    );

    let consumer = drain(&url, &stream, &store, 20).await;
    let k = consumer.counters();
    assert_eq!(k.dead_lettered, 0, "{k:?}");
    // m3 was redelivered (to the second child or this consumer), found in the inbox and
    // acknowledged: still one effect
    assert_eq!(
        count(&store, "SELECT COUNT(*) FROM effects WHERE msg_id = 'm3'").await,
        1
    );
    assert_eq!(
        count(&store, "SELECT COUNT(*) FROM backstop_task_inbox").await,
        20
    );
    consumer.shutdown().await;
}

/// relay killed between its XADD and the task's success mark: the task is recycled
/// after `dead_after` and relayed again with the same message id; the consumer's inbox
/// applies its effect once; every task ends succeeded.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_relay_killed_between_xadd_and_mark_publishes_again_and_the_inbox_dedupes() {
    let Some(url) =
        redis_url("a_relay_killed_between_xadd_and_mark_publishes_again_and_the_inbox_dedupes")
    else {
        return;
    };
    let (_dir, path, store) = setup().await;
    let stream = unique("crash-relay");
    let mut ids = Vec::new();
    for i in 0..10 {
        let e = store
            .enqueue(NewTask::new("ORDER_PLACED", format!("o{i}")))
            .await
            .unwrap();
        ids.push(e.id);
    }
    let env = [
        ("BACKSTOP_CRASH_ROLE", "relay"),
        ("CRASH_DB", path.as_str()),
        ("CRASH_REDIS", url.as_str()),
        ("CRASH_STREAM", stream.as_str()),
        ("KILL_AFTER_XADD", "o5"),
    ];
    run_child_until_killed(&env, "after-xadd o5");
    let o5 = store.get(ids[5]).await.unwrap().unwrap();
    assert_eq!(o5.status, Status::Running, "killed before its mark");

    // a live instance recycles o5 after dead_after and relays it again
    let relay = StreamRelay::open(&url, RelayOptions::new(&stream)).unwrap();
    let engine = Engine::builder(store.clone())
        .config(fast_engine())
        .handler("ORDER_PLACED", relay, HandlerOptions::default())
        .start()
        .unwrap();
    let deadline = Instant::now() + PATIENCE;
    for id in &ids {
        while store.get(*id).await.unwrap().unwrap().status != Status::Succeeded {
            assert!(Instant::now() < deadline, "task {id} never relayed");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
    engine.shutdown().await;
    let o5 = store.get(ids[5]).await.unwrap().unwrap();
    assert_eq!(o5.attempts, 2, "o5 ran twice: killed once");

    let check = StreamRelay::open(&url, RelayOptions::new(&stream)).unwrap();
    let entries: Vec<(String, Vec<(String, String)>)> = redis::cmd("XRANGE")
        .arg(&stream)
        .arg("-")
        .arg("+")
        .query_async(&mut conn(&url).await)
        .await
        .unwrap();
    let o5_id = check.message_id(&o5);
    let copies = entries
        .iter()
        .filter(|(_, f)| f.iter().any(|(k, v)| k == "msg_id" && *v == o5_id))
        .count();
    assert_eq!(copies, 2, "o5 was published by both attempts");

    // every task is in the stream; those whose mark the kill lost (o5, and any whose
    // mark was still on its way) twice: the inbox removes exactly those duplicates
    for id in &ids {
        let t = store.get(*id).await.unwrap().unwrap();
        let id = check.message_id(&t);
        let n = entries
            .iter()
            .filter(|(_, f)| f.iter().any(|(k, v)| k == "msg_id" && *v == id))
            .count();
        assert!((1..=2).contains(&n), "{t:?} published {n} times");
    }
    let twice = entries.len() as u64 - 10;
    let consumer = drain(&url, &stream, &store, 10).await;
    let k = consumer.counters();
    assert_eq!((k.processed, k.duplicates), (10, twice), "{k:?}");
    consumer.shutdown().await;
}
