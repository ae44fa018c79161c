//! backstop benchmarks: each scenario on every enabled backend, next to the raw SQL for
//! the same work through the same driver, measured in the same run.
//!
//! ```sh
//! scripts/bench                 # starts PostgreSQL and MariaDB, runs everything in release mode
//! scripts/bench --smoke         # tiny sizes: checks that it builds and runs (CI)
//! ```
//!
//! Writes `bench/results/latest.md` and `bench/results/latest.json`.
#![allow(clippy::unwrap_used, clippy::expect_used)] // a benchmark: a failed step is a failed run

mod cross;
mod idle;
mod limit;
mod meter;
mod partitions;
mod peer_report;
mod peers;
mod raw;
mod saga;
mod sys;

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use backstop::mysql::{MySqlOptions, MySqlStore};
use backstop::postgres::{PgOptions, PgStore};
use backstop::sqlite::{SqliteOptions, SqliteStore, Synchronous};
use backstop::{
    handler_fn, AnyStore, Claimed, Engine, EngineConfig, Enqueued, HandlerError, HandlerOptions,
    NewTask, Owner, Status, StoreConfig, Task, TaskStore,
};
use hdrhistogram::Histogram;
use raw::{histogram, record, Raw, Shape, EVENT, ORDERS, TABLE};
use sys::Row;

#[derive(Debug, Clone)]
struct Args {
    smoke: bool,
    backends: Vec<String>,
    drain_tasks: usize,
    out: std::path::PathBuf,
    /// Run only these scenarios (run-ahead, enqueue, drain, fastest, ordered, limit, partitions, idle, scale, backlogs, counts,
    /// wakeup, relay, consume, isolation, idle-load, saga; with `--peer`: apalis, peers).
    only: Option<Vec<String>>,
    /// Also run apalis (bench/peer-apalis, built by scripts/bench --peer).
    peer: bool,
    /// Rounds of each throughput scenario (backstop and raw alternating); the median is
    /// reported. One round on this 2-core machine moves ±20%.
    repeat: usize,
    /// Engine counts of the drain scenario (default 1, 4, 8).
    engines: Vec<usize>,
    /// Durability on, as production runs: the servers must be durable (scripts/bench
    /// --durable starts them so), SQLite runs with `synchronous=FULL` (the store's
    /// default) for backstop and the raw SQL alike. Results go to `durable.md`.
    durable: bool,
    /// With a MySQL URL naming several nodes (Galera): spread each store's connections
    /// over every node (`MySqlOptions::every_node`) instead of electing one writer node.
    every_node: bool,
}

impl Args {
    fn runs(&self, scenario: &str) -> bool {
        self.only
            .as_ref()
            .is_none_or(|o| o.iter().any(|s| s == scenario))
    }
}

/// Whether this run has durability on (`--durable`), for the SQLite connections of
/// backstop and of the raw SQL alike.
static DURABLE: std::sync::OnceLock<bool> = std::sync::OnceLock::new();

pub(crate) fn durable() -> bool {
    DURABLE.get().copied().unwrap_or(false)
}

/// Whether MySQL stores spread their connections over every node (`--every-node`).
static EVERY_NODE: std::sync::OnceLock<bool> = std::sync::OnceLock::new();

fn every_node() -> bool {
    EVERY_NODE.get().copied().unwrap_or(false)
}

fn args() -> Args {
    let mut a = Args {
        smoke: false,
        backends: vec!["sqlite".into(), "postgres".into(), "mysql".into()],
        drain_tasks: 100_000,
        out: std::path::PathBuf::from("bench/results"),
        only: None,
        peer: false,
        repeat: 3,
        engines: vec![1, 4, 8],
        durable: false,
        every_node: false,
    };
    let mut it = std::env::args().skip(1);
    while let Some(arg) = it.next() {
        match arg.as_str() {
            "--smoke" => a.smoke = true,
            "--durable" => a.durable = true,
            "--every-node" => a.every_node = true,
            "--peer" => a.peer = true,
            "--backends" => {
                a.backends = it
                    .next()
                    .expect("--backends a,b")
                    .split(',')
                    .map(str::to_owned)
                    .collect()
            }
            "--repeat" => {
                a.repeat = it
                    .next()
                    .expect("--repeat N")
                    .parse::<usize>()
                    .expect("a number")
                    .max(1)
            }
            "--engines" => {
                a.engines = it
                    .next()
                    .expect("--engines 1,4,8")
                    .split(',')
                    .map(|n| n.parse::<usize>().expect("a number").max(1))
                    .collect()
            }
            "--tasks" => a.drain_tasks = it.next().expect("--tasks N").parse().expect("a number"),
            "--out" => a.out = it.next().expect("--out DIR").into(),
            "--only" => {
                a.only = Some(
                    it.next()
                        .expect("--only a,b")
                        .split(',')
                        .map(str::to_owned)
                        .collect(),
                )
            }
            other => panic!(
                "unknown argument {other:?} (use --smoke, --durable, --every-node, --backends, --tasks, --engines, --repeat, --out, --only)"
            ),
        }
    }
    if a.smoke {
        a.drain_tasks = a.drain_tasks.min(500);
        a.repeat = 1;
    }
    let _ = DURABLE.set(a.durable);
    let _ = EVERY_NODE.set(a.every_node);
    a
}

/// One database under test.
pub(crate) struct Target {
    backend: &'static str,
    url: String,
    raw: Box<dyn Raw>,
    server: String,
    _dir: Option<TempDir>,
}

struct TempDir(std::path::PathBuf);
impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

impl Target {
    /// The CPU seconds of the database server's processes so far (0 for SQLite, which runs
    /// in this process).
    pub(crate) fn server_cpu(&self) -> f64 {
        match self.backend {
            "postgres" => meter::server_cpu("postgres"),
            "mysql" => meter::server_cpu("mariadbd"),
            _ => 0.0,
        }
    }

    async fn store(&self, max_connections: u32) -> AnyStore {
        let config = StoreConfig::default().table(TABLE);
        match self.backend {
            "sqlite" => AnyStore::Sqlite(
                SqliteStore::open_with(
                    &self.url,
                    SqliteOptions::default()
                        .config(config)
                        .max_connections(max_connections as usize)
                        .synchronous(if durable() {
                            Synchronous::Full
                        } else {
                            Synchronous::Normal
                        })
                        .busy_timeout(Duration::from_secs(30)),
                )
                .await
                .expect("open sqlite"),
            ),
            "postgres" => AnyStore::Postgres(
                PgStore::connect_with(
                    &self.url,
                    PgOptions::default()
                        .config(config)
                        .max_connections(max_connections as usize),
                )
                .await
                .expect("open postgres"),
            ),
            _ => AnyStore::MySql(
                MySqlStore::connect_with(
                    &self.url,
                    MySqlOptions::default()
                        .config(config)
                        .max_connections(max_connections)
                        .every_node(every_node()),
                )
                .await
                .expect("open mysql"),
            ),
        }
    }
}

async fn target(backend: &str) -> Option<Target> {
    match backend {
        "sqlite" => {
            let dir = std::env::temp_dir().join(format!("backstop-bench-{}", std::process::id()));
            std::fs::create_dir_all(&dir).expect("temp dir");
            let path = dir.join("bench.db");
            Some(Target {
                backend: "sqlite",
                url: path.display().to_string(),
                raw: Box::new(raw::SqliteRaw { path }),
                server: format!(
                    "SQLite {} (bundled, WAL, synchronous={})",
                    rusqlite::version(),
                    if durable() { "FULL" } else { "NORMAL" }
                ),
                _dir: Some(TempDir(dir)),
            })
        }
        "postgres" => {
            let url = std::env::var("BACKSTOP_BENCH_POSTGRES_URL")
                .ok()
                .filter(|u| !u.is_empty())?;
            let raw = raw::PgRaw { url: url.clone() };
            let (c, conn) = tokio_postgres::connect(&url, tokio_postgres::NoTls)
                .await
                .expect("connect");
            tokio::spawn(conn);
            let server: String = c
                .query_one("SELECT version()", &[])
                .await
                .expect("version")
                .get(0);
            let mut settings = Vec::new();
            for name in ["fsync", "synchronous_commit", "full_page_writes"] {
                let v: String = c
                    .query_one(&format!("SHOW {name}"), &[])
                    .await
                    .expect("a setting")
                    .get(0);
                settings.push(format!("{name}={v}"));
            }
            assert!(
                !durable() || settings.iter().all(|s| s.ends_with("=on")),
                "--durable needs a durable PostgreSQL, found {settings:?} (scripts/bench --durable starts one)"
            );
            Some(Target {
                backend: "postgres",
                url,
                raw: Box::new(raw),
                server: format!(
                    "{} ({})",
                    server.split(" on ").next().unwrap_or_default(),
                    settings.join(", ")
                ),
                _dir: None,
            })
        }
        "mysql" => {
            let url = std::env::var("BACKSTOP_BENCH_MYSQL_URL")
                .ok()
                .filter(|u| !u.is_empty())?;
            // a URL naming several nodes (Galera): the engines spread over them, the raw
            // SQL baseline runs on the first (sqlx takes one host)
            let raw = raw::MySqlRaw::connect(&first_host(&url), 32).await;
            let server: String = sqlx::query_scalar("SELECT VERSION()")
                .fetch_one(&raw.pool)
                .await
                .expect("version");
            let flush: String =
                sqlx::query_scalar("SELECT CAST(@@innodb_flush_log_at_trx_commit AS CHAR)")
                    .fetch_one(&raw.pool)
                    .await
                    .expect("innodb_flush_log_at_trx_commit");
            assert!(
                !durable() || flush == "1",
                "--durable needs innodb_flush_log_at_trx_commit=1, found {flush} (scripts/bench --durable starts such a server)"
            );
            Some(Target {
                backend: "mysql",
                url,
                raw: Box::new(raw),
                server: format!(
                    "{server} (innodb_flush_log_at_trx_commit={flush}{})",
                    if every_node() {
                        ", the store's connections on every node"
                    } else {
                        ""
                    }
                ),
                _dir: None,
            })
        }
        other => panic!("unknown backend {other}"),
    }
}

/// The business row and the task in one native transaction; with `claim`, the task is
/// also claimed for that engine in it (`Engine::claim_in`).
async fn enqueue_with_order(
    store: &AnyStore,
    key: &str,
    claim: Option<&Engine<AnyStore>>,
) -> (Enqueued, Option<Claimed>) {
    let task = NewTask::new(EVENT, key);
    match store {
        AnyStore::Sqlite(s) => {
            let key = key.to_owned();
            let engine = claim.cloned();
            s.transaction(move |tx| {
                tx.execute(&format!("INSERT INTO {ORDERS} (id) VALUES (?1)"), [&key])
                    .map_err(|e| {
                        backstop::Error::new(
                            backstop::ErrorKind::Unexpected,
                            "bench",
                            e.to_string(),
                        )
                    })?;
                let e = tx.enqueue(&task)?;
                let claimed = match &engine {
                    Some(engine) => Some(engine.claim_blocking(&mut tx.connection(), &e)?),
                    None => None,
                };
                Ok::<_, backstop::Error>((e, claimed))
            })
            .await
            .expect("enqueue")
        }
        AnyStore::Postgres(p) => {
            let mut c = p.client().await.expect("client");
            let tx = c.transaction().await.expect("begin");
            let st = tx
                .prepare_cached(&format!("INSERT INTO {ORDERS} (id) VALUES ($1)"))
                .await
                .expect("prepare");
            tx.execute(&st, &[&key]).await.expect("order");
            let e = p.enqueue_tx(&tx, &task).await.expect("enqueue");
            let claimed = match claim {
                Some(engine) => Some(
                    engine
                        .claim_in(&mut p.tx_connection(&tx), &e)
                        .await
                        .expect("claim"),
                ),
                None => None,
            };
            tx.commit().await.expect("commit");
            (e, claimed)
        }
        AnyStore::MySql(m) => {
            let mut tx = m.pool().begin().await.expect("begin");
            sqlx::query(sqlx::AssertSqlSafe(format!(
                "INSERT INTO {ORDERS} (id) VALUES (?)"
            )))
            .bind(key)
            .execute(&mut *tx)
            .await
            .expect("order");
            let e = m.enqueue_tx(&mut tx, &task).await.expect("enqueue");
            let claimed = match claim {
                Some(engine) => Some(engine.claim_in(&mut *tx, &e).await.expect("claim")),
                None => None,
            };
            tx.commit().await.expect("commit");
            (e, claimed)
        }
        _ => unreachable!("all backends are compiled in"),
    }
}

fn lat(h: &Histogram<u64>) -> Option<[f64; 4]> {
    if h.is_empty() {
        return None;
    }
    let ms = |us: u64| us as f64 / 1000.0;
    Some([
        ms(h.value_at_quantile(0.50)),
        ms(h.value_at_quantile(0.95)),
        ms(h.value_at_quantile(0.99)),
        ms(h.max()),
    ])
}

async fn wait_succeeded(store: &AnyStore, n: u64) {
    loop {
        if store.stats().await.expect("stats").count(Status::Succeeded) >= n {
            return;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

fn quiet_config() -> EngineConfig {
    EngineConfig::default()
        .first_poll_delay(Duration::from_secs(3600))
        .retention(None)
}

/// K producers commit a business row + task, then run it ahead; no-op handler. With
/// `claim_in_tx`, the task is claimed in its transaction (`Engine::claim_in`) and run
/// after the commit (`run_claimed`), against raw SQL that claims in the transaction too.
/// The note gives the WAL / redo log flushes per task where the server counts them.
async fn run_ahead(t: &Target, producers: usize, total: usize, claim_in_tx: bool) -> Row {
    t.raw.reset().await;
    let syncs_before = t.raw.log_syncs().await;
    let store = t.store(32).await;
    let starts: Arc<Mutex<HashMap<i64, Instant>>> = Arc::default();
    let hist = Arc::new(Mutex::new(histogram()));
    let done = Arc::new(AtomicUsize::new(0));
    let handler = {
        let (starts, hist, done) = (Arc::clone(&starts), Arc::clone(&hist), Arc::clone(&done));
        handler_fn(move |task: Task| {
            let t0 = starts.lock().unwrap().remove(&task.id);
            if let Some(t0) = t0 {
                record(&mut hist.lock().unwrap(), t0.elapsed());
            }
            done.fetch_add(1, Ordering::SeqCst);
            async { Ok::<_, HandlerError>(()) }
        })
    };
    let engine = Engine::builder(store.clone())
        .config(quiet_config())
        .handler(
            EVENT,
            handler,
            HandlerOptions::default()
                .concurrency(32)
                .queue_capacity(8192),
        )
        .start()
        .expect("engine");
    let each = total / producers;
    let m = sys::Meter::start();
    let started = Instant::now();
    let mut hs = Vec::new();
    for p in 0..producers {
        let (store, engine, starts) = (store.clone(), engine.clone(), Arc::clone(&starts));
        hs.push(tokio::spawn(async move {
            let mut not_started = 0;
            for i in 0..each {
                let claim = claim_in_tx.then_some(&engine);
                let (e, claimed) = enqueue_with_order(&store, &format!("p{p}-{i}"), claim).await;
                starts.lock().unwrap().insert(e.id, Instant::now());
                let run = match claimed {
                    Some(claimed) => engine.run_claimed(claimed).await,
                    None => engine.run_now(&e).await,
                };
                if run != backstop::RunAhead::Started {
                    not_started += 1;
                }
            }
            not_started
        }));
    }
    let mut not_started = 0;
    for h in hs {
        not_started += h.await.expect("join");
    }
    wait_succeeded(&store, (each * producers) as u64).await;
    let elapsed = started.elapsed();
    let (rss, cpu) = m.stop();
    engine.shutdown().await;
    // closed connections report their statistics (PostgreSQL: an idle one may hold them
    // back for up to 10 s)
    drop(engine);
    drop(store);
    let syncs = log_syncs_per_task(t, syncs_before, each * producers).await;
    t.raw.reset().await;
    let base_before = t.raw.log_syncs().await;
    let (base_elapsed, base_hist) = t.raw.per_task(producers, each, claim_in_tx).await;
    let base_syncs = log_syncs_per_task(t, base_before, each * producers).await;
    let h = hist.lock().unwrap().clone();
    let mut note = if not_started > 0 {
        format!("{not_started} not run ahead")
    } else {
        "latency: commit → handler start (raw: commit → claimed)".into()
    };
    if let (Some(a), Some(b)) = (syncs, base_syncs) {
        note = format!("{note}; log flushes per task {a:.2} (raw {b:.2})");
    }
    Row {
        backend: t.backend.into(),
        scenario: if claim_in_tx {
            format!("run-ahead, claim in the enqueue transaction, {producers} producer(s)")
        } else {
            format!("run-ahead, {producers} producer(s)")
        },
        tps: Some((each * producers) as f64 / elapsed.as_secs_f64()),
        base_tps: Some((each * producers) as f64 / base_elapsed.as_secs_f64()),
        lat: lat(&h),
        base_lat: lat(&base_hist),
        rss_mb: rss,
        cpu_s: cpu,
        note,
        ..Row::default()
    }
}

/// The server's WAL / redo log flushes since `before`, per task of `tasks`.
async fn log_syncs_per_task(t: &Target, before: Option<u64>, tasks: usize) -> Option<f64> {
    let after = t.raw.log_syncs().await?;
    Some(after.saturating_sub(before?) as f64 / tasks as f64)
}

/// Enqueue throughput: `producers` loops enqueueing `total` new tasks in batches of
/// `batch`, each batch one transaction (`enqueue_many`), against the raw multi-row insert
/// of the same rows (one statement per batch, returning the ids).
async fn enqueue_batches(t: &Target, producers: usize, total: usize, batch: usize) -> Row {
    t.raw.reset().await;
    let store = t.store(producers as u32 + 1).await;
    let batches = (total / producers / batch).max(1);
    let n = batches * batch * producers;
    let m = sys::Meter::start();
    let started = Instant::now();
    let mut hs = Vec::new();
    for p in 0..producers {
        let store = store.clone();
        hs.push(tokio::spawn(async move {
            for b in 0..batches {
                let tasks: Vec<NewTask> = (0..batch)
                    .map(|i| NewTask::new(EVENT, format!("p{p}-{b}-{i}")).payload_raw("{}"))
                    .collect();
                let got = store.enqueue_many(&tasks).await.expect("enqueue_many");
                assert!(got.iter().all(|e| e.created), "every task new");
            }
        }));
    }
    for h in hs {
        h.await.expect("join");
    }
    let elapsed = started.elapsed();
    let (rss, cpu) = m.stop();
    t.raw.reset().await;
    let base = t.raw.insert_batches(producers, batches, batch).await;
    Row {
        backend: t.backend.into(),
        scenario: format!("enqueue_many {n} in batches of {batch}, {producers} producer(s)"),
        tps: Some(n as f64 / elapsed.as_secs_f64()),
        base_tps: Some(n as f64 / base.as_secs_f64()),
        rss_mb: rss,
        cpu_s: cpu,
        note: format!(
            "each batch one transaction; raw: one multi-row INSERT … RETURNING id of the \
             {batch} rows (key and payload bound)"
        ),
        ..Row::default()
    }
}

/// N due tasks, E engines with a short poll interval drain them. With `keys`, the tasks
/// are spread over that many order keys (each key's tasks one at a time, in order); the
/// baseline stays the plain raw drain.
async fn drain(t: &Target, engines: usize, n: usize, keys: Option<usize>) -> Row {
    let Drained {
        elapsed,
        rss_mb: rss,
        cpu_s: cpu,
        ..
    } = backstop_drain(t, engines, n, keys, 100).await;
    t.raw.reset().await;
    t.raw.bulk_insert(n, 0).await;
    let base = t.raw.drain(engines, 100, Shape::Store).await;
    let (scenario, note) = match keys {
        Some(k) => (
            format!("ordered drain {n} over {k} keys, {engines} engine(s)"),
            format!(
                "each key's tasks one at a time, in order; raw: the plain drain ({engines} \
                 worker(s), no order keys)"
            ),
        ),
        None => (
            format!("drain {n}, {engines} engine(s)"),
            format!("batch 100; raw: {engines} worker(s) claiming + completing batches"),
        ),
    };
    Row {
        backend: t.backend.into(),
        scenario,
        tps: Some(n as f64 / elapsed.as_secs_f64()),
        base_tps: Some(n as f64 / base.as_secs_f64()),
        rss_mb: rss,
        cpu_s: cpu,
        note,
        ..Row::default()
    }
}

/// N due tasks drained by E engines, against the fastest correct raw SQL
/// ([`Shape::Fastest`]); the raw SQL of the store's own statements runs in the same round,
/// and the note reports it.
async fn drain_fastest(t: &Target, engines: usize, n: usize) -> Row {
    let Drained {
        elapsed,
        rss_mb: rss,
        cpu_s: cpu,
        ..
    } = backstop_drain(t, engines, n, None, 100).await;
    t.raw.reset().await;
    t.raw.bulk_insert(n, 0).await;
    let store_shape = t.raw.drain(engines, 100, Shape::Store).await;
    t.raw.reset().await;
    t.raw.bulk_insert(n, 0).await;
    let fastest = t.raw.drain(engines, 100, Shape::Fastest).await;
    let tps = |d: Duration| n as f64 / d.as_secs_f64();
    Row {
        backend: t.backend.into(),
        scenario: format!("drain {n}, {engines} engine(s), vs the fastest raw SQL"),
        tps: Some(tps(elapsed)),
        base_tps: Some(tps(fastest)),
        rss_mb: rss,
        cpu_s: cpu,
        note: format!(
            "batch 100; raw: {engines} worker(s), the fewest statements and round trips; \
             the store's statements as raw SQL: {:.0}/s ({:.2}× the fastest)",
            tps(store_shape),
            fastest.as_secs_f64() / store_shape.as_secs_f64()
        ),
        ..Row::default()
    }
}

/// What a drain took: the time until the database recorded every task succeeded, and the
/// peak RSS, CPU seconds of this process and of the database server over it.
pub(crate) struct Drained {
    pub elapsed: Duration,
    pub rss_mb: f64,
    pub cpu_s: f64,
    pub server_cpu_s: f64,
}

/// backstop's half of a drain: N due tasks (over `keys` order keys), E engines claiming
/// `batch` at a time.
pub(crate) async fn backstop_drain(
    t: &Target,
    engines: usize,
    n: usize,
    keys: Option<usize>,
    batch: usize,
) -> Drained {
    t.raw.reset().await;
    match keys {
        Some(k) => t.raw.bulk_insert_ordered(n, k).await,
        None => t.raw.bulk_insert(n, 0).await,
    }
    let engines = drain_engines(engines, batch);
    drain_due(t, &engines, n, batch, limit::Work::NONE, DRAIN_POLL, false).await
}

/// `engines` engines of the drains, each with concurrency 64 and room queued for nearly
/// two claims of `batch`.
fn drain_engines(engines: usize, batch: usize) -> Vec<(usize, usize)> {
    vec![(64, (192 * batch).div_ceil(100)); engines]
}

/// As [`backstop_drain`] without order keys, warm: the engines run before the tasks are
/// committed (see [`drain_due`]).
pub(crate) async fn backstop_drain_warm(
    t: &Target,
    engines: usize,
    n: usize,
    batch: usize,
) -> Drained {
    t.raw.reset().await;
    let engines = drain_engines(engines, batch);
    drain_due(t, &engines, n, batch, limit::Work::NONE, DRAIN_POLL, true).await
}

/// The drains' poll interval: short, so that an engine whose executor has room never
/// waits on a tick for work already due.
const DRAIN_POLL: Duration = Duration::from_millis(5);

/// `n` due tasks drained by one engine per entry of `engines` (its handler's concurrency
/// and queue capacity), claiming `batch` at a time, each handler working as `work` says,
/// polling every `poll`. Cold (`warm` false): the tasks are already inserted and the
/// clock starts with the engines. Warm: the engines start on an empty table, and the
/// clock starts when the tasks are committed (graphile-worker's drain is measured so).
pub(crate) async fn drain_due(
    t: &Target,
    engines: &[(usize, usize)],
    n: usize,
    batch: usize,
    work: limit::Work,
    poll: Duration,
    warm: bool,
) -> Drained {
    let done = Arc::new(AtomicUsize::new(0));
    // the stores (their pools) open before the clock starts, as the peers' pools do; the
    // engines start on it
    let mut stores = Vec::new();
    for _ in engines {
        stores.push(t.store(8).await);
    }
    let probe = t.store(2).await;
    let mut clock = (!warm).then(|| (t.server_cpu(), sys::Meter::start(), Instant::now()));
    let mut running = Vec::new();
    for (&(concurrency, capacity), store) in engines.iter().zip(stores) {
        let done = Arc::clone(&done);
        let handler = handler_fn(move |task: Task| {
            let done = Arc::clone(&done);
            async move {
                let work = work.of(task.id);
                if !work.is_zero() {
                    tokio::time::sleep(work).await;
                }
                done.fetch_add(1, Ordering::Relaxed);
                Ok::<_, HandlerError>(())
            }
        });
        let engine = Engine::builder(store)
            .config(
                EngineConfig::default()
                    .poll_interval(poll)
                    .first_poll_delay(Duration::ZERO)
                    .batch_size(batch)
                    .retention(None),
            )
            .handler(
                EVENT,
                handler,
                HandlerOptions::default()
                    .concurrency(concurrency)
                    .queue_capacity(capacity),
            )
            .start()
            .expect("engine");
        running.push(engine);
    }
    let (server0, m, started) = match clock.take() {
        Some(clock) => clock,
        None => {
            // warm: the engines past their start and first polls, then the tasks
            // committed in one statement, and the clock starts at the commit
            tokio::time::sleep(poll * 4).await;
            t.raw.bulk_insert(n, 0).await;
            (t.server_cpu(), sys::Meter::start(), Instant::now())
        }
    };
    while done.load(Ordering::Relaxed) < n {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    wait_succeeded(&probe, n as u64).await;
    let elapsed = started.elapsed();
    let (rss_mb, cpu_s) = m.stop();
    let server_cpu_s = t.server_cpu() - server0;
    for e in &running {
        e.shutdown().await;
    }
    Drained {
        elapsed,
        rss_mb,
        cpu_s,
        server_cpu_s,
    }
}

/// One task at a time, engine otherwise idle: commit → handler start.
async fn idle_latency(t: &Target, count: usize) -> Row {
    t.raw.reset().await;
    let store = t.store(4).await;
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<Instant>();
    let handler = handler_fn(move |_task: Task| {
        let _ = tx.send(Instant::now());
        async { Ok::<_, HandlerError>(()) }
    });
    let engine = Engine::builder(store.clone())
        .config(quiet_config())
        .handler(EVENT, handler, HandlerOptions::default())
        .start()
        .expect("engine");
    let mut h = histogram();
    let m = sys::Meter::start();
    for i in 0..count {
        let (e, _) = enqueue_with_order(&store, &format!("i{i}"), None).await;
        let t0 = Instant::now();
        engine.run_now(&e).await;
        let started = rx.recv().await.expect("handler ran");
        record(&mut h, started - t0);
        wait_succeeded(&store, (i + 1) as u64).await;
    }
    let (rss, cpu) = m.stop();
    engine.shutdown().await;
    t.raw.reset().await;
    let (_, base) = t.raw.per_task(1, count, false).await;
    Row {
        backend: t.backend.into(),
        scenario: format!("idle latency ({count} tasks, one at a time)"),
        lat: lat(&h),
        base_lat: lat(&base),
        rss_mb: rss,
        cpu_s: cpu,
        note: "commit → handler start (raw: commit → claimed)".into(),
        ..Row::default()
    }
}

/// Claim latency of a 50-task batch with a small and a large pending backlog.
async fn scale(t: &Target, small: usize, large: usize, rounds: usize) -> Row {
    let mut p50 = Vec::new();
    let m = sys::Meter::start();
    for size in [small, large] {
        t.raw.reset().await;
        t.raw.bulk_insert(size, 0).await;
        let store = t.store(2).await;
        let owner = Owner::new("bench").expect("owner");
        let types = vec![EVENT.to_string()];
        let mut h = histogram();
        for _ in 0..rounds {
            let t0 = Instant::now();
            let tasks = store.claim_batch(&owner, &types, 50).await.expect("claim");
            record(&mut h, t0.elapsed());
            // Give them back: the backlog stays the same size round after round.
            let marks: Vec<_> = tasks
                .iter()
                .map(|t| backstop::Mark::release(t.lease()))
                .collect();
            store.mark(&marks).await.expect("mark");
        }
        p50.push(h.value_at_quantile(0.5) as f64 / 1000.0);
    }
    let (rss, cpu) = m.stop();
    t.raw.reset().await;
    Row {
        backend: t.backend.into(),
        scenario: format!("claim 50 with {small} vs {large} pending"),
        lat: Some([p50[1], 0.0, 0.0, 0.0]),
        base_lat: Some([p50[0], 0.0, 0.0, 0.0]),
        rss_mb: rss,
        cpu_s: cpu,
        note: format!(
            "p50 {:.3} ms at {small} → {:.3} ms at {large}: ×{:.2}",
            p50[0],
            p50[1],
            p50[1] / p50[0]
        ),
        ..Row::default()
    }
}

/// The backlog counts (`TaskStore::backlog`, what the engine's gauges read) with
/// `pending` pending tasks, next to the same with `succeeded` succeeded rows retained
/// beside them: the ratio of the p50s should stay near 1.
async fn counts(t: &Target, pending: usize, succeeded: usize, rounds: usize) -> Vec<Row> {
    let mut p50 = Vec::new();
    let mut pages = Vec::new();
    let m = sys::Meter::start();
    for retained in [0, succeeded] {
        t.raw.reset().await;
        if retained > 0 {
            // inserted as succeeded, as retention keeps them (an UPDATE of millions of
            // rows would measure the database's cleanup of it instead)
            t.raw.bulk_insert_succeeded(retained, 0).await;
        }
        t.raw.bulk_insert(pending, retained).await;
        let store = t.store(2).await;
        let mut h = histogram();
        for _ in 0..rounds {
            let t0 = Instant::now();
            let b = store.backlog().await.expect("backlog");
            record(&mut h, t0.elapsed());
            assert_eq!(b.count(Status::Pending), pending as u64);
        }
        p50.push(h.value_at_quantile(0.5) as f64 / 1000.0);
        if retained > 0 {
            pages = console_pages(t, &store, retained, pending, rounds).await;
        }
    }
    let (rss, cpu) = m.stop();
    t.raw.reset().await;
    let mut rows = vec![Row {
        backend: t.backend.into(),
        scenario: format!("backlog counts, {pending} pending, 0 vs {succeeded} succeeded"),
        lat: Some([p50[1], 0.0, 0.0, 0.0]),
        base_lat: Some([p50[0], 0.0, 0.0, 0.0]),
        rss_mb: rss,
        cpu_s: cpu,
        note: format!(
            "p50 {:.3} ms with none → {:.3} ms with {succeeded} succeeded: ×{:.2}",
            p50[0],
            p50[1],
            p50[1] / p50[0]
        ),
        ..Row::default()
    }];
    rows.extend(pages);
    rows
}

/// The console's pages as it serves them (its Router, rendering included) with
/// `succeeded` rows retained beside `pending` pending and 1 000 failed tasks: p50, p95,
/// p99 and max of `rounds` requests per page. The goal: p99 under 100 ms at 10 million.
async fn console_pages(
    t: &Target,
    store: &AnyStore,
    succeeded: usize,
    pending: usize,
    rounds: usize,
) -> Vec<Row> {
    use tower::ServiceExt;
    let failed = 1000;
    t.raw
        .bulk_insert_rows(OTHER, failed, succeeded + pending, 0, 2)
        .await;
    let app = backstop::console::Console::new(store.clone())
        .authorizer(|_: &axum::http::request::Parts| backstop::console::Access::ReadOnly)
        .router();
    let middle = succeeded / 2;
    let pages = [
        "/".to_owned(),
        "/tasks".to_owned(),
        format!("/tasks?after={middle}"),
        "/tasks?status=failed".to_owned(),
        "/tasks?status=pending".to_owned(),
        format!("/tasks?status=failed&event_type={OTHER}"),
        format!("/tasks?key=b{middle}"),
        format!("/tasks?event_type={EVENT}&key=b{middle}"),
        "/tasks?error=timeout".to_owned(),
        "/tasks?status=succeeded&older_than=1h".to_owned(),
    ];
    let mut rows = Vec::new();
    for page in pages {
        let mut h = histogram();
        for _ in 0..rounds {
            let req = axum::http::Request::get(page.as_str())
                .body(axum::body::Body::empty())
                .expect("request");
            let t0 = Instant::now();
            let resp = app.clone().oneshot(req).await.expect("answer");
            let status = resp.status();
            let body = axum::body::to_bytes(resp.into_body(), 1 << 24)
                .await
                .expect("body");
            record(&mut h, t0.elapsed());
            assert!(status.is_success(), "{page}: {status}");
            assert!(!body.is_empty());
        }
        let q = |p: f64| h.value_at_quantile(p) as f64 / 1000.0;
        let lat = [q(0.5), q(0.95), q(0.99), h.max() as f64 / 1000.0];
        rows.push(Row {
            backend: t.backend.into(),
            scenario: format!(
                "console {page}, {succeeded} succeeded + {pending} pending + {failed} failed"
            ),
            lat: Some(lat),
            note: format!(
                "p99 {:.1} ms (goal < 100 ms){}",
                lat[2],
                if lat[2] < 100.0 { "" } else { ": OVER" }
            ),
            ..Row::default()
        });
    }
    rows
}

/// A second event type, for the backlog scenario.
const OTHER: &str = "BENCH_OTHER";

/// p50 (ms) of `rounds` claims of 50 tasks of `types`, each given back at once so the
/// backlog stays the same.
pub(crate) async fn claim_p50(store: &AnyStore, types: &[&str], rounds: usize) -> f64 {
    let owner = Owner::new("bench").expect("owner");
    let types: Vec<String> = types.iter().map(|t| t.to_string()).collect();
    let mut h = histogram();
    for _ in 0..rounds {
        let t0 = Instant::now();
        let tasks = store.claim_batch(&owner, &types, 50).await.expect("claim");
        record(&mut h, t0.elapsed());
        assert_eq!(tasks.len(), 50, "the backlog is large enough");
        let marks: Vec<_> = tasks
            .iter()
            .map(|t| backstop::Mark::release(t.lease()))
            .collect();
        store.mark(&marks).await.expect("mark");
    }
    h.value_at_quantile(0.5) as f64 / 1000.0
}

/// A claim of one event type whose due backlog sits behind another type's larger, older
/// one must cost what it costs with its own backlog alone: each type's due rows are an
/// ordered index walk of their own. Then a claim of both types at once (one walk per
/// type, merged), against the same baseline.
async fn backlogs(t: &Target, n: usize, rounds: usize) -> Vec<Row> {
    let m = sys::Meter::start();
    t.raw.reset().await;
    t.raw.bulk_insert_of(OTHER, n, 0, 0).await;
    let store = t.store(2).await;
    let alone = claim_p50(&store, &[OTHER], rounds).await;
    // the other type's backlog, due an hour earlier: ahead of all of it in claim order
    t.raw.bulk_insert_of(EVENT, n, 0, 3600).await;
    let behind = claim_p50(&store, &[OTHER], rounds).await;
    let both = claim_p50(&store, &[EVENT, OTHER], rounds).await;
    let (rss, cpu) = m.stop();
    t.raw.reset().await;
    let row = |scenario: String, p50: f64, what: &str| Row {
        backend: t.backend.into(),
        scenario,
        lat: Some([p50, 0.0, 0.0, 0.0]),
        base_lat: Some([alone, 0.0, 0.0, 0.0]),
        rss_mb: rss,
        cpu_s: cpu,
        note: format!(
            "p50 {alone:.3} ms with its own backlog alone → {p50:.3} ms {what}: ×{:.2}",
            p50 / alone
        ),
        ..Row::default()
    };
    vec![
        row(
            format!("claim 50 of one type: {n} due alone vs behind {n} of another"),
            behind,
            "behind the other type's",
        ),
        row(
            format!("claim 50 of two types ({n} due each) vs one type alone"),
            both,
            "for both types",
        ),
    ]
}

/// A due backlog of one event type (`backlog`, 1M in a full run, due an hour earlier:
/// ahead of everything in claim order) must not slow the claims of another type with
/// `own` due tasks: p50 of `rounds` claims of 50 of the other type, alone and behind the
/// backlog. On PostgreSQL again on connections that always use the generic plan of a
/// prepared statement (`plan_cache_mode = force_generic_plan`), the plan a server
/// settles on after five executions when it finds it no worse: the plan that cannot
/// know which type a claim names.
async fn isolation(t: &Target, own: usize, backlog: usize, rounds: usize) -> Vec<Row> {
    let m = sys::Meter::start();
    t.raw.reset().await;
    t.raw.bulk_insert_of(OTHER, own, 0, 0).await;
    let store = t.store(2).await;
    let generic = if t.backend == "postgres" {
        let sep = if t.url.contains('?') { '&' } else { '?' };
        let url = format!(
            "{}{sep}options=-c%20plan_cache_mode%3Dforce_generic_plan",
            t.url
        );
        let options = PgOptions::default()
            .config(StoreConfig::default().table(TABLE))
            .max_connections(2);
        Some(AnyStore::Postgres(
            PgStore::connect_with(&url, options)
                .await
                .expect("generic-plan store"),
        ))
    } else {
        None
    };
    let alone = claim_p50(&store, &[OTHER], rounds).await;
    let generic_alone = match &generic {
        Some(g) => Some(claim_p50(g, &[OTHER], rounds).await),
        None => None,
    };
    t.raw.bulk_insert_of(EVENT, backlog, 0, 3600).await;
    let behind = claim_p50(&store, &[OTHER], rounds).await;
    let generic_behind = match &generic {
        Some(g) => Some(claim_p50(g, &[OTHER], rounds).await),
        None => None,
    };
    let (rss, cpu) = m.stop();
    t.raw.reset().await;
    let row = |plan: &str, alone: f64, behind: f64| Row {
        backend: t.backend.into(),
        scenario: format!(
            "claim 50 of type B ({own} due) without vs behind {backlog} due of type A{plan}"
        ),
        lat: Some([behind, 0.0, 0.0, 0.0]),
        base_lat: Some([alone, 0.0, 0.0, 0.0]),
        rss_mb: rss,
        cpu_s: cpu,
        note: format!(
            "p50 {alone:.3} ms without → {behind:.3} ms behind the backlog: ×{:.2}",
            behind / alone
        ),
        ..Row::default()
    };
    let mut rows = vec![row("", alone, behind)];
    if let (Some(a), Some(b)) = (generic_alone, generic_behind) {
        rows.push(row(", generic plan", a, b));
    }
    rows
}

/// Run the apalis peer program; its JSON answer.
pub(crate) fn run_peer(args: &[&str]) -> Option<serde_json::Value> {
    run_peer_bin("bench/peer-apalis/target/release/peer-apalis", args)
}

/// A peer's release binary (built by scripts/bench in its own workspace) run with `args`:
/// the JSON object it prints, or `None` (said why) when it is missing or failed.
pub(crate) fn run_peer_bin(bin: &str, args: &[&str]) -> Option<serde_json::Value> {
    let out = match std::process::Command::new(bin).args(args).output() {
        Ok(out) => out,
        Err(e) => {
            eprintln!("   {bin}: {e} (scripts/bench builds it)");
            return None;
        }
    };
    if !out.status.success() {
        eprintln!("peer failed: {}", String::from_utf8_lossy(&out.stderr));
        return None;
    }
    serde_json::from_slice(&out.stdout).ok()
}

/// apalis 1.0 on the same database: drains (default and tuned) and NOTIFY latency,
/// each beside backstop's number for the same work from this run.
async fn peer(t: &Target, rows: &[Row], n: usize) -> Vec<Row> {
    let ours = |scenario: &str| {
        rows.iter()
            .find(|r| r.backend == t.backend && r.scenario.starts_with(scenario))
            .cloned()
    };
    let mut out = Vec::new();
    let n_s = n.to_string();
    match t.backend {
        "postgres" => {
            t.raw.reset().await;
            for tuned in [false, true] {
                let mut args = vec![
                    "--backend",
                    "postgres",
                    "--url",
                    &t.url,
                    "--mode",
                    "drain",
                    "--tasks",
                    &n_s,
                ];
                if tuned {
                    args.push("--tuned");
                }
                let Some(v) = run_peer(&args) else { continue };
                let drain1 = ours(&format!("drain {n}, 1 engine"));
                out.push(Row {
                    backend: t.backend.into(),
                    scenario: format!(
                        "vs apalis: drain {n}, {}",
                        if tuned { "tuned" } else { "default" }
                    ),
                    tps: drain1.and_then(|r| r.tps),
                    base_tps: v["tps"].as_f64(),
                    note: format!(
                        "“raw” column is apalis-postgres 1.0 ({}); backstop: 1 engine",
                        if tuned {
                            "batch 100, concurrency 64"
                        } else {
                            "default config, concurrency 4"
                        }
                    ),
                    ..Row::default()
                });
            }
            let count = if n < 1000 { "20" } else { "300" };
            if let Some(v) = run_peer(&[
                "--backend",
                "postgres",
                "--url",
                &t.url,
                "--mode",
                "latency",
                "--tasks",
                count,
            ]) {
                // apalis pushes each job once the previous one is done: back to back
                let woken = ours("wake-up latency, back to back");
                let f = |k: &str| v[k].as_f64().unwrap_or(0.0);
                out.push(Row {
                    backend: t.backend.into(),
                    scenario: "vs apalis + NOTIFY: one task at a time, back to back".into(),
                    lat: woken.and_then(|r| r.lat),
                    base_lat: Some([f("p50_ms"), f("p95_ms"), f("p99_ms"), f("max_ms")]),
                    note:
                        "backstop: commit in A → start in B, woken by NOTIFY, back to back; “raw” latency is apalis-postgres 1.0 with pubsub: commit → handler start, each push once the previous job is done"
                            .into(),
                    peer: Some("apalis 1.0".into()),
                    ..Row::default()
                });
            }
        }
        "sqlite" => {
            let peer_n = n.min(20_000);
            let file = peers::LiteFile::new("apalis");
            let path = file.0.clone();
            let pn = peer_n.to_string();
            let v = run_peer(&[
                "--backend",
                "sqlite",
                "--url",
                &path,
                "--mode",
                "drain",
                "--tasks",
                &pn,
            ]);
            drop(file);
            if let Some(v) = v {
                let drain1 = ours(&format!("drain {n}, 1 engine"));
                let f = |k: &str| v[k].as_f64().unwrap_or(0.0);
                out.push(Row {
                    backend: t.backend.into(),
                    scenario: format!("vs apalis: drain ({peer_n} for apalis)"),
                    tps: drain1.as_ref().and_then(|r| r.tps),
                    base_tps: v["tps"].as_f64(),
                    rss_mb: drain1.as_ref().map_or(0.0, |r| r.rss_mb),
                    cpu_s: drain1.as_ref().map_or(0.0, |r| r.cpu_s),
                    note: "“raw” column is apalis-sqlite 1.0, default config; backstop: 1 engine"
                        .into(),
                    peer: Some("apalis 1.0".into()),
                    cost: Some(sys::Cost {
                        tasks: n,
                        peer_tasks: peer_n,
                        peer_rss_mb: f("rss_mb"),
                        peer_cpu_s: f("cpu_s"),
                        ..sys::Cost::default()
                    }),
                    ..Row::default()
                });
            }
        }
        _ => {}
    }
    out
}

/// Run a throughput scenario `rounds` times (each round measures backstop, then the raw
/// SQL) and keep the round with the median ratio; the note lists every round's ratio.
/// Peak RSS is the first round's.
async fn repeated<F, Fut>(rounds: usize, mut once: F) -> Row
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Row>,
{
    let mut all = Vec::new();
    for _ in 0..rounds {
        all.push(once().await);
    }
    let ratio = |r: &Row| match (r.tps, r.base_tps) {
        (Some(a), Some(b)) if b > 0.0 => a / b,
        _ => 0.0,
    };
    let ratios: Vec<String> = all.iter().map(|r| format!("{:.2}", ratio(r))).collect();
    // Peak RSS of the first round: later rounds also hold what the raw SQL's connections
    // and buffers left in this process (glibc keeps freed memory).
    let rss = all.first().map_or(0.0, |r| r.rss_mb);
    all.sort_by(|a, b| ratio(a).total_cmp(&ratio(b)));
    let mut median = all.swap_remove(all.len() / 2);
    median.rss_mb = rss;
    if rounds > 1 {
        median.note = format!(
            "{}; median of {rounds} rounds (ratios {})",
            median.note,
            ratios.join(", ")
        );
    }
    median
}

fn report(r: Row) -> Row {
    eprintln!("   {r:?}");
    r
}

/// `url` with only the first of the hosts it names (`mysql://u:p@h1:1,h2:2/db` →
/// `mysql://u:p@h1:1/db`).
fn first_host(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        return url.to_owned();
    };
    let end = rest.find(['/', '?']).unwrap_or(rest.len());
    let (authority, tail) = rest.split_at(end);
    let (user, hosts) = match authority.rsplit_once('@') {
        Some((u, h)) => (format!("{u}@"), h),
        None => (String::new(), authority),
    };
    let first = hosts.split(',').next().unwrap_or(hosts);
    format!("{scheme}://{user}{first}{tail}")
}

#[tokio::main(flavor = "multi_thread")]
async fn main() {
    let a = args();
    let mut rows = Vec::new();
    let mut servers = Vec::new();
    for b in &a.backends {
        let Some(t) = target(b).await else {
            eprintln!(
                "skipping {b}: BACKSTOP_BENCH_{}_URL is not set",
                b.to_uppercase()
            );
            continue;
        };
        eprintln!("== {} ({})", t.backend, t.server);
        servers.push(format!("{}: {}", t.backend, t.server));
        // the tables, as this version of the store makes them
        t.raw.drop_tables().await;
        t.store(1).await.migrate().await.expect("migrate");
        let (ra_total, idle, small, large, rounds, backlog) = if a.smoke {
            (64, 10, 100, 1000, 5, 200)
        } else {
            (8000, 300, 1000, 1_000_000, 200, 200_000)
        };
        if a.runs("run-ahead") {
            for producers in [1, 16] {
                for claim_in_tx in [false, true] {
                    let r = repeated(a.repeat, || run_ahead(&t, producers, ra_total, claim_in_tx))
                        .await;
                    rows.push(report(r));
                }
            }
        }
        if a.runs("enqueue") {
            let total = if a.smoke { 2000 } else { a.drain_tasks };
            for producers in [1, 4] {
                let r = repeated(a.repeat, || enqueue_batches(&t, producers, total, 1000)).await;
                rows.push(report(r));
            }
        }
        if a.runs("drain") {
            for &engines in &a.engines {
                let r = repeated(a.repeat, || drain(&t, engines, a.drain_tasks, None)).await;
                rows.push(report(r));
            }
        }
        if a.runs("fastest") {
            for &engines in &a.engines {
                let r = repeated(a.repeat, || drain_fastest(&t, engines, a.drain_tasks)).await;
                rows.push(report(r));
            }
        }
        if a.runs("limit") {
            for spread in [false, true] {
                for (n, ms) in [(20_000, 2), (10_000, 5), (5_000, 20)] {
                    let n = if a.smoke { 200 } else { n };
                    let work = limit::Work {
                        mean: Duration::from_millis(ms),
                        spread,
                    };
                    let r = repeated(a.repeat, || limit::limited_drain(&t, n, work)).await;
                    rows.push(report(r));
                }
            }
        }
        if a.runs("ordered") {
            let keys = if a.smoke { 20 } else { 1000 };
            for &engines in &a.engines {
                let r = repeated(a.repeat, || drain(&t, engines, a.drain_tasks, Some(keys))).await;
                rows.push(report(r));
            }
        }
        if a.runs("idle") {
            rows.push(report(idle_latency(&t, idle).await));
        }
        if a.runs("scale") {
            rows.push(report(scale(&t, small, large, rounds).await));
        }
        if a.runs("counts") {
            let (pending, succeeded) = if a.smoke {
                (100, 2000)
            } else {
                (10_000, 10_000_000)
            };
            rows.extend(
                counts(&t, pending, succeeded, 50)
                    .await
                    .into_iter()
                    .map(report),
            );
        }
        if a.runs("partitions") {
            let keys: &[usize] = if a.smoke { &[60] } else { &[60, 1000, 5000] };
            for &k in keys {
                rows.push(report(partitions::partitioned_claim(&t, k, rounds).await));
            }
        }
        if a.runs("backlogs") {
            rows.extend(backlogs(&t, backlog, rounds).await.into_iter().map(report));
        }
        if a.runs("idle-load") {
            let (poll, window) = if a.smoke {
                (Duration::from_millis(100), Duration::from_secs(1))
            } else {
                (Duration::from_secs(1), Duration::from_secs(10))
            };
            // with paused types: a pause adds no statement to a poll
            for (types, paused, instances) in [
                (1, 0, 1),
                (1, 1, 1),
                (50, 0, 1),
                (50, 0, 4),
                (50, 25, 4),
                (50, 50, 4),
            ] {
                let r = idle::idle_load(&t, types, paused, instances, poll, window).await;
                rows.push(report(r));
            }
        }
        if a.runs("isolation") {
            let (own, backlog) = if a.smoke {
                (200, 1000)
            } else {
                (10_000, 1_000_000)
            };
            rows.extend(
                isolation(&t, own, backlog, rounds)
                    .await
                    .into_iter()
                    .map(report),
            );
        }
        if a.runs("saga") {
            let (n, one) = if a.smoke { (50, 10) } else { (5000, 300) };
            rows.push(report(saga::saga_vs_chain(&t, n, one, a.repeat).await));
        }
        let redis = std::env::var("BACKSTOP_BENCH_REDIS_URL")
            .ok()
            .filter(|u| !u.is_empty());
        let (wake, relayed, consumed) = if a.smoke {
            (10, 200, 200)
        } else {
            (300, 20_000, 5_000)
        };
        if a.runs("wakeup") {
            for back_to_back in [false, true] {
                if let Some(r) =
                    cross::wakeup_latency(&t, redis.as_deref(), wake, back_to_back).await
                {
                    rows.push(report(r));
                }
            }
        }
        match &redis {
            Some(url) => {
                if a.runs("relay") {
                    rows.push(report(cross::relay_throughput(&t, url, relayed).await));
                }
                if a.runs("consume") {
                    rows.push(report(cross::consumer_throughput(&t, url, consumed).await));
                }
            }
            None if a.runs("relay") || a.runs("consume") => {
                eprintln!("   relay and consume: BACKSTOP_BENCH_REDIS_URL is not set")
            }
            None => {}
        }
        if a.peer {
            if a.runs("apalis") {
                rows.extend(peer(&t, &rows, a.drain_tasks).await.into_iter().map(report));
            }
            if matches!(t.backend, "postgres" | "sqlite") && a.runs("peers") {
                let sizes = if a.smoke {
                    vec![200]
                } else {
                    vec![10_000, a.drain_tasks]
                };
                let best = peers::at_best(&t, &rows, &sizes, a.repeat).await;
                rows.extend(best.into_iter().map(report));
            }
        }
        write_results(&a, &rows, &servers);
    }
    println!("{}", write_results(&a, &rows, &servers));
}

/// Write the results so far (after each backend, so that a failure later in the run
/// keeps what was measured); the markdown.
fn write_results(a: &Args, rows: &[Row], servers: &[String]) -> String {
    let md = sys::markdown(rows, a.smoke, a.drain_tasks, servers) + &peer_report::markdown(rows);
    let json = sys::json(rows, a.smoke, a.drain_tasks, servers);
    std::fs::create_dir_all(&a.out).expect("out dir");
    let name = match (a.smoke, a.durable) {
        (true, _) => "smoke",
        (false, true) => "durable",
        (false, false) => "latest",
    };
    std::fs::write(a.out.join(format!("{name}.md")), &md).expect("write md");
    std::fs::write(a.out.join(format!("{name}.json")), json).expect("write json");
    let title = format!(
        "backstop beside its peers: {name} run, commit {}, {}",
        sys::commit(),
        sys::machine_line()
    );
    if let Some(svg) = peer_report::svg(rows, &title) {
        std::fs::write(a.out.join(format!("{name}-peers.svg")), svg).expect("write svg");
    }
    md
}
