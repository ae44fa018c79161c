//! The worker: a child process running the engine against the database (through the
//! driver's proxy on the server backends) until it is killed, stopped, or asked to stop
//! with SIGTERM (a graceful shutdown). Everything it does lands in its ledger.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use backstop::redis::{RelayOptions, StreamRelay};
use backstop::AnyStore;
use backstop_core::{
    async_trait, Claimed, Engine, EngineConfig, Handler, HandlerError, HandlerOptions, NewTask,
    RetryPolicy, Task, TaskId,
};

use crate::ledger::{now_ms, Ledger, LedgerStore};
use crate::BoxError;

/// The event type whose tasks succeed (some after one failed attempt).
pub const OK: &str = "CHAOS_OK";
/// The event type whose tasks fail every attempt and park as failed.
pub const FAIL: &str = "CHAOS_FAIL";
/// Attempts of a `FAIL` task: each one is a run, the last parks it.
pub const FAIL_ATTEMPTS: u32 = 3;
/// The event type whose queue the driver pauses before any of its tasks exists and
/// resumes halfway through the faults; its tasks succeed as `OK`'s do.
pub const HELD: &str = "CHAOS_HELD";
/// The event type with a global concurrency limit of [`LIMIT`] (set by the driver before
/// its first task); its tasks succeed as `OK`'s do.
pub const LIMITED: &str = "CHAOS_LIMITED";
/// The limit of [`LIMITED`] across every worker.
pub const LIMIT: u32 = 6;
/// The event type with a rate limit of [`RATE`] starts per [`RATE_WINDOW`] (set by the
/// driver before its first task); its tasks succeed as `OK`'s do.
pub const RATED: &str = "CHAOS_RATED";
/// The starts of [`RATED`] allowed per [`RATE_WINDOW`] across every worker.
pub const RATE: u32 = 20;
/// The window of [`RATE`].
pub const RATE_WINDOW: Duration = Duration::from_secs(1);
/// The event type whose tasks the relay publishes to the stream (they succeed once the
/// entry is added) for the consumers to apply through the inbox.
pub const RELAY: &str = "CHAOS_RELAY";

/// The timing every worker runs with: short, so that faults play out in seconds.
pub fn engine_config() -> EngineConfig {
    EngineConfig::default()
        .poll_interval(Duration::from_millis(200))
        .first_poll_delay(Duration::from_millis(200))
        .dead_after(DEAD_AFTER)
        .heartbeat_interval(Duration::from_millis(500))
        .shutdown_grace(Duration::from_secs(10))
        .retention(None)
        .backlog_gauges(false)
}

/// A running task whose lease is older than this is taken as dead.
pub const DEAD_AFTER: Duration = Duration::from_secs(2);
/// The workers' poll interval.
pub const POLL: Duration = Duration::from_millis(200);

/// What a task asks its handler to do.
#[derive(serde::Serialize, serde::Deserialize)]
pub struct Work {
    /// How long the handler works, in milliseconds.
    pub ms: u64,
    /// Whether its first attempt fails (a retry with the task's backoff).
    pub flaky: bool,
}

/// A handler run's start in the ledger: `S task lease pid at`.
fn started(ledger: &Ledger, task: &Task) {
    let pid = std::process::id();
    ledger.line(format!("S {} {} {pid} {}", task.id, task.lease, now_ms()));
}

/// A handler run's end: `E task lease ok|retry at`.
fn ended(ledger: &Ledger, task: &Task, ok: bool) {
    let outcome = if ok { "ok" } else { "retry" };
    ledger.line(format!(
        "E {} {} {outcome} {}",
        task.id,
        task.lease,
        now_ms()
    ));
}

struct Run {
    ledger: Arc<Ledger>,
    always_fail: bool,
}

#[async_trait]
impl Handler for Run {
    async fn handle(&self, task: &Task) -> Result<(), HandlerError> {
        started(&self.ledger, task);
        let work: Work = serde_json::from_str(&task.payload).map_err(HandlerError::fail)?;
        tokio::time::sleep(Duration::from_millis(work.ms)).await;
        let fail = self.always_fail || (work.flaky && task.attempts == 1);
        ended(&self.ledger, task, !fail);
        if fail {
            Err(HandlerError::retry("chaos: this attempt fails on purpose"))
        } else {
            Ok(())
        }
    }
}

/// Whether the relay publishes this task's message twice, on purpose: as an `XADD`
/// whose answer was lost and that the relay retried would. One task in twenty, so the
/// consumers' inbox has duplicates to turn away in every run.
pub fn published_twice(task: TaskId) -> bool {
    task % 20 == 0
}

/// The relay, its runs in the ledger like the other handlers' (a run is an `XADD`).
struct Relay {
    ledger: Arc<Ledger>,
    relay: StreamRelay,
}

#[async_trait]
impl Handler for Relay {
    async fn handle(&self, task: &Task) -> Result<(), HandlerError> {
        started(&self.ledger, task);
        let mut r = self.relay.handle(task).await;
        if r.is_ok() && published_twice(task.id) {
            r = self.relay.handle(task).await;
        }
        ended(&self.ledger, task, r.is_ok());
        r
    }
}

/// On a Galera cluster: the node the store's pool writes to, written to the ledger each
/// time it changes (`N <node> <ms>`), checked every 100 ms.
fn watch_node(pool: sqlx::MySqlPool, ledger: Arc<Ledger>) {
    tokio::spawn(async move {
        let mut last = String::new();
        loop {
            let node = sqlx::query_scalar::<_, String>("SELECT @@wsrep_node_name")
                .fetch_one(&pool)
                .await;
            if let Ok(node) = node {
                if node != last {
                    ledger.line(format!("N {node} {}", crate::ledger::now_ms()));
                    last = node;
                }
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    });
}

/// Open the store at `url`, trying for 30 s: the database may be restarting when a
/// process is (re)spawned.
pub async fn connect(url: &str) -> Result<AnyStore, BoxError> {
    let mut tries = 0;
    loop {
        match backstop::connect(url).await {
            Ok(s) => return Ok(s),
            Err(e) if tries < 150 => {
                tries += 1;
                if tries % 25 == 0 {
                    eprintln!("process {}: connect: {e}", std::process::id());
                }
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
            Err(e) => return Err(e.into()),
        }
    }
}

/// Run a worker until SIGTERM (graceful) or a signal that ends it: the engine with the
/// suite's handlers, the relay to the stream on the Redis named in `args` among them,
/// and the saga's steps. `args`: the Redis URL, the stream, the orders table, the saga
/// effects table and the barrier (`real`, or the keyless copy's table).
pub async fn run(url: &str, ledger_path: &Path, args: &[String]) -> Result<(), BoxError> {
    let [redis_url, stream, orders, effects, barrier] = args else {
        return Err(format!(
            "a worker takes 5 arguments after its ledger, not {}",
            args.len()
        )
        .into());
    };
    let ledger = Arc::new(Ledger::open(ledger_path)?);
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
    let store = connect(url).await?;
    if let AnyStore::MySql(m) = &store {
        if url.contains(',') {
            watch_node(m.pool().clone(), Arc::clone(&ledger));
        }
    }
    // trims often, so that trimming runs under the faults too (it never drops an entry
    // a consumer has not acknowledged)
    let relay = StreamRelay::open(
        redis_url,
        RelayOptions::new(stream).trim_interval(Some(Duration::from_secs(2))),
    )?;
    let notifier = store.native_notifier()?;
    let (saga, saga_steps) = crate::saga::steps(store.clone(), url, effects, barrier).await?;
    let store = LedgerStore {
        inner: store,
        ledger: Arc::clone(&ledger),
    };
    let options = HandlerOptions::default().concurrency(16).queue_capacity(32);
    let mut builder = Engine::builder(store)
        .config(engine_config())
        .handler(
            OK,
            Run {
                ledger: Arc::clone(&ledger),
                always_fail: false,
            },
            options.clone(),
        )
        .handler(
            HELD,
            Run {
                ledger: Arc::clone(&ledger),
                always_fail: false,
            },
            options.clone(),
        )
        .handler(
            LIMITED,
            Run {
                ledger: Arc::clone(&ledger),
                always_fail: false,
            },
            options.clone(),
        )
        .handler(
            RATED,
            Run {
                ledger: Arc::clone(&ledger),
                always_fail: false,
            },
            options.clone(),
        )
        .handler(
            FAIL,
            Run {
                ledger: Arc::clone(&ledger),
                always_fail: true,
            },
            options.clone(),
        )
        .handler(
            RELAY,
            Relay {
                ledger: Arc::clone(&ledger),
                relay,
            },
            options.clone(),
        )
        .saga(saga, saga_steps, options);
    if let Some(n) = notifier {
        builder = builder.notifier(n);
    }
    let engine = builder.start()?;
    ledger.line(format!("O {} {}", engine.owner(), std::process::id()));
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let stop_file = ledger_path
        .parent()
        .unwrap_or(Path::new("."))
        .join(crate::driver::STOP_WRITING);
    let mut producing = tokio::spawn(produce(
        engine.clone(),
        Arc::clone(&ledger),
        orders.to_owned(),
        Arc::clone(&stop),
        stop_file,
    ));
    term.recv().await;
    // a transaction under way finishes, its claimed task handed over (a graceful stop
    // leaves nothing running); one held up by a fault is given up after a while
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    if tokio::time::timeout(Duration::from_secs(5), &mut producing)
        .await
        .is_err()
    {
        producing.abort();
    }
    engine.shutdown().await;
    ledger.line(format!("G {}", now_ms()));
    Ok(())
}

/// How long after its commit one of the worker's claimed tasks in four is handed over.
const HAND_OVER_LATE: Duration = Duration::from_millis(500);

/// How often a worker writes a business transaction of its own.
const PRODUCE_EVERY: Duration = Duration::from_millis(250);

/// The worker's own business transactions, until the process ends: an order row and
/// its task, the task claimed for this engine in the same transaction
/// (`Engine::claim_in`), run after the commit (`run_claimed`). One in ten rolls back. A
/// kill between the commit and the run leaves the task running under a dead owner: the
/// sweep gives it back after `dead_after`. The ledger gets `p` before the commit is sent,
/// `P` with what it answered, and the claim (`C`) once committed. Stops at `stop`, after
/// the transaction under way, or once the driver has made `stop_file` (it stops writing
/// before its last fault).
async fn produce(
    engine: Engine<LedgerStore<AnyStore>>,
    ledger: Arc<Ledger>,
    orders: String,
    stop: Arc<std::sync::atomic::AtomicBool>,
    stop_file: std::path::PathBuf,
) {
    let pid = std::process::id();
    let mut tick = tokio::time::interval(PRODUCE_EVERY);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    for n in 0u64.. {
        tick.tick().await;
        if stop.load(std::sync::atomic::Ordering::Relaxed) || stop_file.exists() {
            return;
        }
        let key = format!("w{pid}-{n}");
        let rollback = n % 10 == 9;
        let task = NewTask::new(OK, &key)
            .json(&Work {
                ms: 10 + n % 50,
                flaky: n % 10 == 4,
            })
            .retry(RetryPolicy::fixed(50, Duration::from_millis(100)));
        ledger.line(format!("p {key} {OK}"));
        let sent = now_ms();
        let (outcome, claimed) = claimed_in_business(&engine, &orders, &key, &task, rollback).await;
        ledger.line(format!("P {key} {OK} {outcome}"));
        if let Some(claimed) = claimed {
            if outcome == 'C' {
                if let Some(lease) = claimed.lease() {
                    let (task, token) = (lease.task_id, lease.token);
                    ledger.line(format!("C {task} {token} {sent} {}", now_ms()));
                }
                // one in four is handed over late, as by an application busy after its
                // commit: a kill lands in that window often enough to leave tasks the
                // sweep must take over
                if n % 4 == 1 {
                    tokio::time::sleep(HAND_OVER_LATE).await;
                }
                engine.run_claimed(claimed).await;
            }
        }
    }
}

/// One business transaction on the backend's native connection: the order row, the task,
/// its claim; committed unless `rollback`. What became of it (`C`ommitted, `R`olled back,
/// `U`nknown: the commit's answer was lost), and the claim.
async fn claimed_in_business(
    engine: &Engine<LedgerStore<AnyStore>>,
    orders: &str,
    key: &str,
    task: &NewTask,
    rollback: bool,
) -> (char, Option<Claimed>) {
    let any = &engine.store().inner;
    match any {
        AnyStore::Sqlite(s) => {
            let (engine, any, task) = (engine.clone(), any.clone(), task.clone());
            let insert = format!("INSERT INTO {orders} (biz_key) VALUES (?1)");
            let key = key.to_owned();
            let done = s
                .transaction(move |tx| {
                    tx.execute(&insert, [&key]).map_err(|e| {
                        backstop::Error::new(
                            backstop::ErrorKind::Unexpected,
                            "order",
                            e.to_string(),
                        )
                    })?;
                    let e = tx.enqueue(&task)?;
                    let claimed = engine.claim_blocking_with(&any, &mut tx.connection(), &e)?;
                    if rollback {
                        tx.rollback();
                    }
                    Ok::<_, backstop::Error>(claimed)
                })
                .await;
            match done {
                Ok(_) if rollback => ('R', None),
                Ok(claimed) => ('C', Some(claimed)),
                // the closure's errors roll back; a failed commit's answer is unknown
                Err(_) => ('U', None),
            }
        }
        AnyStore::Postgres(p) => {
            let Ok(mut client) = p.client().await else {
                return ('R', None);
            };
            let Ok(tx) = client.transaction().await else {
                return ('R', None);
            };
            let insert = format!("INSERT INTO {orders} (biz_key) VALUES ($1)");
            if tx.execute(insert.as_str(), &[&key]).await.is_err() {
                return ('R', None);
            }
            let Ok(e) = p.enqueue_tx(&tx, task).await else {
                return ('R', None);
            };
            let Ok(claimed) = engine
                .claim_in_with(any, &mut p.tx_connection(&tx), &e)
                .await
            else {
                return ('R', None);
            };
            if rollback {
                let _ = tx.rollback().await;
                return ('R', None);
            }
            match tx.commit().await {
                Ok(()) => ('C', Some(claimed)),
                Err(_) => ('U', None),
            }
        }
        AnyStore::MySql(m) => {
            let Ok(mut tx) = m.pool().begin().await else {
                return ('R', None);
            };
            let insert = sqlx::AssertSqlSafe(format!("INSERT INTO {orders} (biz_key) VALUES (?)"));
            if sqlx::query(insert)
                .bind(key)
                .execute(&mut *tx)
                .await
                .is_err()
            {
                return ('R', None);
            }
            let Ok(e) = m.enqueue_tx(&mut tx, task).await else {
                return ('R', None);
            };
            let Ok(claimed) = engine.claim_in_with(any, &mut *tx, &e).await else {
                return ('R', None);
            };
            if rollback {
                let _ = tx.rollback().await;
                return ('R', None);
            }
            match tx.commit().await {
                Ok(()) => ('C', Some(claimed)),
                Err(_) => ('U', None),
            }
        }
        _ => ('R', None),
    }
}
