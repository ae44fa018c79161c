//! The driver: sets a backend up, spawns the workers, enqueues business rows and tasks in
//! transactions (some rolled back on purpose) while it injects faults, waits for the
//! tasks to settle, stops the workers gracefully and checks the invariants.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use backstop::{AnyStore, Status, Task, TaskFilter, TaskId, TaskStore};
use sqlx::AnyPool;
use tokio::process::{Child, Command};

use crate::check::{self, Report};
use crate::consumer::{RECLAIM_IDLE, RECLAIM_INTERVAL};
use crate::ledger::now_ms;
use crate::proxy::{Mode, Proxy};
use crate::redis_server::RedisServer;
use crate::worker::{DEAD_AFTER, HELD, LIMIT, LIMITED, POLL, RATE, RATED, RATE_WINDOW, RELAY};
use crate::BoxError;

/// The databases the suite runs on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Backend {
    Sqlite,
    Postgres,
    Mysql,
    /// The MySQL backend on a 3-node MariaDB Galera Cluster, its store's connections on
    /// one writer node (the default).
    Galera,
}

impl Backend {
    pub fn parse(s: &str) -> Option<Backend> {
        match s {
            "sqlite" => Some(Backend::Sqlite),
            "postgres" => Some(Backend::Postgres),
            "mysql" => Some(Backend::Mysql),
            "galera" => Some(Backend::Galera),
            _ => None,
        }
    }
    pub fn name(self) -> &'static str {
        match self {
            Backend::Sqlite => "sqlite",
            Backend::Postgres => "postgres",
            Backend::Mysql => "mysql",
            Backend::Galera => "galera",
        }
    }

    /// The MySQL backend's SQL and store (on one server or a Galera cluster).
    pub fn is_mysql(self) -> bool {
        matches!(self, Backend::Mysql | Backend::Galera)
    }
    /// The faults this backend gets: process faults and Redis restarts everywhere; the
    /// database's and the network's on the server backends; on Galera its nodes' (the
    /// workers reach the nodes directly, by the store's multi-node URL, not through the
    /// suite's proxy).
    fn faults(self) -> Vec<FaultKind> {
        use FaultKind::*;
        match self {
            Backend::Sqlite => vec![Kill, Stop, Term, ConsumerKill, RedisRestart],
            Backend::Galera => vec![
                Kill,
                Stop,
                Term,
                ConsumerKill,
                RedisRestart,
                NodeKill,
                NodeCut,
            ],
            _ => vec![
                Kill,
                Stop,
                Term,
                ConsumerKill,
                RedisRestart,
                Restart,
                ConnKill,
                Latency,
                Stall,
                Reset,
                Outage,
            ],
        }
    }
}

/// How long and how hard a run is.
#[derive(Debug, Clone, Copy)]
pub struct Lane {
    pub name: &'static str,
    /// The fault phase (at least long enough for every fault kind once).
    pub faults_for: Duration,
    /// Tasks enqueued per second during it.
    pub rate: u64,
    /// Worker processes.
    pub workers: usize,
    /// Consumer processes (the relay's stream through the inbox).
    pub consumers: usize,
    /// Only these faults (of those the backend gets); all when empty.
    pub only: &'static [FaultKind],
    /// The sagas' barrier without its unique key (`--broken-barrier`): the saga checks
    /// must fail.
    pub broken_barrier: bool,
}

impl Lane {
    pub fn smoke() -> Lane {
        Lane {
            name: "smoke",
            faults_for: Duration::from_secs(15),
            rate: 150,
            workers: 3,
            consumers: 2,
            only: &[],
            broken_barrier: false,
        }
    }
    pub fn full() -> Lane {
        Lane {
            name: "full",
            faults_for: Duration::from_secs(150),
            rate: 300,
            workers: 4,
            consumers: 2,
            only: &[],
            broken_barrier: false,
        }
    }
}

/// A fault the driver injects.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum FaultKind {
    /// `kill -9` of a worker (it is respawned).
    Kill,
    /// `SIGSTOP` of a worker for longer than `dead_after`, then `SIGCONT`.
    Stop,
    /// `SIGTERM`: a graceful shutdown (then a respawn).
    Term,
    /// An immediate restart of the database server.
    Restart,
    /// Every connection of the database killed by the server (`pg_terminate_backend`,
    /// `KILL`).
    ConnKill,
    /// 50 ms on every chunk between workers and database, for 2 s.
    Latency,
    /// Nothing forwarded between workers and database for 1 s.
    Stall,
    /// Every connection between workers and database reset.
    Reset,
    /// `kill -9` of a consumer (it is respawned under a new name).
    ConsumerKill,
    /// An immediate restart (`kill -9`, then start) of the Redis server.
    RedisRestart,
    /// `kill -9` of a Galera node (the writer two times in three), started again: it
    /// rejoins by IST.
    NodeKill,
    /// A Galera node (the writer two times in three) cut off from the others until it
    /// leaves the primary component, 2 s more, then let back in.
    NodeCut,
    /// The database unreachable from the workers for 3 × `dead_after`: connections
    /// reset and refused.
    Outage,
}

impl FaultKind {
    /// Every kind, for `--faults`.
    pub const ALL: [FaultKind; 13] = [
        FaultKind::Kill,
        FaultKind::Stop,
        FaultKind::Term,
        FaultKind::Restart,
        FaultKind::ConnKill,
        FaultKind::Latency,
        FaultKind::Stall,
        FaultKind::Reset,
        FaultKind::Outage,
        FaultKind::ConsumerKill,
        FaultKind::RedisRestart,
        FaultKind::NodeKill,
        FaultKind::NodeCut,
    ];

    /// The kind a `--faults` name names (its name with `-` for spaces: `kill-9`,
    /// `db-restart`, `outage`, …).
    pub fn parse(s: &str) -> Option<FaultKind> {
        Self::ALL
            .into_iter()
            .find(|k| k.name().replace(' ', "-") == s)
    }

    pub fn name(self) -> &'static str {
        match self {
            FaultKind::Kill => "kill -9",
            FaultKind::Stop => "stop",
            FaultKind::Term => "graceful stop",
            FaultKind::Restart => "db restart",
            FaultKind::ConnKill => "connection kill",
            FaultKind::Latency => "latency",
            FaultKind::Stall => "stall",
            FaultKind::Reset => "reset",
            FaultKind::Outage => "outage",
            FaultKind::ConsumerKill => "consumer kill",
            FaultKind::RedisRestart => "redis restart",
            FaultKind::NodeKill => "node kill",
            FaultKind::NodeCut => "node cut",
        }
    }

    /// Whether the fault touches the engines (their processes, database or network):
    /// a Redis restart or a consumer's death cannot make a task run twice.
    pub fn hits_engines(self) -> bool {
        !matches!(self, FaultKind::ConsumerKill | FaultKind::RedisRestart)
    }
}

/// A fault as injected: on which worker (process faults), and when.
#[derive(Debug, Clone)]
pub struct Fault {
    pub kind: FaultKind,
    /// The worker's pid for process faults; `None` for faults every worker sees.
    pub pid: Option<u32>,
    /// The Galera node (1-based) a node fault hit, and whether it was the writer.
    pub node: Option<(usize, bool)>,
    pub start: i64,
    pub end: i64,
}

/// What became of one business transaction.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// Committed: its order row and its task exist.
    Committed,
    /// Rolled back on purpose, or failed before its commit: neither exists.
    RolledBack,
    /// The commit's answer was lost (a fault): both exist or neither.
    Unknown,
}

/// One business transaction's key, task kind and outcome.
#[derive(Debug, Clone)]
pub struct Written {
    pub event_type: &'static str,
    pub outcome: Outcome,
}

pub(crate) struct Target {
    backend: Backend,
    /// The store for the driver (direct to the database).
    pub(crate) store: AnyStore,
    /// The application's own pool (direct): the suite's reads, on Galera on node 1.
    pub(crate) pool: AnyPool,
    /// The application's pools for its business transactions: on Galera one per node,
    /// taken in turn (the application writes on every node, the store on its elected
    /// one); else the one above.
    producers: Vec<AnyPool>,
    next_producer: std::sync::atomic::AtomicUsize,
    /// `$1` or `?`.
    pub(crate) p1: &'static str,
    pub(crate) orders: String,
    /// The consumers' effect rows: one per message applied, no unique key.
    effects: String,
    /// The sagas' effect rows (no unique key either), the table their barrier writes,
    /// and the workers' argument naming that barrier.
    saga_effects: String,
    saga_barrier: String,
    barrier_arg: String,
    /// The store URL the workers use (through the proxy on the server backends).
    worker_url: String,
    /// Galera: the URL every other worker and consumer uses instead, its store's
    /// connections going round every node (`every_node=true`), so both deployments of
    /// the guide run at once: stores on one writer node and stores spread.
    spread_url: Option<String>,
    proxy: Option<Proxy>,
    /// A shell command restarting the database server at once.
    restart: Option<String>,
    /// Galera: the cluster's nodes, for their faults.
    nodes: Option<crate::galera::Nodes>,
}

fn with_param(url: &str, param: &str) -> String {
    let sep = if url.contains('?') { '&' } else { '?' };
    format!("{url}{sep}{param}")
}

/// A URL naming several servers (`host1:port1,host2:port2`) as one naming its first:
/// for sqlx's own pools, which take one server.
pub(crate) fn first_server(url: &str) -> Result<String, BoxError> {
    let (hosts, _) = reroute(url, "")?;
    let first = hosts.split(',').next().unwrap_or_default().to_owned();
    Ok(reroute(url, &first)?.1)
}

/// `host:port` of a server URL, and the URL with it replaced by `to`.
fn reroute(url: &str, to: &str) -> Result<(String, String), BoxError> {
    let after_scheme = url.find("://").ok_or("URL without ://")? + 3;
    let rest = &url[after_scheme..];
    let auth_end = rest.find(['/', '?']).unwrap_or(rest.len());
    let authority = &rest[..auth_end];
    let host_start = authority.rfind('@').map(|i| i + 1).unwrap_or(0);
    let host = authority[host_start..].to_string();
    let rerouted = format!(
        "{}{}{}{}",
        &url[..after_scheme],
        &authority[..host_start],
        to,
        &rest[auth_end..]
    );
    Ok((host, rerouted))
}

async fn setup(backend: Backend, dir: &Path, tag: &str, lane: Lane) -> Result<Target, BoxError> {
    sqlx::any::install_default_drivers();
    let table = format!("chaos_{tag}");
    let orders = format!("chaos_orders_{tag}");
    let effects = format!("chaos_effects_{tag}");
    let env = |k: &str| std::env::var(k).ok().filter(|v| !v.is_empty());
    let mut nodes = None;
    let (db_url, restart) = match backend {
        Backend::Sqlite => (format!("sqlite://{}", dir.join("chaos.db").display()), None),
        Backend::Postgres => (
            env("BACKSTOP_TEST_POSTGRES_URL").ok_or("BACKSTOP_TEST_POSTGRES_URL is not set")?,
            env("BACKSTOP_TEST_POSTGRES_RESTART"),
        ),
        Backend::Mysql => {
            let server =
                env("BACKSTOP_TEST_MYSQL_URL").ok_or("BACKSTOP_TEST_MYSQL_URL is not set")?;
            let pool = AnyPool::connect(&server).await?;
            sqlx::query("CREATE DATABASE IF NOT EXISTS backstop_chaos")
                .execute(&pool)
                .await?;
            pool.close().await;
            (
                format!("{}/backstop_chaos", server.trim_end_matches('/')),
                env("BACKSTOP_TEST_MYSQL_RESTART"),
            )
        }
        Backend::Galera => {
            let cluster =
                env("BACKSTOP_TEST_GALERA_URL").ok_or("BACKSTOP_TEST_GALERA_URL is not set")?;
            let pool = AnyPool::connect(&first_server(&cluster)?).await?;
            sqlx::query("CREATE DATABASE IF NOT EXISTS backstop_chaos")
                .execute(&pool)
                .await?;
            pool.close().await;
            nodes = Some(crate::galera::Nodes::from_env()?);
            (
                format!("{}/backstop_chaos", cluster.trim_end_matches('/')),
                None,
            )
        }
    };
    if matches!(backend, Backend::Postgres | Backend::Mysql) && restart.is_none() {
        return Err(format!(
            "BACKSTOP_TEST_{}_RESTART is not set: the suite restarts the server (scripts/chaos sets it)",
            backend.name().to_uppercase()
        )
        .into());
    }
    // the application's own pool (its business rows, the suite's reads): on Galera on
    // the first node, waiting for the cluster's writes before each read
    let app_url = first_server(&db_url)?;
    durable(backend, &app_url).await?;
    let store_url = with_param(&db_url, &format!("table={table}"));
    let store = backstop::connect(&store_url).await?;
    store.migrate().await?;
    let (pool, producers) = if backend == Backend::Galera {
        // the suite's reads wait for node 1 as long as sqlx's default (30 s)
        let pool = galera_pool(&app_url, Duration::from_secs(30)).await?;
        let mut producers = Vec::new();
        for host in reroute(&db_url, "")?.0.split(',') {
            let url = reroute(&db_url, host)?.1;
            producers.push(galera_pool(&url, Duration::from_secs(1)).await?);
        }
        (pool, producers)
    } else {
        let pool = AnyPool::connect(&app_url).await?;
        (pool.clone(), vec![pool])
    };
    sqlx::query(sqlx::AssertSqlSafe(format!(
        "CREATE TABLE {orders} (biz_key VARCHAR(64) PRIMARY KEY)"
    )))
    .execute(&pool)
    .await?;
    sqlx::query(sqlx::AssertSqlSafe(format!(
        "CREATE TABLE {effects} (msg_id VARCHAR(128) NOT NULL, biz_key VARCHAR(64) NOT NULL)"
    )))
    .execute(&pool)
    .await?;
    let (saga_effects, _) = crate::saga::tables(tag);
    let (saga_barrier, barrier_arg) =
        crate::saga::setup(&pool, tag, backend.is_mysql(), lane.broken_barrier).await?;
    let spread_url =
        (backend == Backend::Galera).then(|| with_param(&store_url, "every_node=true"));
    let (worker_url, proxy) = if matches!(backend, Backend::Sqlite | Backend::Galera) {
        (store_url, None)
    } else {
        let (upstream, _) = reroute(&store_url, "")?;
        let proxy = Proxy::start(upstream).await?;
        let (_, via) = reroute(&store_url, &format!("127.0.0.1:{}", proxy.port))?;
        (via, Some(proxy))
    };
    Ok(Target {
        backend,
        store,
        pool,
        producers,
        next_producer: Default::default(),
        p1: if backend == Backend::Postgres {
            "$1"
        } else {
            "?"
        },
        orders,
        effects,
        saga_effects,
        saga_barrier,
        barrier_arg,
        worker_url,
        spread_url,
        proxy,
        restart,
        nodes,
    })
}

/// A pool of the application's on one Galera node: each connection waits for the
/// cluster's earlier writes before it reads or writes, as the guide asks. A killed
/// node's pool keeps trying to connect until `acquire` has passed: a producer's pool
/// gives up after 1 s and its transaction counts as rolled back, as a client-side
/// balancer would soon pass the node over.
async fn galera_pool(url: &str, acquire: Duration) -> Result<AnyPool, BoxError> {
    Ok(sqlx::any::AnyPoolOptions::new()
        .acquire_timeout(acquire)
        .after_connect(|conn, _| {
            Box::pin(async move {
                sqlx::query("SET SESSION wsrep_sync_wait = 7")
                    .execute(conn)
                    .await
                    .map(|_| ())
            })
        })
        .connect(url)
        .await?)
}

impl Target {
    /// The pool of the next business transaction: on Galera each node in turn.
    pub(crate) fn producer(&self) -> &AnyPool {
        let i = self
            .next_producer
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        &self.producers[i % self.producers.len()]
    }
}

/// Refuse a server that loses acknowledged commits when it crashes: the suite restarts
/// it at once and would report those losses as lost tasks.
async fn durable(backend: Backend, url: &str) -> Result<(), BoxError> {
    let (query, lossy) = match backend {
        Backend::Sqlite => return Ok(()),
        Backend::Postgres => ("SELECT current_setting('synchronous_commit')", "off"),
        // 2 writes the log to the OS at each commit: a crash of the server loses nothing
        // (on Galera a crashed node also gets what it lacks from the others)
        Backend::Mysql | Backend::Galera => {
            ("SELECT CAST(@@innodb_flush_log_at_trx_commit AS CHAR)", "0")
        }
    };
    let pool = AnyPool::connect(url).await?;
    let (value,): (String,) = sqlx::query_as(query).fetch_one(&pool).await?;
    pool.close().await;
    if value == lossy {
        return Err(format!(
            "the {} server loses acknowledged commits when it crashes ({query} = {value}); the suite needs durability on (scripts/servers.sh: make_durable)",
            backend.name()
        )
        .into());
    }
    Ok(())
}

/// Child processes of one role (workers, consumers), respawned as they are killed.
struct Procs {
    exe: PathBuf,
    role: &'static str,
    /// The arguments after the role; `{ledger}` stands for the process's ledger file.
    args: Vec<String>,
    /// A first argument (the store's URL) for every other process instead of `args`'.
    every_other: Option<String>,
    dir: PathBuf,
    /// Each live process with its number (that of its ledger file).
    children: Vec<(usize, Child)>,
    spawned: usize,
}

impl Procs {
    fn spawn(&mut self) -> Result<(), BoxError> {
        self.spawned += 1;
        let n = self.spawned;
        let role = self.role;
        let log = std::fs::File::create(self.dir.join(format!("{role}-{n}.stderr")))?;
        let ledger = self.dir.join(format!("ledger-{n}"));
        let mut args: Vec<String> = self
            .args
            .iter()
            .map(|a| a.replace("{ledger}", &ledger.to_string_lossy()))
            .collect();
        if let (Some(other), Some(first)) = (&self.every_other, args.first_mut()) {
            if n.is_multiple_of(2) {
                first.clone_from(other);
            }
        }
        let child = Command::new(&self.exe)
            .arg(role)
            .args(args)
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .stderr(log)
            .kill_on_drop(true)
            .spawn()?;
        self.children.push((n, child));
        Ok(())
    }

    fn pick(&mut self, rng: &mut fastrand::Rng) -> Option<(usize, u32)> {
        let i = rng.usize(..self.children.len().max(1));
        let pid = self.children.get(i)?.1.id()?;
        Some((i, pid))
    }

    /// `kill -9` a process picked at random and spawn another; its pid.
    async fn kill_one(&mut self, rng: &mut fastrand::Rng) -> Result<Option<u32>, BoxError> {
        let Some((i, pid)) = self.pick(rng) else {
            return Ok(None);
        };
        let (_, mut child) = self.children.remove(i);
        child.kill().await?;
        self.spawn()?;
        Ok(Some(pid))
    }

    /// SIGTERM every process and wait for its exit: whether each was clean.
    async fn stop_all(&mut self) -> Result<Vec<check::Graceful>, BoxError> {
        let mut out = Vec::new();
        for (_, mut child) in std::mem::take(&mut self.children) {
            let Some(p) = child.id() else { continue };
            signal(p, "TERM")?;
            let status = tokio::time::timeout(Duration::from_secs(20), child.wait()).await;
            let clean = matches!(status, Ok(Ok(s)) if s.success());
            out.push(check::Graceful {
                pid: p,
                clean,
                left: Vec::new(),
            });
        }
        Ok(out)
    }
}

fn signal(pid: u32, sig: &str) -> Result<(), BoxError> {
    let ok = std::process::Command::new("kill")
        .arg(format!("-{sig}"))
        .arg(pid.to_string())
        .status()?
        .success();
    if ok {
        Ok(())
    } else {
        Err(format!("kill -{sig} {pid} failed").into())
    }
}

/// Rows of the task table still `running` (with this owner).
async fn running_of(store: &AnyStore, owner: Option<&str>) -> Result<Vec<TaskId>, BoxError> {
    Ok(all_tasks(store)
        .await?
        .into_iter()
        .filter(|t| t.status == Status::Running)
        .filter(|t| owner.is_none_or(|o| t.owner.as_deref() == Some(o)))
        .map(|t| t.id)
        .collect())
}

/// The suite's own read of the store, again while it fails temporarily (up to 15 s): the
/// faults it injects reach its own connections too (a connection kill terminates every
/// client backend, the driver's pooled ones with them, and a statement sent before the
/// server acted on the kill fails with 57P01), as they reach any dashboard's.
async fn read<T, F, Fut>(mut call: F) -> backstop::Result<T>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = backstop::Result<T>>,
{
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        match call().await {
            Err(e) if e.is_temporary() && Instant::now() < deadline => {
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            answer => return answer,
        }
    }
}

async fn all_tasks(store: &AnyStore) -> Result<Vec<Task>, BoxError> {
    let mut out = Vec::new();
    let mut after = None;
    loop {
        let mut f = TaskFilter::default();
        f.limit = 1000;
        f.after_id = after;
        let page = read(|| store.list(&f)).await?;
        let full = page.len() == 1000;
        after = page.last().map(|t| t.id);
        out.extend(page);
        if !full {
            return Ok(out);
        }
    }
}

/// The owner a worker's ledger names (its first line).
fn owner_of(dir: &Path, n: usize) -> Option<String> {
    let text = std::fs::read_to_string(dir.join(format!("ledger-{n}"))).ok()?;
    text.lines().find_map(|l| {
        l.strip_prefix("O ")
            .map(|r| r.split(' ').next().unwrap_or("").to_string())
    })
}

/// Pending tasks at most, for the workers to count as caught up with the writers
/// before the last fault (a few polls' worth at the lanes' rates).
const CAUGHT_UP: u64 = 50;

/// How long the driver waits, its writers paused, for the workers to catch up before
/// the last fault. A lane of outages alone keeps the workers away most of the time: a
/// minute and more of orders piles up, among them ~4 000 tasks of the type limited to
/// 6 at a time, which drain at 28–31 a second on MariaDB, durable, on the project's
/// 2-core machine (130–145 s). The wait ends as soon as they have caught up.
const CATCH_UP_MAX: Duration = Duration::from_secs(240);

/// How long the writers write again after the catch-up, before the last fault.
const WRITE_BEFORE_LAST: Duration = Duration::from_secs(2);

/// The file whose presence tells the workers to stop writing orders of their own.
pub const STOP_WRITING: &str = "stop-writing";

/// Stop the driver's writers (`stop`) and the workers' (the [`STOP_WRITING`] file in
/// `dir`).
fn stop_writers(stop: &AtomicBool, dir: &Path) -> Result<(), BoxError> {
    stop.store(true, Ordering::Relaxed);
    std::fs::write(dir.join(STOP_WRITING), b"")?;
    Ok(())
}

/// Kill every connection of the database but the driver's own one.
async fn kill_connections(t: &Target) -> Result<(), BoxError> {
    match t.backend {
        Backend::Postgres => {
            sqlx::query(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity \
                 WHERE datname = current_database() AND pid <> pg_backend_pid() \
                 AND backend_type = 'client backend'",
            )
            .execute(&t.pool)
            .await?;
        }
        Backend::Mysql | Backend::Galera => {
            let mut conn = t.pool.acquire().await?;
            let ids: Vec<(i64,)> = sqlx::query_as(
                "SELECT CAST(id AS SIGNED) FROM information_schema.processlist \
                 WHERE db = DATABASE() AND id <> CONNECTION_ID()",
            )
            .fetch_all(&mut *conn)
            .await?;
            for (id,) in ids {
                let _ = sqlx::query(sqlx::AssertSqlSafe(format!("KILL {id}")))
                    .execute(&mut *conn)
                    .await;
            }
        }
        Backend::Sqlite => {}
    }
    Ok(())
}

pub(crate) async fn run_shell(cmd: &str) -> Result<(), BoxError> {
    let out = Command::new("sh").arg("-c").arg(cmd).output().await?;
    if out.status.success() {
        Ok(())
    } else {
        Err(format!(
            "`{cmd}` failed: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        )
        .into())
    }
}

/// Run the suite on one backend; the report's violations decide the exit code.
pub async fn run(backend: Backend, lane: Lane, seed: u64) -> Result<Report, BoxError> {
    let tag = format!("{}_{seed}", std::process::id());
    let dir = std::env::temp_dir().join(format!("backstop-chaos-{}-{tag}", backend.name()));
    std::fs::create_dir_all(&dir)?;
    let t = Arc::new(setup(backend, &dir, &tag, lane).await?);
    let mut rng = fastrand::Rng::with_seed(seed);
    let mut redis = RedisServer::start(&dir).await?;
    // each Galera node's memory, sampled from now to the end
    let watch = t.nodes.as_ref().map(|n| n.watch());
    let stream = format!("chaos:{tag}");
    let exe = std::env::current_exe()?;
    let mut workers = Procs {
        exe: exe.clone(),
        role: "worker",
        args: vec![
            t.worker_url.clone(),
            "{ledger}".into(),
            redis.url(),
            stream.clone(),
            t.orders.clone(),
            t.saga_effects.clone(),
            t.barrier_arg.clone(),
        ],
        every_other: t.spread_url.clone(),
        dir: dir.clone(),
        children: Vec::new(),
        spawned: 0,
    };
    for _ in 0..lane.workers {
        workers.spawn()?;
    }
    let mut consumers = Procs {
        exe,
        role: "consumer",
        args: vec![
            t.worker_url.clone(),
            redis.url(),
            stream.clone(),
            t.effects.clone(),
        ],
        every_other: t.spread_url.clone(),
        dir: dir.clone(),
        children: Vec::new(),
        spawned: 1000,
    };
    for _ in 0..lane.consumers {
        consumers.spawn()?;
    }

    // the held queue: paused before any of its tasks exists, resumed halfway through
    let ops = backstop::Audit::new("chaos", "the held queue");
    let pause = || t.store.set_queue(HELD, backstop::QueueChange::Pause, &ops);
    read(pause).await?;
    let held_from = now_ms();
    // the limited queue: its limit set before any of its tasks exists
    let limit = backstop::QueueChange::Concurrency(Some(LIMIT));
    let ops_limit = backstop::Audit::new("chaos", "the limited queue");
    read(|| t.store.set_queue(LIMITED, limit, &ops_limit)).await?;
    // the rate-limited queue: its rate set before any of its tasks exists
    let rate = backstop::QueueChange::Rate(Some(backstop::RateLimit::new(RATE, RATE_WINDOW)));
    let ops_rate = backstop::Audit::new("chaos", "the rate-limited queue");
    read(|| t.store.set_queue(RATED, rate, &ops_rate)).await?;
    let mut held_until = None;

    let stop = Arc::new(AtomicBool::new(false));
    let paused = Arc::new(AtomicBool::new(false));
    let written = Arc::new(Mutex::new(HashMap::new()));
    let producers = tokio::spawn(crate::produce::produce(
        t.clone(),
        lane.rate,
        seed,
        stop.clone(),
        paused.clone(),
        written.clone(),
    ));

    // the faults: every kind once in a shuffled order, then at random, one at a time
    let mut faults: Vec<Fault> = Vec::new();
    let mut graceful: Vec<check::Graceful> = Vec::new();
    let kinds: Vec<FaultKind> = backend
        .faults()
        .into_iter()
        .filter(|k| lane.only.is_empty() || lane.only.contains(k))
        .collect();
    if kinds.is_empty() {
        return Err(format!("{} gets none of the faults asked for", backend.name()).into());
    }
    let mut plan = kinds.clone();
    rng.shuffle(&mut plan);
    let begun = Instant::now();
    tokio::time::sleep(Duration::from_secs(1)).await;
    let mut producers = Some(producers);
    let mut catch_up_ms = 0;
    let mut i = 0;
    loop {
        let kind = plan
            .get(i)
            .copied()
            .unwrap_or_else(|| kinds[rng.usize(..kinds.len())]);
        i += 1;
        tokio::time::sleep(Duration::from_millis(rng.u64(500..1500))).await;
        // The last fault: every kind has had its turn and the time is up. The writers
        // stop as it begins, so what settles after it is what the fault disturbed, not
        // a backlog the application kept writing meanwhile (an outage of the workers
        // lets seconds of orders pile up; draining them is the benchmarks' business).
        let last = i >= plan.len() && begun.elapsed() >= lane.faults_for;
        if last {
            // ... and the backlog the faults before it left (the workers keep up with
            // the writers between faults, but an outage or a restart just before leaves
            // seconds of orders due; a lane of outages alone, minutes) is drained first,
            // the driver's writers paused; then they write again for a while, so the
            // last fault meets the workers busy.
            let from = Instant::now();
            paused.store(true, Ordering::Relaxed);
            loop {
                let stats = read(|| t.store.stats()).await?;
                if own(&stats, Status::Pending) <= CAUGHT_UP || from.elapsed() > CATCH_UP_MAX {
                    break;
                }
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            catch_up_ms = from.elapsed().as_millis() as i64;
            paused.store(false, Ordering::Relaxed);
            tokio::time::sleep(WRITE_BEFORE_LAST).await;
            stop_writers(&stop, &dir)?;
            if let Some(p) = producers.take() {
                let _ = p.await;
            }
        }
        if held_until.is_none() && begun.elapsed() >= lane.faults_for / 2 {
            let sent = now_ms();
            let resume = || t.store.set_queue(HELD, backstop::QueueChange::Resume, &ops);
            read(resume).await?;
            held_until = Some(sent);
        }
        let start = now_ms();
        let mut pid = None;
        let mut node = None;
        match kind {
            FaultKind::Kill => pid = workers.kill_one(&mut rng).await?,
            FaultKind::ConsumerKill => pid = consumers.kill_one(&mut rng).await?,
            FaultKind::RedisRestart => redis.restart().await?,
            FaultKind::Stop => {
                if let Some((_, p)) = workers.pick(&mut rng) {
                    pid = Some(p);
                    signal(p, "STOP")?;
                    tokio::time::sleep(DEAD_AFTER + Duration::from_secs(1)).await;
                    signal(p, "CONT")?;
                }
            }
            FaultKind::Term => {
                if let Some((w, p)) = workers.pick(&mut rng) {
                    pid = Some(p);
                    let (n, mut child) = workers.children.remove(w);
                    signal(p, "TERM")?;
                    let status = tokio::time::timeout(Duration::from_secs(20), child.wait()).await;
                    let clean = matches!(status, Ok(Ok(s)) if s.success());
                    // what it left running: nothing, once its shutdown returned
                    let owner = owner_of(&dir, n).unwrap_or_default();
                    let left = running_of(&t.store, Some(&owner)).await?;
                    graceful.push(check::Graceful {
                        pid: p,
                        clean,
                        left,
                    });
                    workers.spawn()?;
                }
            }
            FaultKind::Restart => {
                if let Some(cmd) = &t.restart {
                    run_shell(cmd).await?;
                }
            }
            FaultKind::ConnKill => kill_connections(&t).await?,
            FaultKind::Latency | FaultKind::Stall | FaultKind::Outage => {
                if let Some(proxy) = &t.proxy {
                    let (mode, d) = match kind {
                        FaultKind::Latency => (
                            Mode::Latency(Duration::from_millis(50)),
                            Duration::from_secs(2),
                        ),
                        FaultKind::Stall => (Mode::Stall, Duration::from_secs(1)),
                        _ => (Mode::Down, DEAD_AFTER * 3),
                    };
                    proxy.set(mode);
                    tokio::time::sleep(d).await;
                    proxy.set(Mode::Pass);
                }
            }
            FaultKind::Reset => {
                if let Some(proxy) = &t.proxy {
                    proxy.reset_all();
                }
            }
            FaultKind::NodeKill | FaultKind::NodeCut => {
                if let Some(nodes) = &t.nodes {
                    let (n, writer) = nodes.pick(&t.store, &mut rng).await;
                    node = Some((n, writer));
                    if kind == FaultKind::NodeKill {
                        nodes.kill(n).await?;
                    } else {
                        nodes.cut(n).await?;
                    }
                }
            }
        }
        faults.push(Fault {
            kind,
            pid,
            node,
            start,
            end: now_ms(),
        });
        if last {
            break;
        }
    }
    let quiet_from = now_ms().max(faults.last().map(|f| f.end).unwrap_or(0));
    let then = read(|| t.store.stats()).await?;
    let backlog_then = (own(&then, Status::Pending), own(&then, Status::Running));

    // settle: every task terminal
    let bound = DEAD_AFTER + POLL + SETTLE_MARGIN;
    let settle_deadline = Instant::now() + bound + Duration::from_secs(60);
    let settled_at = loop {
        let stats = read(|| t.store.stats()).await?;
        if own(&stats, Status::Pending) + own(&stats, Status::Running) == 0 {
            break now_ms();
        }
        if Instant::now() > settle_deadline {
            break i64::MAX;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    };

    // the consumers: every relayed task's message applied
    let inbox_bound = bound.max(RECLAIM_IDLE + RECLAIM_INTERVAL) + Duration::from_secs(1);
    let relayed = all_tasks(&t.store)
        .await?
        .iter()
        .filter(|t| t.event_type == RELAY && t.status == Status::Succeeded)
        .count() as i64;
    let count_sql = format!("SELECT COUNT(DISTINCT biz_key) FROM {}", t.effects);
    let inbox_deadline = Instant::now() + inbox_bound + Duration::from_secs(60);
    let inbox_settled_at = loop {
        let (applied,): (i64,) = sqlx::query_as(sqlx::AssertSqlSafe(count_sql.clone()))
            .fetch_one(&t.pool)
            .await?;
        if applied >= relayed {
            break now_ms();
        }
        if Instant::now() > inbox_deadline {
            break i64::MAX;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    };

    // the sagas: none running or compensating (the reconciler parks what waits in vain)
    let sagas_settle_ms = crate::saga::settle(&t.store, crate::saga::SETTLE_BOUND).await?;

    // graceful stop of every worker and consumer
    graceful.extend(workers.stop_all().await?);
    graceful.extend(consumers.stop_all().await?);
    let running_after = running_of(&t.store, None).await?;
    let effects: Vec<(String, String)> = sqlx::query_as(sqlx::AssertSqlSafe(format!(
        "SELECT msg_id, biz_key FROM {}",
        t.effects
    )))
    .fetch_all(&t.pool)
    .await?;
    let dead_letters = redis.len(&format!("{stream}:dead")).await?;
    let sagas = crate::saga::read(
        &t.store,
        &t.pool,
        &t.saga_effects,
        &t.saga_barrier,
        sagas_settle_ms,
    )
    .await?;
    redis.stop().await;

    let galera = match (&t.nodes, watch) {
        (Some(nodes), Some((done, peaks))) => {
            done.store(true, Ordering::Relaxed);
            let peaks_mb = peaks.lock().unwrap_or_else(|e| e.into_inner()).clone();
            Some(crate::galera::Health {
                peaks_mb,
                end: nodes.end().await,
            })
        }
        _ => None,
    };
    let tasks = all_tasks(&t.store).await?;
    let orders: Vec<(String,)> = sqlx::query_as(sqlx::AssertSqlSafe(format!(
        "SELECT biz_key FROM {}",
        t.orders
    )))
    .fetch_all(&t.pool)
    .await?;
    let mut written = std::mem::take(&mut *written.lock().unwrap_or_else(|e| e.into_inner()));
    let ledgers = crate::ledger::read_dir(&dir)?;
    crate::produce::produced_by_workers(&ledgers, &mut written);
    let fault_log: String = faults
        .iter()
        .map(|f| {
            format!(
                "{} {:?} {:?} {} {}\n",
                f.kind.name(),
                f.pid,
                f.node,
                f.start,
                f.end
            )
        })
        .collect();
    std::fs::write(dir.join("faults.txt"), fault_log)?;
    let report = check::check(check::Input {
        backend,
        lane,
        seed,
        written,
        tasks,
        orders: orders.into_iter().map(|(k,)| k).collect(),
        ledgers,
        faults,
        settle_ms: settled_at.saturating_sub(quiet_from),
        settle_bound: bound,
        quiet_from,
        backlog_then,
        catch_up_ms,
        effects,
        dead_letters,
        sagas,
        inbox_settle_ms: inbox_settled_at.saturating_sub(quiet_from),
        inbox_bound,
        graceful,
        running_after,
        held: (held_from, held_until.unwrap_or(i64::MAX)),
        galera,
        dir: dir.clone(),
    });
    // a run that held is removed, unless BACKSTOP_CHAOS_KEEP asks to study its ledgers
    if report.ok() {
        if std::env::var_os("BACKSTOP_CHAOS_KEEP").is_some() {
            eprintln!("kept: {}", dir.display());
        } else {
            let _ = std::fs::remove_dir_all(&dir);
        }
    }
    Ok(report)
}

/// The suite's own tasks in `status`: the sagas' step tasks left out, as the task
/// invariants leave them out (the sagas settle by their own invariant: a step task of a
/// saga parked meanwhile waits for an operator, retrying a minute apart, by design).
fn own(stats: &backstop::Stats, status: Status) -> u64 {
    stats
        .counts
        .iter()
        .filter(|c| c.status == status && !c.event_type.starts_with("saga:"))
        .map(|c| c.count)
        .sum()
}

/// Time past `dead_after` + one poll that the last fault's tasks may take to finish: a
/// slow task's run (1.5 s) started at the end, the backoffs of the tasks failing on
/// purpose (3 × 100 ms), and the drain of what became due meanwhile (2 s).
pub const SETTLE_MARGIN: Duration = Duration::from_millis(3800);
