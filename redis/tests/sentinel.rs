//! Redis with Sentinel: the relay, the consumer, its key lock and the notifier reach the
//! master through `redis+sentinel://` and follow a failover; a relay with `replicas`
//! does not let a task succeed before a replica holds its entry, so a master killed
//! with `kill -9` loses nothing the consumers do not get.
//!
//! Each case runs a private deployment on free ports of 127.0.0.1 from the binary
//! `BACKSTOP_TEST_REDIS_SERVER` names (scripts/test sets it): a master, a replica and
//! three Sentinels (quorum 2, down after 1 s), stopped when the case ends.
#![allow(clippy::expect_used, clippy::unwrap_used)] // test code

mod common;
use common::{free_port, required, unique};

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use backstop_core::{
    Engine, EngineConfig, ErrorKind, HandlerOptions, NewTask, Notifier, RetryPolicy, Status,
    TaskFilter, TaskStore,
};
use backstop_redis::redis::{self, Value};
use backstop_redis::{ConsumerOptions, RedisNotifier, RelayOptions, StreamConsumer, StreamRelay};
use backstop_sqlite::{sqlite_handler, SqliteStore};

const PATIENCE: Duration = Duration::from_secs(30);
const MASTER: &str = "backstop";

/// A `redis-server` of the deployment (a data node or a Sentinel), run from its config
/// file so that a restart finds what Sentinel rewrote there.
struct Server {
    port: u16,
    conf: PathBuf,
    sentinel: bool,
    child: Option<Child>,
}

impl Server {
    fn start(&mut self, bin: &str) {
        let mut cmd = Command::new(bin);
        cmd.arg(&self.conf);
        if self.sentinel {
            cmd.arg("--sentinel");
        }
        let child = cmd
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start redis-server");
        self.child = Some(child);
        let deadline = Instant::now() + PATIENCE;
        while std::net::TcpStream::connect(("127.0.0.1", self.port)).is_err() {
            assert!(
                Instant::now() < deadline,
                "redis on {} did not start",
                self.port
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// `kill -9`: no goodbye, no hand-over.
    fn kill(&mut self) {
        if let Some(mut c) = self.child.take() {
            c.kill().unwrap();
            c.wait().unwrap();
        }
    }

    /// SIGSTOP or SIGCONT.
    fn signal(&self, sig: &str) {
        let pid = self.child.as_ref().expect("running").id().to_string();
        let ok = Command::new("kill").args([sig, &pid]).status().unwrap();
        assert!(ok.success(), "kill {sig} {pid}");
    }

    fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        if let Some(c) = self.child.as_mut() {
            let _ = Command::new("kill")
                .args(["-CONT", &c.id().to_string()])
                .status();
        }
        self.kill();
    }
}

/// A master, a replica and three Sentinels watching the master as [`MASTER`].
struct Deployment {
    bin: String,
    nodes: Vec<Server>,
    sentinels: Vec<Server>,
    _dir: tempfile::TempDir,
}

impl Deployment {
    /// Started and settled: every Sentinel knows the replica and the other two.
    async fn start(case: &str) -> Option<Self> {
        let bin = std::env::var("BACKSTOP_TEST_REDIS_SERVER").unwrap_or_default();
        if bin.is_empty() {
            assert!(
                !required("redis"),
                "redis is required but BACKSTOP_TEST_REDIS_SERVER is not set"
            );
            eprintln!(
                "SKIPPED {case}: BACKSTOP_TEST_REDIS_SERVER is not set (scripts/test sets it)"
            );
            return None;
        }
        let dir = tempfile::tempdir().unwrap();
        let master = free_port();
        let mut nodes = Vec::new();
        for i in 0..2 {
            let port = if i == 0 { master } else { free_port() };
            let data = dir.path().join(format!("node{i}"));
            std::fs::create_dir_all(&data).unwrap();
            let mut text = format!(
                "port {port}\nbind 127.0.0.1\ndir {}\nsave \"\"\nappendonly no\n\
                 repl-diskless-sync-delay 0\n",
                data.display()
            );
            if i > 0 {
                text.push_str(&format!("replicaof 127.0.0.1 {master}\n"));
            }
            let conf = data.join("redis.conf");
            std::fs::write(&conf, text).unwrap();
            nodes.push(Server {
                port,
                conf,
                sentinel: false,
                child: None,
            });
        }
        let mut sentinels = Vec::new();
        for i in 0..3 {
            let port = free_port();
            let data = dir.path().join(format!("sentinel{i}"));
            std::fs::create_dir_all(&data).unwrap();
            let text = format!(
                "port {port}\nbind 127.0.0.1\ndir {}\n\
                 sentinel monitor {MASTER} 127.0.0.1 {master} 2\n\
                 sentinel down-after-milliseconds {MASTER} 1000\n\
                 sentinel failover-timeout {MASTER} 5000\n\
                 sentinel parallel-syncs {MASTER} 1\n",
                data.display()
            );
            let conf = data.join("sentinel.conf");
            std::fs::write(&conf, text).unwrap();
            sentinels.push(Server {
                port,
                conf,
                sentinel: true,
                child: None,
            });
        }
        let mut d = Deployment {
            bin,
            nodes,
            sentinels,
            _dir: dir,
        };
        for s in d.nodes.iter_mut().chain(d.sentinels.iter_mut()) {
            s.start(&d.bin);
        }
        d.settle(master).await;
        Some(d)
    }

    /// Wait until every Sentinel names `master`, knows one replica in sync and the
    /// other two Sentinels.
    async fn settle(&self, master: u16) {
        let deadline = Instant::now() + PATIENCE;
        'wait: loop {
            assert!(Instant::now() < deadline, "the Sentinels did not settle");
            tokio::time::sleep(Duration::from_millis(100)).await;
            for s in &self.sentinels {
                let mut c = conn(&s.url()).await;
                let named = ask_master(&mut c).await;
                let replicas = count(&mut c, "REPLICAS").await;
                let others = count(&mut c, "SENTINELS").await;
                if named != Some(master) || replicas != 1 || others != 2 {
                    continue 'wait;
                }
            }
            let replica = self.nodes.iter().find(|n| n.port != master).unwrap();
            let mut c = conn(&replica.url()).await;
            let info: String = redis::cmd("INFO")
                .arg("replication")
                .query_async(&mut c)
                .await
                .unwrap();
            if info.contains("master_link_status:up") {
                return;
            }
        }
    }

    fn url(&self) -> String {
        let hosts: Vec<String> = self
            .sentinels
            .iter()
            .map(|s| format!("127.0.0.1:{}", s.port))
            .collect();
        format!("redis+sentinel://{}/{MASTER}", hosts.join(","))
    }

    /// The master's port as the first Sentinel names it.
    async fn master(&self) -> u16 {
        ask_master(&mut conn(&self.sentinels[0].url()).await)
            .await
            .expect("a master")
    }

    /// Start the killed node `port` again as the replica of `master`, as a deployment's
    /// tooling would (Sentinel itself turns a returning old master into a replica, ten
    /// seconds or so after it answers).
    fn restart_as_replica(&mut self, port: u16, master: u16) {
        let bin = self.bin.clone();
        let node = self.node(port);
        let mut text = std::fs::read_to_string(&node.conf).unwrap();
        text.push_str(&format!("replicaof 127.0.0.1 {master}\n"));
        std::fs::write(&node.conf, text).unwrap();
        node.start(&bin);
    }

    fn node(&mut self, port: u16) -> &mut Server {
        self.nodes.iter_mut().find(|n| n.port == port).unwrap()
    }
}

async fn conn(url: &str) -> redis::aio::MultiplexedConnection {
    common::conn(url).await
}

async fn ask_master(c: &mut redis::aio::MultiplexedConnection) -> Option<u16> {
    let v: Option<(String, String)> = redis::cmd("SENTINEL")
        .arg("get-master-addr-by-name")
        .arg(MASTER)
        .query_async(c)
        .await
        .ok()?;
    v.and_then(|(_, port)| port.parse().ok())
}

async fn count(c: &mut redis::aio::MultiplexedConnection, what: &str) -> usize {
    let v: Value = redis::cmd("SENTINEL")
        .arg(what)
        .arg(MASTER)
        .query_async(c)
        .await
        .unwrap_or(Value::Nil);
    match v {
        Value::Array(items) => items.len(),
        _ => 0,
    }
}

async fn xlen(url: &str, stream: &str) -> i64 {
    redis::cmd("XLEN")
        .arg(stream)
        .query_async(&mut conn(url).await)
        .await
        .unwrap()
}

fn uerr(e: impl std::fmt::Display) -> backstop_core::Error {
    backstop_core::Error::new(ErrorKind::Unexpected, "test", e.to_string())
}

/// A SQLite store with the business table `effects` (one row per message id).
async fn store() -> (tempfile::TempDir, SqliteStore) {
    let dir = tempfile::tempdir().unwrap();
    let store = SqliteStore::open(dir.path().join("sentinel.db"))
        .await
        .unwrap();
    store.migrate().await.unwrap();
    store
        .transaction(|tx| {
            tx.execute_batch("CREATE TABLE effects (msg_id TEXT PRIMARY KEY)")
                .map_err(uerr)
        })
        .await
        .unwrap();
    (dir, store)
}

/// `n` tasks, as the relay's handler would get them.
async fn tasks(store: &SqliteStore, n: usize) -> Vec<backstop_core::Task> {
    let mut out = Vec::new();
    for i in 0..n {
        let e = store
            .enqueue(NewTask::new("ORDER_PLACED", format!("o{i}")))
            .await
            .unwrap();
        out.push(store.get(e.id).await.unwrap().unwrap());
    }
    out
}

/// Through the Sentinels the relay writes to the master; with `replicas(1, …)` an entry
/// the replica did not acknowledge (stopped with SIGSTOP) fails its attempt as
/// temporary, and succeeds once the replica runs again. A relay without it answers as
/// soon as the master does.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_relay_with_replicas_waits_for_one_to_hold_the_entry() {
    let Some(mut d) = Deployment::start("sentinel_relay_replicas").await else {
        return;
    };
    let stream = unique("sentinel-wait");
    let url = d.url();
    let waiting = StreamRelay::open(
        &url,
        RelayOptions::new(&stream).replicas(1, Duration::from_millis(300)),
    )
    .unwrap();
    let plain = StreamRelay::open(&url, RelayOptions::new(&stream)).unwrap();
    let (_dir, store) = store().await;
    let t = tasks(&store, 3).await;
    waiting.publish(&t[0]).await.unwrap();
    let master = d.master().await;
    let replica = d.nodes.iter().find(|n| n.port != master).unwrap().port;
    assert_eq!(
        xlen(&d.node(replica).url(), &stream).await,
        1,
        "WAIT answered: the replica has it"
    );

    d.node(replica).signal("-STOP");
    let e = waiting
        .publish(&t[1])
        .await
        .expect_err("no replica acknowledged");
    assert_eq!(e.kind(), ErrorKind::Unavailable, "{e}");
    assert!(e.is_temporary(), "{e}");
    assert!(e.to_string().contains("reached 0 of 1 replicas"), "{e}");
    plain
        .publish(&t[2])
        .await
        .expect("the master's answer is enough");
    d.node(replica).signal("-CONT");
    waiting
        .publish(&t[1])
        .await
        .expect("the replica acknowledges again");
    // the failed attempt's entry stays (the master took it): its retry adds a copy with
    // the same message id, which a consumer's inbox drops
    assert_eq!(xlen(&d.node(master).url(), &stream).await, 4);

    // validated at open: nothing is written
    for (n, wait) in [(0, 100), (17, 100), (1, 0), (1, 4001)] {
        let e = StreamRelay::open(
            &url,
            RelayOptions::new(&stream).replicas(n, Duration::from_millis(wait)),
        )
        .expect_err("refused");
        assert_eq!(e.kind(), ErrorKind::Config, "{e}");
    }
    let e = StreamRelay::open("redis+sentinel://127.0.0.1:1", RelayOptions::new(&stream))
        .expect_err("no master name");
    assert_eq!(e.kind(), ErrorKind::Config, "{e}");
}

/// An engine relays 300 tasks (replicas 1) through the Sentinels while a consumer with
/// a key lock applies them through the SQLite inbox; the master is killed with `kill -9`
/// a third of the way in. The Sentinels promote the replica, every client follows it,
/// the old master comes back as a replica, and every message is applied exactly once
/// (the effect table's key refuses a second), none lost. A notifier opened before the
/// failover announces through the new master after it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_master_killed_under_the_relay_and_consumer_loses_no_message() {
    const TASKS: i64 = 300;
    let Some(mut d) = Deployment::start("sentinel_failover").await else {
        return;
    };
    let url = d.url();
    let stream = unique("sentinel-failover");
    let (_dir, store) = store().await;
    let effect = sqlite_handler(|tx, m| {
        tx.execute("INSERT INTO effects (msg_id) VALUES (?1)", [&m.id])?;
        Ok(())
    });
    let options = ConsumerOptions::new(&stream, "pay")
        .block(Duration::from_millis(200))
        .handler_timeout(Duration::from_millis(500))
        .reclaim_idle(Duration::from_millis(1000))
        .reclaim_interval(Duration::from_millis(100))
        .key_lock(Some(Duration::from_secs(2)))
        .max_deliveries(50);
    let consumer = StreamConsumer::start(&url, store.clone(), effect, options).unwrap();
    let relay = StreamRelay::open(
        &url,
        RelayOptions::new(&stream).replicas(1, Duration::from_millis(500)),
    )
    .unwrap();
    let engine = Engine::builder(store.clone())
        .config(
            EngineConfig::default()
                .poll_interval(Duration::from_millis(200))
                .first_poll_delay(Duration::from_millis(200))
                .retention(None),
        )
        .handler(
            "ORDER_PLACED",
            relay,
            HandlerOptions::default().concurrency(8),
        )
        .start()
        .unwrap();
    let notifier = RedisNotifier::open(&url, unique("sentinel-wakes")).unwrap();
    notifier.notify("ORDER_PLACED").await.unwrap();
    let old = d.master().await;
    for i in 0..TASKS {
        let task = engine
            .task("ORDER_PLACED", format!("o{i}"))
            .retry(RetryPolicy::fixed(100, Duration::from_millis(200)));
        engine.enqueue(task).await.unwrap();
        if i == TASKS / 3 {
            d.node(old).kill();
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    // the Sentinels promote the replica; the old master comes back as its replica
    let deadline = Instant::now() + PATIENCE;
    while d.master().await == old {
        assert!(Instant::now() < deadline, "no failover");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // until a replica attaches to the new master, every relay attempt fails (no
    // replica acknowledges) and is retried
    let new = d.master().await;
    d.restart_as_replica(old, new);
    let deadline = Instant::now() + PATIENCE;
    loop {
        let effects: i64 = store
            .transaction(|tx| {
                tx.query_row("SELECT COUNT(*) FROM effects", [], |r| r.get(0))
                    .map_err(uerr)
            })
            .await
            .unwrap();
        let done = store
            .list(&TaskFilter::default().status(Status::Succeeded).limit(1000))
            .await
            .unwrap()
            .len() as i64;
        if effects == TASKS && done == TASKS {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "{effects} of {TASKS} effects, {done} relayed, {:?}",
            consumer.counters()
        );
        tokio::time::sleep(Duration::from_millis(1000)).await;
    }
    // the notifier's connection went with the old master: its first announcement
    // may fail (and drops it), the next goes to the new master
    let _ = notifier.notify("ORDER_PLACED").await;
    notifier.notify("ORDER_PLACED").await.unwrap();
    engine.shutdown().await;
    consumer.shutdown().await;
}
