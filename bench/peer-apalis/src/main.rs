//! apalis 1.0 doing the benchmark's work on the same database, for the peer rows.
//!
//! `peer-apalis --backend postgres|sqlite --url URL --mode drain|latency --tasks N [--tuned]
//! [--workers W]` prints one JSON object: tasks/s for a drain, latency percentiles (ms) for
//! latency. A PostgreSQL drain runs W workers (default 1) on one pool and counts a task
//! when the database records it done. A drain also reports this process's peak RSS and CPU
//! seconds over it (`rss_mb`, `cpu_s`; on PostgreSQL the server's, `server_cpu_s`), by the
//! bench's own meter (`bench/src/meter.rs`).

#[path = "../../src/meter.rs"]
mod meter;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use apalis::prelude::*;
use futures::stream;

struct Args {
    backend: String,
    url: String,
    mode: String,
    tasks: usize,
    tuned: bool,
    workers: usize,
}

fn args() -> Args {
    let mut a = Args {
        backend: "postgres".into(),
        url: String::new(),
        mode: "drain".into(),
        tasks: 1000,
        tuned: false,
        workers: 1,
    };
    let mut it = std::env::args().skip(1);
    while let Some(x) = it.next() {
        match x.as_str() {
            "--backend" => a.backend = it.next().expect("value"),
            "--url" => a.url = it.next().expect("value"),
            "--mode" => a.mode = it.next().expect("value"),
            "--tasks" => a.tasks = it.next().expect("value").parse().expect("number"),
            "--tuned" => a.tuned = true,
            "--workers" => a.workers = it.next().expect("value").parse().expect("number"),
            other => panic!("unknown argument {other}"),
        }
    }
    a
}

static DONE: AtomicUsize = AtomicUsize::new(0);
static TARGET: AtomicUsize = AtomicUsize::new(usize::MAX);

async fn count(_n: u64, wrk: WorkerContext) -> Result<(), BoxDynError> {
    if DONE.fetch_add(1, Ordering::SeqCst) + 1 >= TARGET.load(Ordering::SeqCst) {
        let _ = wrk.stop();
    }
    Ok(())
}

async fn count_only(_n: u64) -> Result<(), BoxDynError> {
    DONE.fetch_add(1, Ordering::SeqCst);
    Ok(())
}

type Starts = Arc<Mutex<Vec<(u64, Instant)>>>;
const HANDLER_BIT: u64 = 1 << 62;

#[tokio::main]
async fn main() {
    let a = args();
    let out = match (a.backend.as_str(), a.mode.as_str()) {
        ("postgres", "drain") => pg_drain(&a).await,
        ("postgres", "latency") => pg_latency(&a).await,
        ("sqlite", "drain") => sqlite_drain(&a).await,
        other => panic!("unsupported {other:?}"),
    };
    println!("{out}");
}

fn pg_config(a: &Args, queue: &str) -> apalis_postgres::Config {
    let c = apalis_postgres::Config::default().queue(queue);
    if a.tuned {
        c.batch_size(100).lock_tasks(false)
    } else {
        c
    }
}

async fn pg_drain(a: &Args) -> serde_json::Value {
    use apalis_postgres::PostgresStorage;
    let pool = sqlx::postgres::PgPoolOptions::new()
        .max_connections(16)
        .connect(&a.url)
        .await
        .expect("connect");
    PostgresStorage::setup(&pool).await.expect("setup");
    let queue = format!("bench-{}", std::process::id());
    let mut backend = PostgresStorage::new(&pool).with_config(pg_config(a, &queue));
    let mut items = stream::iter(0..a.tasks as u64);
    backend.push_stream(&mut items).await.expect("push");
    sqlx::query("ANALYZE apalis.jobs")
        .execute(&pool)
        .await
        .expect("analyze");
    let server0 = meter::server_cpu("postgres");
    let m = meter::Meter::start();
    let started = Instant::now();
    for w in 0..a.workers {
        let worker = WorkerBuilder::new(format!("peer-{}-{w}", std::process::id()))
            .backend(PostgresStorage::new(&pool).with_config(pg_config(a, &queue)))
            .concurrency(if a.tuned { 64 } else { 4 })
            .parallelize(tokio::spawn)
            .build(count_only);
        tokio::spawn(worker.run());
    }
    // done when the database records every task done (not when the handlers ran)
    let mut last = Instant::now();
    loop {
        let near = DONE.load(Ordering::SeqCst) >= a.tasks;
        if near || last.elapsed() > Duration::from_millis(200) {
            last = Instant::now();
            let (done,): (i64,) = sqlx::query_as(
                "SELECT count(*) FROM apalis.jobs WHERE job_type = $1 AND status = 'Done'",
            )
            .bind(&queue)
            .fetch_one(&pool)
            .await
            .expect("count");
            if done as usize >= a.tasks {
                break;
            }
        }
        tokio::time::sleep(Duration::from_millis(if near { 2 } else { 10 })).await;
    }
    let elapsed = started.elapsed();
    let (rss_mb, cpu_s) = m.stop();
    let out = serde_json::json!({
        "tps": a.tasks as f64 / elapsed.as_secs_f64(),
        "rss_mb": rss_mb, "cpu_s": cpu_s,
        "server_cpu_s": meter::server_cpu("postgres") - server0,
    });
    println!("{out}");
    // the workers run on: leave without waiting for them
    std::process::exit(0)
}

async fn pg_latency(a: &Args) -> serde_json::Value {
    use apalis_postgres::PostgresStorage;
    let pool = sqlx::postgres::PgPoolOptions::new()
        .max_connections(8)
        .connect(&a.url)
        .await
        .expect("connect");
    PostgresStorage::setup(&pool).await.expect("setup");
    let queue = format!("lat-{}", std::process::id());
    let backend = PostgresStorage::new(&pool)
        .with_config(pg_config(a, &queue))
        .with_pubsub();
    let mut sink = PostgresStorage::<u64>::new(&pool).with_config(pg_config(a, &queue));
    let starts: Starts = Arc::default();
    let hist = Arc::new(Mutex::new(
        hdrhistogram::Histogram::<u64>::new_with_bounds(1, 60_000_000, 3).expect("hist"),
    ));
    let (s2, h2) = (Arc::clone(&starts), Arc::clone(&hist));
    let n = a.tasks;
    let handler = move |id: u64, wrk: WorkerContext| {
        let (starts, hist) = (Arc::clone(&s2), Arc::clone(&h2));
        async move {
            // handler start, matched after the run with when the push (commit) returned
            starts
                .lock()
                .expect("lock")
                .push((id | HANDLER_BIT, Instant::now()));
            let _ = &hist;
            if DONE.fetch_add(1, Ordering::SeqCst) + 1 >= n {
                let _ = wrk.stop();
            }
            Ok::<_, BoxDynError>(())
        }
    };
    let worker = WorkerBuilder::new(format!("lat-{}", std::process::id()))
        .backend(backend)
        .parallelize(tokio::spawn)
        .build(handler);
    // The pusher runs beside the worker (which runs on this task until it stops itself).
    let pusher = {
        let starts = Arc::clone(&starts);
        tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(500)).await;
            for i in 0..n as u64 {
                let before = DONE.load(Ordering::SeqCst);
                sink.push(i).await.expect("push");
                starts.lock().expect("lock").push((i, Instant::now()));
                let deadline = Instant::now() + Duration::from_secs(3);
                while DONE.load(Ordering::SeqCst) == before && Instant::now() < deadline {
                    tokio::time::sleep(Duration::from_micros(100)).await;
                }
            }
        })
    };
    worker.run().await.expect("worker");
    let _ = pusher.await;
    {
        let all = starts.lock().expect("lock");
        let mut h = hist.lock().expect("lock");
        for &(id, committed) in all.iter().filter(|(id, _)| id & HANDLER_BIT == 0) {
            if let Some(&(_, began)) = all.iter().find(|(x, _)| *x == id | HANDLER_BIT) {
                let us = began
                    .saturating_duration_since(committed)
                    .as_micros()
                    .max(1) as u64;
                let _ = h.record(us);
            }
        }
    }
    let h = hist.lock().expect("lock");
    let ms = |q: f64| h.value_at_quantile(q) as f64 / 1000.0;
    serde_json::json!({"p50_ms": ms(0.5), "p95_ms": ms(0.95), "p99_ms": ms(0.99), "max_ms": h.max() as f64 / 1000.0})
}

async fn sqlite_drain(a: &Args) -> serde_json::Value {
    use apalis_sqlite::SqliteStorage;
    let opts: sqlx::sqlite::SqliteConnectOptions =
        format!("sqlite://{}?mode=rwc", a.url).parse().expect("url");
    let pool = sqlx::sqlite::SqlitePoolOptions::new()
        .max_connections(4)
        .connect_with(opts.journal_mode(sqlx::sqlite::SqliteJournalMode::Wal))
        .await
        .expect("connect");
    SqliteStorage::setup(&pool).await.expect("setup");
    let mut backend = SqliteStorage::new(&pool);
    if a.tuned {
        backend = backend.with_config(apalis_sqlite::Config::default().batch_size(100));
    }
    let mut items = stream::iter(0..a.tasks as u64);
    backend.push_stream(&mut items).await.expect("push");
    TARGET.store(a.tasks, Ordering::SeqCst);
    let m = meter::Meter::start();
    let started = Instant::now();
    let worker = WorkerBuilder::new(format!("peer-{}", std::process::id()))
        .backend(backend)
        .parallelize(tokio::spawn)
        .build(count);
    worker.run().await.expect("worker");
    let elapsed = started.elapsed();
    let (rss_mb, cpu_s) = m.stop();
    serde_json::json!({
        "tps": a.tasks as f64 / elapsed.as_secs_f64(), "rss_mb": rss_mb, "cpu_s": cpu_s,
    })
}
