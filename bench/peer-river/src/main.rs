//! River's Rust client (riverqueue 0.5) doing the benchmark's work on the same database,
//! for the peer rows.
//!
//! `peer-river --backend postgres|sqlite --url URL --mode drain|insert|latency
//! [--tasks N] [--clients C] [--workers W] [--cooldown-ms M] [--batch B] [--gap-ms G]
//! [--pool P] [--start cold|warm]`
//! prints one JSON object:
//! - `drain`: N no-op jobs inserted first (`insert_many`), then C clients of W workers
//!   each (a pool of P connections, default 40) with a fetch cooldown of M ms start,
//!   and the clock runs until the database (with `--start warm` the clients start first, on an
//!   empty table; the jobs are inserted in one transaction and the clock starts at its
//!   commit, as the bench measures graphile-worker)
//!   records every job `completed`: `{"tps": …, "rss_mb": …, "cpu_s": …,
//!   "server_cpu_s": …}` (this process's peak RSS and CPU seconds over the drain, and the
//!   PostgreSQL server's CPU seconds: the bench's own meter, `bench/src/meter.rs`);
//! - `insert`: N jobs by `insert_many` in batches of B, one transaction each:
//!   `{"tps": …}`;
//! - `latency`: N jobs one at a time, inserted by one client and worked by another
//!   (insert notifications, fetch cooldown M ms), from the insert's commit to the
//!   worker's start; G ms between jobs, or with G = 0 each insert right after the
//!   previous start: `{"p50_ms": …, "p95_ms": …, "p99_ms": …, "max_ms": …}`.

#[path = "../../src/meter.rs"]
mod meter;

use std::str::FromStr;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use riverqueue::migrate::{PostgresMigrator, SqliteMigrator};
use riverqueue::sqlx::postgres::PgPoolOptions;
use riverqueue::sqlx::sqlite::{SqliteConnectOptions, SqliteJournalMode, SqlitePoolOptions};
use riverqueue::sqlx::{self, PgPool, SqlitePool};
use riverqueue::{BoxError, Client, Job, JobArgs, QueueConfig, WorkContext, WorkOutcome, Workers};
use serde::{Deserialize, Serialize};

struct Args {
    backend: String,
    url: String,
    mode: String,
    tasks: usize,
    clients: usize,
    workers: usize,
    cooldown: Duration,
    batch: usize,
    gap: Duration,
    /// Connections in each working client's pool.
    pool: u32,
    /// A warm drain: the clients start on an empty table, the jobs are inserted in one
    /// transaction, and the clock starts at its commit.
    warm: bool,
}

fn args() -> Args {
    let mut a = Args {
        backend: "postgres".into(),
        url: String::new(),
        mode: "drain".into(),
        tasks: 1000,
        clients: 1,
        workers: 100,
        cooldown: Duration::from_millis(1),
        batch: 1000,
        gap: Duration::ZERO,
        pool: 40,
        warm: false,
    };
    let mut it = std::env::args().skip(1);
    let value = |it: &mut std::iter::Skip<std::env::Args>| it.next().expect("a value");
    while let Some(x) = it.next() {
        match x.as_str() {
            "--backend" => a.backend = value(&mut it),
            "--url" => a.url = value(&mut it),
            "--mode" => a.mode = value(&mut it),
            "--tasks" => a.tasks = value(&mut it).parse().expect("number"),
            "--clients" => a.clients = value(&mut it).parse().expect("number"),
            "--workers" => a.workers = value(&mut it).parse().expect("number"),
            "--cooldown-ms" => {
                a.cooldown = Duration::from_millis(value(&mut it).parse().expect("number"))
            }
            "--batch" => a.batch = value(&mut it).parse().expect("number"),
            "--gap-ms" => a.gap = Duration::from_millis(value(&mut it).parse().expect("number")),
            "--pool" => a.pool = value(&mut it).parse().expect("number"),
            "--start" => a.warm = value(&mut it) == "warm",
            other => panic!("unknown argument {other}"),
        }
    }
    a
}

/// The no-op job of the drain and the insert.
#[derive(Clone, Debug, Deserialize, JobArgs, Serialize)]
#[river(kind = "bench_count")]
struct Count {
    i: u64,
}

async fn count(_c: WorkContext, _job: Job<Count>) -> Result<WorkOutcome, BoxError> {
    Ok(WorkOutcome::Complete)
}

/// The latency job: the worker records when it started.
#[derive(Clone, Debug, Deserialize, JobArgs, Serialize)]
#[river(kind = "bench_ping")]
struct Ping {
    i: u64,
}

static STARTED: OnceLock<tokio::sync::mpsc::UnboundedSender<(u64, Instant)>> = OnceLock::new();

async fn ping(_c: WorkContext, job: Job<Ping>) -> Result<WorkOutcome, BoxError> {
    if let Some(tx) = STARTED.get() {
        let _ = tx.send((job.args.i, Instant::now()));
    }
    Ok(WorkOutcome::Complete)
}

/// One database, either backend: River's clients take the pool itself.
#[derive(Clone)]
enum Db {
    Pg(PgPool),
    Lite(SqlitePool),
}

impl Db {
    async fn open(a: &Args, connections: u32) -> Db {
        match a.backend.as_str() {
            "postgres" => Db::Pg(
                PgPoolOptions::new()
                    .max_connections(connections)
                    .connect(&a.url)
                    .await
                    .expect("connect"),
            ),
            "sqlite" => {
                // as River's SQLite example: WAL and a busy timeout
                let options = SqliteConnectOptions::from_str(&a.url)
                    .expect("a SQLite URL")
                    .create_if_missing(true)
                    .journal_mode(SqliteJournalMode::Wal)
                    .busy_timeout(Duration::from_secs(5));
                Db::Lite(
                    SqlitePoolOptions::new()
                        .max_connections(connections)
                        .connect_with(options)
                        .await
                        .expect("open"),
                )
            }
            other => panic!("unsupported backend {other}"),
        }
    }

    async fn migrate_and_clear(&self) {
        match self {
            Db::Pg(p) => {
                PostgresMigrator::new(p.clone())
                    .migrate_up()
                    .await
                    .expect("migrate");
                sqlx::query("TRUNCATE river_job")
                    .execute(p)
                    .await
                    .expect("clear");
                sqlx::query("VACUUM ANALYZE river_job")
                    .execute(p)
                    .await
                    .expect("vacuum");
            }
            Db::Lite(p) => {
                SqliteMigrator::new(p.clone())
                    .migrate_up()
                    .await
                    .expect("migrate");
                sqlx::query("DELETE FROM river_job")
                    .execute(p)
                    .await
                    .expect("clear");
            }
        }
    }

    async fn completed(&self) -> i64 {
        let q = "SELECT count(*) FROM river_job WHERE state = 'completed'";
        match self {
            Db::Pg(p) => sqlx::query_scalar(q).fetch_one(p).await.expect("count"),
            Db::Lite(p) => sqlx::query_scalar(q).fetch_one(p).await.expect("count"),
        }
    }

    fn client(&self, workers: Option<Workers>, max: usize, cooldown: Duration) -> Client {
        let b = match self {
            Db::Pg(p) => Client::builder(p.clone()),
            Db::Lite(p) => Client::builder(p.clone()),
        };
        let b = b.fetch_cooldown(cooldown);
        let b = match workers {
            Some(w) => b.workers(w).queue(
                "default",
                QueueConfig::new(max).with_fetch_poll_interval(Duration::from_secs(1)),
            ),
            None => b,
        };
        b.build().expect("a client")
    }
}

fn count_workers() -> Workers {
    let mut w = Workers::new();
    w.add_fn(count).expect("register");
    w
}

async fn insert_all(client: &Client, n: usize, batch: usize) {
    let mut i = 0;
    while i < n {
        let to = (i + batch).min(n);
        client
            .insert_many((i..to).map(|i| Count { i: i as u64 }))
            .await
            .expect("insert_many");
        i = to;
    }
}

/// `n` jobs by `insert_many` in batches of `batch`, all in one transaction.
async fn insert_in_one_tx(db: &Db, client: &Client, n: usize, batch: usize) {
    macro_rules! in_tx {
        ($pool:expr) => {{
            let mut tx = $pool.begin().await.expect("begin");
            let mut i = 0;
            while i < n {
                let to = (i + batch).min(n);
                client
                    .insert_many((i..to).map(|i| Count { i: i as u64 }))
                    .tx(&mut tx)
                    .await
                    .expect("insert_many");
                i = to;
            }
            tx.commit().await.expect("commit");
        }};
    }
    match db {
        Db::Pg(p) => in_tx!(p),
        Db::Lite(p) => in_tx!(p),
    }
}

async fn drain(a: &Args) -> serde_json::Value {
    let db = Db::open(a, 4).await;
    db.migrate_and_clear().await;
    let inserter = db.client(None, 0, a.cooldown);
    let batch = 10_000.min(a.batch.max(1000));
    if !a.warm {
        insert_all(&inserter, a.tasks, batch).await;
    }
    let mut runs = Vec::new();
    // each client a pool of its own, as separate processes would have
    let mut dbs = Vec::new();
    for _ in 0..a.clients {
        dbs.push(Db::open(a, a.pool).await);
    }
    let server = || match a.backend.as_str() {
        "postgres" => meter::server_cpu("postgres"),
        _ => 0.0,
    };
    let mut clock = (!a.warm).then(|| (server(), meter::Meter::start(), Instant::now()));
    for d in &dbs {
        let c = d.client(Some(count_workers()), a.workers, a.cooldown);
        runs.push(c.start().expect("start"));
    }
    let (server0, m, started) = match clock.take() {
        Some(clock) => clock,
        None => {
            for r in &mut runs {
                r.wait_ready().await.expect("ready");
            }
            insert_in_one_tx(&db, &inserter, a.tasks, batch).await;
            (server(), meter::Meter::start(), Instant::now())
        }
    };
    loop {
        if db.completed().await >= a.tasks as i64 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    let elapsed = started.elapsed();
    let (rss_mb, cpu_s) = m.stop();
    let server_cpu_s = server() - server0;
    for mut r in runs {
        let _ = r.stop().await;
    }
    serde_json::json!({
        "tps": a.tasks as f64 / elapsed.as_secs_f64(),
        "rss_mb": rss_mb, "cpu_s": cpu_s, "server_cpu_s": server_cpu_s,
    })
}

async fn insert(a: &Args) -> serde_json::Value {
    let db = Db::open(a, 4).await;
    db.migrate_and_clear().await;
    let client = db.client(None, 0, a.cooldown);
    let started = Instant::now();
    insert_all(&client, a.tasks, a.batch).await;
    serde_json::json!({ "tps": a.tasks as f64 / started.elapsed().as_secs_f64() })
}

async fn latency(a: &Args) -> serde_json::Value {
    let db = Db::open(a, 4).await;
    db.migrate_and_clear().await;
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    STARTED.set(tx).expect("once");
    let mut w = Workers::new();
    w.add_fn(ping).expect("register");
    let worker_db = Db::open(a, 10).await;
    let worker = worker_db.client(Some(w), 10, a.cooldown);
    let mut run = worker.start().expect("start");
    run.wait_ready().await.expect("ready");
    let inserter = db.client(None, 0, a.cooldown);
    let hist = Arc::new(Mutex::new(
        hdrhistogram::Histogram::<u64>::new_with_bounds(1, 60_000_000, 3).expect("histogram"),
    ));
    // a warm-up job, not counted
    for i in 0..=a.tasks as u64 {
        inserter.insert(Ping { i }).await.expect("insert");
        let committed = Instant::now();
        let (j, at) = tokio::time::timeout(Duration::from_secs(30), rx.recv())
            .await
            .expect("the job started within 30 s")
            .expect("a start");
        assert_eq!(j, i, "one job at a time");
        if i > 0 {
            let us = at.saturating_duration_since(committed).as_micros() as u64;
            hist.lock()
                .expect("histogram")
                .record(us.max(1))
                .expect("record");
        }
        if !a.gap.is_zero() {
            tokio::time::sleep(a.gap).await;
        }
    }
    let _ = run.stop().await;
    let h = hist.lock().expect("histogram");
    let ms = |q: f64| h.value_at_quantile(q) as f64 / 1000.0;
    serde_json::json!({
        "p50_ms": ms(0.5), "p95_ms": ms(0.95), "p99_ms": ms(0.99), "max_ms": h.max() as f64 / 1000.0
    })
}

#[tokio::main]
async fn main() {
    let a = args();
    let out = match a.mode.as_str() {
        "drain" => drain(&a).await,
        "insert" => insert(&a).await,
        "latency" => latency(&a).await,
        other => panic!("unsupported mode {other}"),
    };
    println!("{out}");
}
