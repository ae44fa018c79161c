//! The results: one row per measurement, machine facts, and the report (markdown, JSON,
//! and the peers' table and chart).

/// One line of the results.
#[derive(Debug, Clone, Default)]
pub struct Row {
    pub backend: String,
    pub scenario: String,
    /// backstop tasks/s.
    pub tps: Option<f64>,
    /// raw SQL tasks/s for the same work.
    pub base_tps: Option<f64>,
    /// p50, p95, p99, max in ms.
    pub lat: Option<[f64; 4]>,
    /// the same for the raw SQL.
    pub base_lat: Option<[f64; 4]>,
    /// peak RSS of this process during the backstop run, MB.
    pub rss_mb: f64,
    /// CPU seconds of this process during the backstop run.
    pub cpu_s: f64,
    pub note: String,
    /// A peer library in the "raw" columns (its name and version), not raw SQL.
    pub peer: Option<String>,
    /// What the peer's side costs, and the database server's CPU on each side, for the
    /// peers' table: filled by the peer drains only.
    pub cost: Option<Cost>,
}

/// The cost of the two sides of a drain beside a peer (backstop's RSS and CPU are the
/// row's own).
#[derive(Debug, Clone, Default)]
pub struct Cost {
    /// The tasks of backstop's drain.
    pub tasks: usize,
    /// The database server's CPU seconds during backstop's drain (0 for SQLite).
    pub server_cpu_s: f64,
    /// The tasks of the peer's drain.
    pub peer_tasks: usize,
    /// The peer's process(es): peak RSS MB (summed over its processes) and CPU seconds.
    pub peer_rss_mb: f64,
    pub peer_cpu_s: f64,
    /// The database server's CPU seconds during the peer's drain.
    pub peer_server_cpu_s: f64,
}

pub use crate::meter::Meter;

/// The commit measured: `git rev-parse --short HEAD`, with "+ changes" when the work tree
/// differs from it outside the results; "unknown" outside a git checkout.
pub fn commit() -> String {
    let git = |args: &[&str]| std::process::Command::new("git").args(args).output().ok();
    let Some(head) = git(&["rev-parse", "--short", "HEAD"]).filter(|o| o.status.success()) else {
        return "unknown".into();
    };
    let head = String::from_utf8_lossy(&head.stdout).trim().to_owned();
    let changed = git(&["diff", "--quiet", "HEAD", "--", ".", ":!bench/results"])
        .is_some_and(|o| !o.status.success());
    if changed {
        format!("{head} + changes")
    } else {
        head
    }
}

fn machine() -> (String, usize, f64) {
    let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
    let model = cpuinfo
        .lines()
        .find(|l| l.starts_with("model name"))
        .and_then(|l| l.split(':').nth(1))
        .map(|m| m.trim().to_owned())
        .unwrap_or_else(|| "unknown CPU".into());
    let cores = std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(1);
    let mem = std::fs::read_to_string("/proc/meminfo")
        .unwrap_or_default()
        .lines()
        .find(|l| l.starts_with("MemTotal:"))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|kb| kb.parse::<f64>().ok())
        .map(|kb| kb / 1024.0 / 1024.0)
        .unwrap_or(0.0);
    (model, cores, mem)
}

fn num(v: Option<f64>) -> String {
    v.map(|x| format!("{x:.0}")).unwrap_or_else(|| "–".into())
}

/// The machine in a few words: "2 cores of Intel(R) Xeon(R) …, 24 GiB".
pub fn machine_line() -> String {
    let (model, cores, mem) = machine();
    format!("{cores} cores of {model}, {mem:.0} GiB")
}

pub fn markdown(rows: &[Row], smoke: bool, drain: usize, servers: &[String]) -> String {
    let (model, cores, mem) = machine();
    let mut s = String::new();
    s.push_str(&format!(
        "Machine: {model}, {cores} cores, {mem:.0} GiB; database on the same machine. {}\n\n",
        if smoke {
            "**SMOKE RUN (tiny sizes; numbers mean nothing)**"
        } else {
            ""
        }
    ));
    for sv in servers {
        s.push_str(&format!("- {sv}\n"));
    }
    s.push_str(&format!(
        "- drain size {drain}; backstop {} at commit {}\n\n",
        env!("CARGO_PKG_VERSION"),
        commit()
    ));
    s.push_str("| backend | scenario | backstop tasks/s | raw SQL tasks/s | ratio | p50 / p99 ms | raw p50 / p99 ms | peak RSS MB | CPU s | notes |\n");
    s.push_str("|---|---|---:|---:|---:|---:|---:|---:|---:|---|\n");
    for r in rows {
        let ratio = match (r.tps, r.base_tps) {
            (Some(a), Some(b)) if b > 0.0 => format!("{:.2}×", a / b),
            _ => match (r.lat, r.base_lat) {
                (Some(a), Some(b)) if b[0] > 0.0 => format!("{:.2}× (p50)", a[0] / b[0]),
                _ => "–".into(),
            },
        };
        let l = |v: Option<[f64; 4]>| {
            v.map(|x| {
                if x[2] > 0.0 {
                    format!("{:.3} / {:.3}", x[0], x[2])
                } else {
                    format!("{:.3}", x[0])
                }
            })
            .unwrap_or_else(|| "–".into())
        };
        s.push_str(&format!(
            "| {} | {} | {} | {} | {} | {} | {} | {:.0} | {:.1} | {} |\n",
            r.backend,
            r.scenario,
            num(r.tps),
            num(r.base_tps),
            ratio,
            l(r.lat),
            l(r.base_lat),
            r.rss_mb,
            r.cpu_s,
            r.note
        ));
    }
    s
}

pub fn json(rows: &[Row], smoke: bool, drain: usize, servers: &[String]) -> String {
    let (model, cores, mem) = machine();
    let lat = |v: Option<[f64; 4]>| {
        v.map(
            |x| serde_json::json!({"p50_ms": x[0], "p95_ms": x[1], "p99_ms": x[2], "max_ms": x[3]}),
        )
    };
    let out = serde_json::json!({
        "machine": {"cpu": model, "cores": cores, "memory_gib": mem},
        "servers": servers,
        "settings": {"smoke": smoke, "drain_tasks": drain, "backstop": env!("CARGO_PKG_VERSION"), "commit": commit()},
        "results": rows.iter().map(|r| serde_json::json!({
            "backend": r.backend,
            "scenario": r.scenario,
            "tasks_per_s": r.tps,
            "raw_tasks_per_s": r.base_tps,
            "ratio": match (r.tps, r.base_tps) { (Some(a), Some(b)) if b > 0.0 => Some(a / b), _ => None },
            "latency": lat(r.lat),
            "raw_latency": lat(r.base_lat),
            "peak_rss_mb": r.rss_mb,
            "cpu_s": r.cpu_s,
            "note": r.note,
            "peer": r.peer,
            "cost": r.cost.as_ref().map(|c| serde_json::json!({
                "tasks": c.tasks,
                "server_cpu_s": c.server_cpu_s,
                "peer_tasks": c.peer_tasks,
                "peer_rss_mb": c.peer_rss_mb,
                "peer_cpu_s": c.peer_cpu_s,
                "peer_server_cpu_s": c.peer_server_cpu_s,
            })),
        })).collect::<Vec<_>>(),
    });
    serde_json::to_string_pretty(&out).unwrap_or_default()
}
