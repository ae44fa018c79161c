//! `backstop queues`: each event type's queue (paused or running, its concurrency and
//! rate limits, its backlog), and an operator's pause, resume or limit of one
//! ([`TaskStore::set_queue`]), audited.
//!
//! A change asks no confirmation: it is undone by its opposite, and each is logged with
//! who and why.

use backstop::console::queues::{queue_json, queue_log_json, queue_views, QueueView};
use backstop::{AnyStore, Audit, QueueChange, TaskStore};
use clap::{Args, Subcommand};

use crate::{print_rows, time, Outcome};

#[derive(Subcommand, Debug)]
pub(crate) enum QueuesCommand {
    /// Every event type: paused or active, its pending, running and failed tasks, when
    /// an engine last handled it.
    List,
    /// One event type's queue and its operators' log (pauses and resumes).
    Show {
        /// The event type.
        event_type: String,
    },
    /// Stop claiming the event type's tasks on every instance (within a poll); enqueues
    /// go on, running tasks finish.
    Pause(QueueArgs),
    /// Claim the event type's tasks again.
    Resume(QueueArgs),
    /// Set the event type's global concurrency limit (at most N of its tasks run at
    /// once across every instance), or remove it with `off`.
    Limit {
        #[command(flatten)]
        args: QueueArgs,
        /// The limit (1 to 100000), or `off`.
        limit: String,
    },
    /// Set the event type's rate limit (at most N of its tasks start in any window,
    /// across every instance), or remove it with `off`.
    Rate {
        #[command(flatten)]
        args: QueueArgs,
        /// `N/WINDOW` (`100/1m`, `5/30s`; N 1 to 100000, the window 1s to 1d), or
        /// `off`.
        rate: String,
    },
    /// Hold the event type's limits per partition key (`on`: at most N of one key's
    /// tasks at once, N starts of one key's per window; tasks without a key share one
    /// partition), or for the type as a whole (`off`).
    Partition {
        #[command(flatten)]
        args: QueueArgs,
        /// `on` or `off`.
        state: String,
    },
}

#[derive(Args, Debug)]
pub(crate) struct QueueArgs {
    /// The event type.
    event_type: String,
    /// Who does it, for the queue's log (default: $BACKSTOP_OPERATOR, then $USER).
    #[arg(long)]
    operator: Option<String>,
    /// Why, for the queue's log.
    #[arg(long, default_value = "")]
    reason: String,
}

pub(crate) async fn run(store: &AnyStore, command: QueuesCommand, json: bool) -> Outcome {
    match command {
        QueuesCommand::List => {
            let views = queue_views(store).await?;
            if json {
                let all: Vec<_> = views.iter().map(queue_json).collect();
                println!("{}", serde_json::Value::Array(all));
            } else {
                print_queues(&views);
            }
            Ok(())
        }
        QueuesCommand::Show { event_type } => {
            let log = store.queue_log(&event_type).await?;
            let view = queue_views(store)
                .await?
                .into_iter()
                .find(|v| v.event_type == event_type);
            if json {
                let mut doc = view
                    .as_ref()
                    .map(queue_json)
                    .unwrap_or_else(|| serde_json::json!({"event_type": event_type}));
                doc["log"] = log.iter().map(queue_log_json).collect();
                println!("{doc}");
                return Ok(());
            }
            match &view {
                Some(v) => print_queues(std::slice::from_ref(v)),
                None => println!("{event_type}: no tasks, no handler, never paused"),
            }
            println!("log");
            if log.is_empty() {
                println!("  (no operator changes)");
            }
            for e in &log {
                println!(
                    "  {}  {:<16}  {}  {}",
                    time(&e.at),
                    e.action,
                    e.operator,
                    e.reason
                );
            }
            Ok(())
        }
        QueuesCommand::Pause(a) => change(store, QueueChange::Pause, a, json).await,
        QueuesCommand::Resume(a) => change(store, QueueChange::Resume, a, json).await,
        QueuesCommand::Limit { args, limit } => {
            let n = match limit.as_str() {
                "off" => None,
                n => Some(n.parse::<u32>().map_err(|_| {
                    backstop::Error::invalid_input(
                        "set_queue",
                        format!("concurrency: {n:?} is not a number (1 to 100000) or off"),
                    )
                })?),
            };
            change(store, QueueChange::Concurrency(n), args, json).await
        }
        QueuesCommand::Rate { args, rate } => {
            let bad = |why: String| backstop::Error::invalid_input("set_queue", why);
            let r = match rate.split_once('/') {
                None if rate == "off" => None,
                None => {
                    return Err(
                        bad(format!("rate: {rate:?} is not N/WINDOW (100/1m) or off")).into(),
                    )
                }
                Some((n, per)) => Some(backstop::RateLimit::new(
                    n.parse()
                        .map_err(|_| bad(format!("rate: {n:?} is not a number of starts")))?,
                    backstop::console::ops::parse_age(per).map_err(|_| {
                        bad(format!(
                            "rate: the window {per:?} is not a duration in whole s, m, h or d \
                             (30s, 1m, 1h, 1d)"
                        ))
                    })?,
                )),
            };
            change(store, QueueChange::Rate(r), args, json).await
        }
        QueuesCommand::Partition { args, state } => {
            let on = match state.as_str() {
                "on" => true,
                "off" => false,
                other => {
                    return Err(backstop::Error::invalid_input(
                        "set_queue",
                        format!("partition: {other:?} is not on or off"),
                    )
                    .into())
                }
            };
            change(store, QueueChange::Partition(on), args, json).await
        }
    }
}

async fn change(store: &AnyStore, change: QueueChange, a: QueueArgs, json: bool) -> Outcome {
    let audit = Audit::new(crate::operator(a.operator), a.reason);
    let q = store.set_queue(&a.event_type, change, &audit).await?;
    let state = if q.paused { "paused" } else { "active" };
    let mut limits = Vec::new();
    if let Some(n) = q.concurrency {
        limits.push(format!("at most {n} at once"));
    }
    if let Some(r) = q.rate {
        limits.push(format!(
            "at most {} starts per {}s",
            r.starts,
            r.per.as_secs()
        ));
    }
    let limit = match (limits.is_empty(), q.partitioned) {
        (true, false) => "no limit".to_owned(),
        (true, true) => "no limit (partitioned)".to_owned(),
        (false, false) => limits.join(", "),
        (false, true) => format!("{} per partition key", limits.join(", ")),
    };
    if json {
        println!(
            "{}",
            serde_json::json!({
                "action": change.action(), "event_type": q.event_type, "paused": q.paused,
                "concurrency": q.concurrency, "changed_at": q.updated_at.to_rfc3339(),
                "partitioned": q.partitioned,
                "rate": q.rate.map(|r| serde_json::json!({"starts": r.starts, "per_secs": r.per.as_secs()})),
            })
        );
    } else {
        println!(
            "done: {} {}; it is {state}, {limit}",
            change.action(),
            q.event_type
        );
    }
    Ok(())
}

fn print_queues(views: &[QueueView]) {
    if views.is_empty() {
        println!("(no queues: no tasks, handlers or settings yet)");
        return;
    }
    let mut rows = vec![[
        "EVENT TYPE",
        "STATE",
        "LIMIT",
        "PENDING",
        "RUNNING",
        "FAILED",
        "HANDLED",
        "CHANGED",
    ]
    .map(String::from)
    .to_vec()];
    let when = |t: &Option<chrono::DateTime<chrono::Utc>>| t.as_ref().map_or("-".into(), time);
    for v in views {
        rows.push(vec![
            v.event_type.clone(),
            if v.paused { "paused" } else { "active" }.into(),
            backstop::console::queues::limits_text(v),
            v.pending.to_string(),
            v.running.to_string(),
            v.failed.to_string(),
            when(&v.handled_at),
            when(&v.changed_at),
        ]);
    }
    print_rows(&mut std::io::stdout(), &rows);
}
