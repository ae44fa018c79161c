//! The Galera lane's own faults and checks: a node killed with `kill -9` and started
//! again (it rejoins by IST), a node cut off from the others (Galera's `gmcast.isolate`,
//! as a network partition would: it goes non-primary) and let back in, each node's
//! resident memory sampled throughout, and the cluster's health at the end.
//!
//! The nodes are those of `scripts/servers.sh` (`BACKSTOP_TEST_GALERA_DIR`: node n's
//! socket, pid file and `restart.sh` in `n<n>/`); the suite reaches them as root
//! through their sockets with the `mariadb` client.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use backstop::AnyStore;
use tokio::process::Command;

use crate::check::Line;
use crate::BoxError;

/// Most resident memory a node may reach in a run (MB): a node that grows past it
/// (a run on a busy machine once saw two grow to 12 and 23 GB) fails the lane.
pub const NODE_MEMORY_BOUND_MB: u64 = 2048;

/// How long a cut-off node stays cut off once it left the primary component.
const CUT_FOR: Duration = Duration::from_secs(2);

/// The cluster's nodes, by their directories (`n1`, `n2`, …).
#[derive(Debug, Clone)]
pub struct Nodes {
    dirs: Vec<PathBuf>,
}

/// What a run saw of the nodes: each one's peak resident memory (MB) and its state at
/// the end.
#[derive(Debug, Clone, Default)]
pub struct Health {
    pub peaks_mb: Vec<u64>,
    /// Each node's `wsrep_cluster_status`, `wsrep_local_state_comment` and
    /// `wsrep_cluster_size` at the end.
    pub end: Vec<(String, String, String)>,
}

impl Nodes {
    /// The nodes under `BACKSTOP_TEST_GALERA_DIR`, each with its `restart.sh`.
    pub fn from_env() -> Result<Nodes, BoxError> {
        let root = std::env::var("BACKSTOP_TEST_GALERA_DIR")
            .ok()
            .filter(|d| !d.is_empty())
            .ok_or("BACKSTOP_TEST_GALERA_DIR is not set: the Galera lane kills and cuts off nodes (scripts/chaos sets it)")?;
        let mut dirs: Vec<PathBuf> = (1..=9)
            .map(|n| Path::new(&root).join(format!("n{n}")))
            .take_while(|d| d.is_dir())
            .collect();
        dirs.retain(|d| d.join("restart.sh").is_file());
        if dirs.len() < 3 {
            return Err(format!("{root}: fewer than 3 nodes with a restart.sh").into());
        }
        Ok(Nodes { dirs })
    }

    /// Node `n`'s (1-based) answer to `sql`, as root through its socket.
    async fn say(&self, n: usize, sql: &str) -> Result<String, BoxError> {
        let sock = self.dirs[n - 1].join("sock");
        let out = Command::new("mariadb")
            .args(["--no-defaults", "-u", "root", "-N", "-B", "-S"])
            .arg(&sock)
            .args(["-e", sql])
            .output()
            .await?;
        if !out.status.success() {
            return Err(
                format!("node {n}: {}", String::from_utf8_lossy(&out.stderr).trim()).into(),
            );
        }
        Ok(String::from_utf8_lossy(&out.stdout).trim().to_owned())
    }

    /// A status variable of node `n` (empty when it does not answer).
    async fn status(&self, n: usize, name: &str) -> String {
        self.say(n, &format!("SHOW STATUS LIKE '{name}'"))
            .await
            .ok()
            .and_then(|l| l.split('\t').nth(1).map(str::to_owned))
            .unwrap_or_default()
    }

    /// Wait until node `n`'s `name` is `value`, up to `within`.
    async fn wait(
        &self,
        n: usize,
        name: &str,
        value: &str,
        within: Duration,
    ) -> Result<(), BoxError> {
        let deadline = Instant::now() + within;
        while self.status(n, name).await != value {
            if Instant::now() > deadline {
                return Err(format!("node {n}: {name} not {value} within {within:?}").into());
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        Ok(())
    }

    /// The node a fault hits, and whether the store writes to it (the workers do too:
    /// they take the same URL): the writer two times in three, another at random
    /// otherwise.
    pub async fn pick(&self, store: &AnyStore, rng: &mut fastrand::Rng) -> (usize, bool) {
        let writer = writer(store).await.unwrap_or(1);
        if rng.u8(..3) < 2 {
            return (writer, true);
        }
        let others: Vec<usize> = (1..=self.dirs.len()).filter(|n| *n != writer).collect();
        (others[rng.usize(..others.len())], false)
    }

    /// `kill -9` of node `n`, started again and waited for until it is `Synced`.
    pub async fn kill(&self, n: usize) -> Result<(), BoxError> {
        let script = self.dirs[n - 1].join("restart.sh");
        crate::driver::run_shell(&script.to_string_lossy()).await
    }

    /// Node `n` cut off from the others until it leaves the primary component, for
    /// [`CUT_FOR`] more, then let back in and waited for until it is `Synced`.
    pub async fn cut(&self, n: usize) -> Result<(), BoxError> {
        self.say(
            n,
            "SET GLOBAL wsrep_provider_options = 'gmcast.isolate = 1'",
        )
        .await?;
        let left = self
            .wait(n, "wsrep_ready", "OFF", Duration::from_secs(30))
            .await;
        if left.is_ok() {
            tokio::time::sleep(CUT_FOR).await;
        }
        self.say(
            n,
            "SET GLOBAL wsrep_provider_options = 'gmcast.isolate = 0'",
        )
        .await?;
        left?;
        self.wait(
            n,
            "wsrep_local_state_comment",
            "Synced",
            Duration::from_secs(120),
        )
        .await
    }

    /// Sample every node's resident memory every 250 ms until the returned flag is
    /// set; the peaks (MB) go into the returned cell.
    pub fn watch(&self) -> (Arc<std::sync::atomic::AtomicBool>, Arc<Mutex<Vec<u64>>>) {
        let done = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let peaks = Arc::new(Mutex::new(vec![0; self.dirs.len()]));
        let (d, p, dirs) = (done.clone(), peaks.clone(), self.dirs.clone());
        tokio::spawn(async move {
            while !d.load(std::sync::atomic::Ordering::Relaxed) {
                for (i, dir) in dirs.iter().enumerate() {
                    if let Some(mb) = resident_mb(dir) {
                        let mut peaks = p.lock().unwrap_or_else(|e| e.into_inner());
                        peaks[i] = peaks[i].max(mb);
                    }
                }
                tokio::time::sleep(Duration::from_millis(250)).await;
            }
        });
        (done, peaks)
    }

    /// Each node's cluster status, state and the cluster's size as it sees it.
    pub async fn end(&self) -> Vec<(String, String, String)> {
        let mut out = Vec::new();
        for n in 1..=self.dirs.len() {
            out.push((
                self.status(n, "wsrep_cluster_status").await,
                self.status(n, "wsrep_local_state_comment").await,
                self.status(n, "wsrep_cluster_size").await,
            ));
        }
        out
    }
}

/// The resident memory (MB) of the node whose pid file is in `dir`.
fn resident_mb(dir: &Path) -> Option<u64> {
    let pid = std::fs::read_to_string(dir.join("pid")).ok()?;
    let status = std::fs::read_to_string(format!("/proc/{}/status", pid.trim())).ok()?;
    let kb: u64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))?
        .trim()
        .trim_end_matches("kB")
        .trim()
        .parse()
        .ok()?;
    Some(kb / 1024)
}

/// The node (1-based, by its `wsrep_node_name` `n<k>`) a store's connections are on.
async fn writer(store: &AnyStore) -> Option<usize> {
    let AnyStore::MySql(m) = store else {
        return None;
    };
    let mut conn = m.pool().acquire().await.ok()?;
    let name: String = sqlx::query_scalar("SELECT @@wsrep_node_name")
        .fetch_one(&mut *conn)
        .await
        .ok()?;
    name.strip_prefix('n')?.parse().ok()
}

/// The verdict on the cluster: every node back in the primary component, `Synced`,
/// seeing all the others, and each node's memory within [`NODE_MEMORY_BOUND_MB`].
pub fn check(health: &Health) -> Line {
    let size = health.end.len().to_string();
    let up = health
        .end
        .iter()
        .all(|(status, state, n)| status == "Primary" && state == "Synced" && *n == size);
    let bounded = health.peaks_mb.iter().all(|mb| *mb <= NODE_MEMORY_BOUND_MB);
    Line {
        ok: up && bounded && !health.end.is_empty(),
        name: "Galera cluster up, each node's memory bounded",
        detail: format!(
            "at the end: {}; peak resident memory {} (bound {NODE_MEMORY_BOUND_MB} MB each)",
            health
                .end
                .iter()
                .enumerate()
                .map(|(i, (status, state, n))| format!("n{} {status} {state} of {n}", i + 1))
                .collect::<Vec<_>>()
                .join(", "),
            health
                .peaks_mb
                .iter()
                .enumerate()
                .map(|(i, mb)| format!("n{} {mb} MB", i + 1))
                .collect::<Vec<_>>()
                .join(", ")
        ),
    }
}
