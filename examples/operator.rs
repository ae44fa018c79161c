//! The operator's scenario of the guide (Operating, the `backstop` command): a handler
//! fails on purpose, the task parks as failed, the `backstop` command lists it with its
//! error and resets it, and it succeeds.
//!
//! ```text
//! cargo run --example operator -- fail     # SEND_EMAIL order-42 fails twice and parks
//! cargo run -p backstop-cli -- --url sqlite:operator.db tasks list --status failed
//! cargo run -p backstop-cli -- --url sqlite:operator.db tasks reset --event-type SEND_EMAIL --status failed --yes
//! cargo run --example operator -- work     # the mail server is back: it succeeds
//! ```
//!
//! The database is `BACKSTOP_URL` (any backend the example's features enable), by default
//! `sqlite:operator.db` in the current directory.

use std::time::{Duration, Instant};

use backstop::{
    kind_fn, Context, Engine, EngineConfig, HandlerError, HandlerOptions, RetryPolicy, Status,
    TaskKind, TaskStore,
};

type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// The task kind: a confirmation mail for an order.
#[derive(serde::Serialize, serde::Deserialize)]
struct SendEmail {
    order: String,
    to: String,
    template: String,
}

impl TaskKind for SendEmail {
    const EVENT_TYPE: &'static str = "SEND_EMAIL";
    fn biz_key(&self) -> String {
        self.order.clone()
    }
    fn retry() -> RetryPolicy {
        RetryPolicy::fixed(2, Duration::from_millis(300))
    }
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    if let Err(e) = run().await {
        eprintln!("error: {e}");
        std::process::exit(1);
    }
}

async fn run() -> Result<(), BoxError> {
    let mode = std::env::args().nth(1).unwrap_or_default();
    let smtp_up = match mode.as_str() {
        "fail" => false,
        "work" => true,
        _ => return Err("usage: operator fail|work".into()),
    };
    let url = std::env::var("BACKSTOP_URL").unwrap_or_else(|_| "sqlite:operator.db".into());
    let store = backstop::connect(&url).await?;
    store.migrate().await?;
    let engine = Engine::builder(store.clone())
        .config(
            EngineConfig::default()
                .poll_interval(Duration::from_millis(200))
                .first_poll_delay(Duration::from_millis(0)),
        )
        .kind(
            kind_fn(move |mail: SendEmail, cx: Context| async move {
                if !smtp_up {
                    println!(
                        "SEND_EMAIL {}: attempt {} failed",
                        cx.task().biz_key,
                        cx.task().attempts
                    );
                    return Err(HandlerError::retry(
                        "smtp: connection refused by mail.example.com",
                    ));
                }
                println!(
                    "SEND_EMAIL {}: sent {} to {} (attempt {})",
                    cx.task().biz_key,
                    mail.template,
                    mail.to,
                    cx.task().attempts
                );
                Ok::<_, HandlerError>(())
            }),
            HandlerOptions::default(),
        )
        .start()?;
    let wanted = if smtp_up {
        Status::Succeeded
    } else {
        Status::Failed
    };
    let id = if smtp_up {
        // the task the `fail` run enqueued (and the operator reset)
        let found = store
            .list(
                &backstop::TaskFilter::default()
                    .event_type("SEND_EMAIL")
                    .biz_key("order-42"),
            )
            .await?;
        found
            .first()
            .map(|t| t.id)
            .ok_or("no task for order-42: run `operator fail` first")?
    } else {
        let (enqueued, _) = engine
            .enqueue(SendEmail {
                order: "order-42".into(),
                to: "ada@example.com".into(),
                template: "order-confirmed".into(),
            })
            .await?;
        if !enqueued.created {
            return Err(format!(
                "order-42 already has task {}: start from a fresh database",
                enqueued.id
            )
            .into());
        }
        enqueued.id
    };
    let started = Instant::now();
    let task = loop {
        let task = store.get(id).await?.ok_or("the task disappeared")?;
        if task.status == wanted {
            break task;
        }
        if task.status == Status::Failed && smtp_up {
            return Err(
                format!("task {id} is failed: reset it first (backstop tasks reset {id})").into(),
            );
        }
        if started.elapsed() > Duration::from_secs(30) {
            return Err(format!("task {id} is still {} after 30 s", task.status).into());
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    engine.shutdown().await;
    match task.status {
        Status::Failed => println!(
            "task {id} parked as failed after {} attempts: {}",
            task.attempts,
            task.last_error.unwrap_or_default()
        ),
        _ => println!("task {id} succeeded"),
    }
    Ok(())
}
