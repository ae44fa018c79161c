//! The queues an operator sees: every event type the fleet knows — handled by an engine,
//! holding tasks, or set by an operator — with its settings (paused or running, its
//! global concurrency and rate limits) and its backlog. Shared by `backstop queues list` and the console's queues view.

use std::collections::BTreeMap;

use backstop_core::{QueueLogEntry, RateLimit, Result, Status, TaskStore};
use chrono::{DateTime, Utc};

/// One event type's queue, as an operator sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct QueueView {
    /// The event type.
    pub event_type: String,
    /// Whether no claim takes its tasks ([`TaskStore::set_queue`]).
    pub paused: bool,
    /// Its global concurrency limit, if it has one.
    pub concurrency: Option<u32>,
    /// Its rate limit, if it has one.
    pub rate: Option<RateLimit>,
    /// Whether its limits hold per partition key.
    pub partitioned: bool,
    /// When its setting last changed, if an operator ever set it.
    pub changed_at: Option<DateTime<Utc>>,
    /// When an engine with a handler for it last said it runs, if any ever did.
    pub handled_at: Option<DateTime<Utc>>,
    /// Its pending tasks.
    pub pending: u64,
    /// Its running tasks.
    pub running: u64,
    /// Its failed tasks.
    pub failed: u64,
}

impl QueueView {
    /// The queue of `event_type` with nothing set and nothing in it.
    pub fn named(event_type: &str) -> QueueView {
        QueueView {
            event_type: event_type.to_owned(),
            paused: false,
            concurrency: None,
            rate: None,
            partitioned: false,
            changed_at: None,
            handled_at: None,
            pending: 0,
            running: 0,
            failed: 0,
        }
    }
}

/// Every queue: the union of the types with settings, with a handler, and with tasks in
/// the backlog (pending, running, failed, cancelled), by name. Three reads: the settings,
/// the handlers registry and the backlog (through the status indexes).
pub async fn queue_views<S: TaskStore + ?Sized>(store: &S) -> Result<Vec<QueueView>> {
    let mut views: BTreeMap<String, QueueView> = BTreeMap::new();
    let view = QueueView::named;
    for q in store.queues().await? {
        let v = views
            .entry(q.event_type.clone())
            .or_insert_with(|| view(&q.event_type));
        v.paused = q.paused;
        v.concurrency = q.concurrency;
        v.rate = q.rate;
        v.partitioned = q.partitioned;
        v.changed_at = Some(q.updated_at);
    }
    for h in store.event_types().await? {
        let v = views
            .entry(h.event_type.clone())
            .or_insert_with(|| view(&h.event_type));
        v.handled_at = Some(h.last_seen);
    }
    for c in store.backlog().await?.counts {
        let v = views
            .entry(c.event_type.clone())
            .or_insert_with(|| view(&c.event_type));
        match c.status {
            Status::Pending => v.pending += c.count,
            Status::Running => v.running += c.count,
            Status::Failed => v.failed += c.count,
            _ => {}
        }
    }
    Ok(views.into_values().collect())
}

/// A queue's limits in words: `3 at once, 100 per 60s`, `100 per 60s`, `3 at once per
/// partition`, or `-` for none.
///
/// ```
/// # use backstop_console::queues::limits_text;
/// # let mut v = backstop_console::queues::QueueView::named("E");
/// v.concurrency = Some(3);
/// assert_eq!(limits_text(&v), "3 at once");
/// v.partitioned = true;
/// assert_eq!(limits_text(&v), "3 at once per partition");
/// ```
pub fn limits_text(q: &QueueView) -> String {
    let mut parts = Vec::new();
    if let Some(n) = q.concurrency {
        parts.push(format!("{n} at once"));
    }
    if let Some(r) = q.rate {
        parts.push(format!("{} per {}s", r.starts, r.per.as_secs()));
    }
    match (parts.is_empty(), q.partitioned) {
        (true, _) => "-".to_owned(),
        (false, false) => parts.join(", "),
        (false, true) => format!("{} per partition", parts.join(", ")),
    }
}

/// A queue as JSON, for scripts and the console's API.
pub fn queue_json(q: &QueueView) -> serde_json::Value {
    serde_json::json!({
        "event_type": q.event_type,
        "paused": q.paused,
        "concurrency": q.concurrency,
        "rate": q.rate.map(|r| serde_json::json!({"starts": r.starts, "per_secs": r.per.as_secs()})),
        "partitioned": q.partitioned,
        "changed_at": q.changed_at.map(|t| t.to_rfc3339()),
        "handled_at": q.handled_at.map(|t| t.to_rfc3339()),
        "pending": q.pending,
        "running": q.running,
        "failed": q.failed,
    })
}

/// An entry of a queue's operators' log as JSON.
pub fn queue_log_json(e: &QueueLogEntry) -> serde_json::Value {
    serde_json::json!({
        "action": e.action,
        "operator": e.operator,
        "reason": e.reason,
        "at": e.at.to_rfc3339(),
    })
}
