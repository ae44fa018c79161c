//! The worker: a child process running the engine against the database (through the
//! driver's proxy on the server backends) until it is killed, stopped, or asked to stop
//! with SIGTERM (a graceful shutdown). Everything it does lands in its ledger.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use backstop::redis::{RelayOptions, StreamRelay};
use backstop::AnyStore;
use backstop_core::{
    async_trait, Engine, EngineConfig, Handler, HandlerError, HandlerOptions, Task, TaskId,
};

use crate::ledger::{now_ms, Ledger, LedgerStore};
use crate::BoxError;

/// The event type whose tasks succeed (some after one failed attempt).
pub const OK: &str = "CHAOS_OK";
/// The event type whose tasks fail every attempt and park as failed.
pub const FAIL: &str = "CHAOS_FAIL";
/// Attempts of a `FAIL` task: each one is a run, the last parks it.
pub const FAIL_ATTEMPTS: u32 = 3;
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
/// suite's handlers, the relay to `stream` on the Redis at `redis_url` among them.
pub async fn run(
    url: &str,
    ledger_path: &Path,
    redis_url: &str,
    stream: &str,
) -> Result<(), BoxError> {
    let ledger = Arc::new(Ledger::open(ledger_path)?);
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
    let store = connect(url).await?;
    // trims often, so that trimming runs under the faults too (it never drops an entry
    // a consumer has not acknowledged)
    let relay = StreamRelay::open(
        redis_url,
        RelayOptions::new(stream).trim_interval(Some(Duration::from_secs(2))),
    )?;
    let notifier = store.native_notifier()?;
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
            options,
        );
    if let Some(n) = notifier {
        builder = builder.notifier(n);
    }
    let engine = builder.start()?;
    ledger.line(format!("O {} {}", engine.owner(), std::process::id()));
    term.recv().await;
    engine.shutdown().await;
    ledger.line(format!("G {}", now_ms()));
    Ok(())
}
