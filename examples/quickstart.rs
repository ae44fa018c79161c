//! Quickstart on the embedded SQLite backend — no server needed.
//!
//! 1. An order row and its PAY_ORDER task are written in one local transaction; right
//!    after commit the engine runs the task ahead (no poll interval in between).
//! 2. A flaky warehouse fails twice; the poller (the safety net) retries it with backoff
//!    and it succeeds on the third attempt.
//! 3. An invoice service is down for longer than the task's attempts last: the task parks
//!    as failed; an "operator" fixes the service and resets the task, which then succeeds.
//! 4. A short summary: what ran, when, and how many attempts it took.
//!
//! Run it with `cargo run --example quickstart`.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use backstop::sqlite::SqliteStore;
use backstop::{
    kind_fn, Audit, Context, Engine, EngineConfig, HandlerError, HandlerOptions, NewTask,
    RetryPolicy, Status, TaskId, TaskKind, TaskStore,
};

type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// What happened, when (ms since start).
#[derive(Clone)]
struct Log(Arc<(Instant, Mutex<Vec<String>>)>);

impl Log {
    fn say(&self, what: impl Into<String>) {
        let line = format!("{:>5} ms  {}", self.0 .0.elapsed().as_millis(), what.into());
        println!("{line}");
        self.0
             .1
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(line);
    }
}

// The task kinds: each payload type carries its event type, business key and retry
// policy, so the code that enqueues a task and its handler cannot disagree on them.

#[derive(serde::Serialize, serde::Deserialize)]
struct PayOrder {
    order_id: u64,
    amount_cents: u64,
}

impl TaskKind for PayOrder {
    const EVENT_TYPE: &'static str = "PAY_ORDER";
    fn biz_key(&self) -> String {
        format!("order-{}", self.order_id)
    }
}

#[derive(serde::Serialize, serde::Deserialize)]
struct NotifyWarehouse {
    order_id: u64,
}

impl TaskKind for NotifyWarehouse {
    const EVENT_TYPE: &'static str = "NOTIFY_WAREHOUSE";
    fn biz_key(&self) -> String {
        format!("order-{}", self.order_id)
    }
    fn retry() -> RetryPolicy {
        RetryPolicy::fixed(5, Duration::from_millis(200))
    }
}

#[derive(serde::Serialize, serde::Deserialize)]
struct IssueInvoice {
    order_id: u64,
}

impl TaskKind for IssueInvoice {
    const EVENT_TYPE: &'static str = "ISSUE_INVOICE";
    fn biz_key(&self) -> String {
        format!("order-{}", self.order_id)
    }
    fn retry() -> RetryPolicy {
        RetryPolicy::fixed(2, Duration::from_millis(200))
    }
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let dir = std::env::temp_dir().join(format!("backstop-quickstart-{}", std::process::id()));
    let result = match std::fs::create_dir_all(&dir) {
        Ok(()) => run(&dir).await,
        Err(e) => Err(format!("cannot create {}: {e}", dir.display()).into()),
    };
    let _ = std::fs::remove_dir_all(&dir);
    // errors as a user reads them (Display), not as a debugger does
    if let Err(e) = result {
        eprintln!("error: {e}");
        std::process::exit(1);
    }
}

async fn run(dir: &std::path::Path) -> Result<(), BoxError> {
    let log = Log(Arc::new((Instant::now(), Mutex::new(Vec::new()))));
    let store = SqliteStore::open(dir.join("shop.db")).await?;
    store.migrate().await?;
    store
        .transaction(|tx| {
            tx.execute_batch("CREATE TABLE orders (id INTEGER PRIMARY KEY, item TEXT NOT NULL)")?;
            Ok::<_, BoxError>(())
        })
        .await?;

    let warehouse_calls = Arc::new(AtomicUsize::new(0));
    let invoice_up = Arc::new(AtomicBool::new(false));
    let engine = Engine::builder(store.clone())
        .config(
            EngineConfig::default()
                .poll_interval(Duration::from_millis(100))
                .first_poll_delay(Duration::from_millis(100)),
        )
        .kind(
            {
                let log = log.clone();
                kind_fn(move |pay: PayOrder, cx: Context| {
                    let log = log.clone();
                    async move {
                        log.say(format!(
                            "PAY_ORDER        charged order {} ({} cents), attempt {}",
                            pay.order_id,
                            pay.amount_cents,
                            cx.task().attempts
                        ));
                        Ok::<_, HandlerError>(())
                    }
                })
            },
            HandlerOptions::default(),
        )
        .kind(
            {
                let (log, calls) = (log.clone(), Arc::clone(&warehouse_calls));
                kind_fn(move |_: NotifyWarehouse, cx: Context| {
                    let (log, calls) = (log.clone(), Arc::clone(&calls));
                    async move {
                        if calls.fetch_add(1, Ordering::SeqCst) < 2 {
                            log.say(format!(
                                "NOTIFY_WAREHOUSE timed out (attempt {}), will retry",
                                cx.task().attempts
                            ));
                            return Err(HandlerError::retry("warehouse timed out"));
                        }
                        log.say(format!(
                            "NOTIFY_WAREHOUSE notified (attempt {})",
                            cx.task().attempts
                        ));
                        Ok(())
                    }
                })
            },
            HandlerOptions::default(),
        )
        .kind(
            {
                let (log, up) = (log.clone(), Arc::clone(&invoice_up));
                kind_fn(move |_: IssueInvoice, cx: Context| {
                    let (log, up) = (log.clone(), Arc::clone(&up));
                    async move {
                        if !up.load(Ordering::SeqCst) {
                            log.say(format!(
                                "ISSUE_INVOICE    invoice service down (attempt {} of {})",
                                cx.task().attempts,
                                cx.task().retry.max_attempts
                            ));
                            return Err(HandlerError::retry("invoice service unavailable"));
                        }
                        log.say(format!(
                            "ISSUE_INVOICE    invoice issued (attempt {})",
                            cx.task().attempts
                        ));
                        Ok(())
                    }
                })
            },
            HandlerOptions::default(),
        )
        .start()?;

    // 1. The order and its tasks in ONE local transaction (`tx.enqueue` for one task,
    //    `tx.enqueue_many` for several at once); run ahead after commit.
    let (pay, notify, invoice) = (
        NewTask::of(&PayOrder {
            order_id: 42,
            amount_cents: 450,
        }),
        NewTask::of(&NotifyWarehouse { order_id: 42 }),
        NewTask::of(&IssueInvoice { order_id: 42 }),
    );
    let enqueued = store
        .transaction(move |tx| {
            tx.execute("INSERT INTO orders (id, item) VALUES (42, 'coffee')", [])?;
            Ok::<_, BoxError>(tx.enqueue_many(&[pay, notify, invoice])?)
        })
        .await?;
    log.say("committed order 42 with 3 tasks");
    for e in &enqueued {
        engine.run_now(e).await; // best effort: never fails; the poller is the safety net
    }
    let [pay_id, notify_id, invoice_id] = [enqueued[0].id, enqueued[1].id, enqueued[2].id];

    // 2 and 3. Wait for the retries to play out.
    wait_for(&store, notify_id, Status::Succeeded).await?;
    wait_for(&store, invoice_id, Status::Failed).await?;
    log.say("ISSUE_INVOICE    parked as failed: an operator fixes the service and resets it");
    invoice_up.store(true, Ordering::SeqCst);
    store
        .reset(
            invoice_id,
            &Audit::new("operator", "invoice service is back"),
        )
        .await?;
    engine.poll_now();
    wait_for(&store, invoice_id, Status::Succeeded).await?;
    engine.shutdown().await;

    // 4. Summary.
    println!("\nsummary");
    println!(
        "  {:<4} {:<17} {:<10} {:<10} {:>8} {:>12}",
        "id", "event_type", "biz_key", "status", "attempts", "done after"
    );
    for id in [pay_id, notify_id, invoice_id] {
        if let Some(t) = store.get(id).await? {
            if t.status != Status::Succeeded {
                return Err(format!("task {id} ended {}", t.status).into());
            }
            println!(
                "  {:<4} {:<17} {:<10} {:<10} {:>8} {:>9} ms",
                t.id,
                t.event_type,
                t.biz_key,
                t.status.to_string(),
                t.attempts,
                (t.updated_at - t.created_at).num_milliseconds()
            );
        }
    }
    let c = engine.counters();
    println!(
        "  engine: {} ran ahead, {} picked up by the poller, {} retried, {} failed, {} succeeded",
        c.run_ahead, c.polled, c.retried, c.failed, c.succeeded
    );
    Ok(())
}

async fn wait_for(store: &SqliteStore, id: TaskId, status: Status) -> Result<(), BoxError> {
    let deadline = Instant::now() + Duration::from_secs(30);
    while store.get(id).await?.map(|t| t.status) != Some(status) {
        if Instant::now() > deadline {
            return Err(format!("task {id} did not become {status}").into());
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    Ok(())
}
