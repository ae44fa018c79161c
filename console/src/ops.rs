//! The operator's actions, shared by the CLI and the web console: what an action would
//! change (a dry run), and the change itself, by id or by filter.

use std::fmt;

use backstop_core::{Audit, Error, ErrorKind, Result, Status, Task, TaskFilter, TaskId, TaskStore};

/// An operator's change of tasks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Action {
    /// Failed or cancelled → pending, attempts 0, due now ([`TaskStore::reset`]).
    Reset,
    /// Pending or running → cancelled ([`TaskStore::cancel`]).
    Cancel,
    /// Remove a task that is not running ([`TaskStore::delete`]).
    Delete,
}

impl Action {
    /// Every action.
    pub const ALL: [Action; 3] = [Action::Reset, Action::Cancel, Action::Delete];

    /// Whether a task in `status` can take this action.
    ///
    /// ```
    /// use backstop_console::ops::Action;
    /// use backstop_core::Status;
    /// assert!(Action::Reset.applies_to(Status::Failed));
    /// assert!(!Action::Delete.applies_to(Status::Running));
    /// // as the store's cancel: pending, waiting (behind an order key) or running
    /// assert!(Action::Cancel.applies_to(Status::Waiting));
    /// ```
    pub fn applies_to(self, status: Status) -> bool {
        match self {
            Action::Reset => matches!(status, Status::Failed | Status::Cancelled),
            Action::Cancel => matches!(status, Status::Pending | Status::Waiting | Status::Running),
            Action::Delete => status != Status::Running,
        }
    }

    /// The statuses this action applies to, in code order.
    pub fn statuses(self) -> Vec<Status> {
        Status::ALL
            .into_iter()
            .filter(|s| self.applies_to(*s))
            .collect()
    }

    /// The verb (`reset`, `cancel`, `delete`).
    pub fn verb(self) -> &'static str {
        match self {
            Action::Reset => "reset",
            Action::Cancel => "cancel",
            Action::Delete => "delete",
        }
    }

    /// The past participle (`reset`, `cancelled`, `deleted`).
    pub fn done(self) -> &'static str {
        match self {
            Action::Reset => "reset",
            Action::Cancel => "cancelled",
            Action::Delete => "deleted",
        }
    }

    /// The action on one task.
    pub async fn on<S: TaskStore + ?Sized>(
        self,
        store: &S,
        id: TaskId,
        audit: &Audit,
    ) -> Result<Task> {
        match self {
            Action::Reset => store.reset(id, audit).await,
            Action::Cancel => store.cancel(id, audit).await,
            Action::Delete => store.delete(id, audit).await,
        }
    }
}

impl fmt::Display for Action {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.verb())
    }
}

impl std::str::FromStr for Action {
    type Err = Error;

    fn from_str(s: &str) -> Result<Action> {
        Action::ALL
            .into_iter()
            .find(|a| a.verb().eq_ignore_ascii_case(s))
            .ok_or_else(|| {
                Error::invalid_input(
                    "parse_action",
                    format!("unknown action {s:?}: use reset, cancel or delete"),
                )
            })
    }
}

/// Which tasks an action is for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Target {
    /// One task.
    Id(TaskId),
    /// Every task matching the filter that the action applies to, at most `limit` of them.
    Filter(TaskFilter),
}

impl Target {
    /// A filter target, refused when the filter names nothing to narrow it down (a bulk
    /// action on "every task" is almost always a slip): at least one of status, event
    /// type, business key, error text or age.
    pub fn filter(filter: TaskFilter) -> Result<Target> {
        if filter.status.is_none()
            && filter.event_type.is_none()
            && filter.biz_key.is_none()
            && filter.error_contains.is_none()
            && filter.older_than.is_none()
        {
            return Err(Error::invalid_input(
                "bulk_action",
                "name a task id or at least one filter (status, event type, key, error text or age)",
            ));
        }
        Ok(Target::Filter(filter))
    }
}

/// What an action did.
#[derive(Debug, Default)]
#[non_exhaustive]
pub struct Applied {
    /// The tasks changed, as the action left them (deleted ones as they were).
    pub done: Vec<Task>,
    /// Tasks that matched when listed but changed meanwhile (another operator or an
    /// engine got there first), with the store's answer.
    pub skipped: Vec<(TaskId, Error)>,
}

/// The tasks `action` would change: for an id, the task if the action applies to it
/// (`NotFound` / `Conflict` otherwise, as the action itself would answer); for a filter,
/// the matching tasks it applies to, at most `filter.limit`, in id order. Nothing is
/// written.
pub async fn plan<S: TaskStore + ?Sized>(
    store: &S,
    action: Action,
    target: &Target,
) -> Result<Vec<Task>> {
    const OP: &str = "plan";
    match target {
        Target::Id(id) => {
            let task = store
                .get(*id)
                .await?
                .ok_or_else(|| Error::task_not_found(OP, *id))?;
            if !action.applies_to(task.status) {
                return Err(Error::new(
                    ErrorKind::Conflict,
                    OP,
                    format!(
                        "task {id} is {}: {action} applies to {}",
                        task.status,
                        list(&action.statuses())
                    ),
                ));
            }
            Ok(vec![task])
        }
        Target::Filter(filter) => {
            let statuses: Vec<Status> = match filter.status {
                Some(s) if action.applies_to(s) => vec![s],
                Some(s) => {
                    return Err(Error::invalid_input(
                        OP,
                        format!(
                            "{action} applies to {}, the filter asks for {s}",
                            list(&action.statuses())
                        ),
                    ))
                }
                None => action.statuses(),
            };
            // one ordered page per status, merged: each status's first `limit` ids
            // hold the first `limit` ids of the union
            let mut tasks = Vec::new();
            for s in statuses {
                tasks.extend(store.list(&filter.clone().status(s)).await?);
            }
            tasks.sort_by_key(|t| t.id);
            tasks.truncate(filter.limit);
            Ok(tasks)
        }
    }
}

/// How many tasks `action` would change on `target` if there were no limit: 1 for a
/// task by id, else every task the filter matches in a status the action applies to (a
/// plan shows at most the filter's `limit` of them). Counted by the store up to its cap
/// ([`MAX_COUNT`](backstop_core::limits::MAX_COUNT)) per status.
pub async fn matching<S: TaskStore + ?Sized>(
    store: &S,
    action: Action,
    target: &Target,
) -> Result<u64> {
    match target {
        Target::Id(_) => Ok(1),
        Target::Filter(filter) => {
            let statuses = match filter.status {
                Some(s) => vec![s],
                None => action.statuses(),
            };
            let mut total = 0;
            for s in statuses {
                total += store.count_matching(&filter.clone().status(s)).await?;
            }
            Ok(total)
        }
    }
}

/// Apply `action` to `target`, audited with `audit`. By id: the task as changed, or the
/// store's error. By filter: each task the [`plan`] lists is changed on its own, with its
/// state checked again in the same statement, so two operators applying one filter at once
/// change each task once; the second finds it changed and skips it.
pub async fn apply<S: TaskStore + ?Sized>(
    store: &S,
    action: Action,
    target: &Target,
    audit: &Audit,
) -> Result<Applied> {
    match target {
        Target::Id(id) => Ok(Applied {
            done: vec![action.on(store, *id, audit).await?],
            skipped: Vec::new(),
        }),
        Target::Filter(filter) if action == Action::Reset => {
            // the store's own bulk reset: candidates, then a fenced reset of each
            let done = store.reset_matching(filter, audit).await?;
            Ok(Applied {
                done,
                skipped: Vec::new(),
            })
        }
        Target::Filter(_) => {
            let mut applied = Applied::default();
            for task in plan(store, action, target).await? {
                match action.on(store, task.id, audit).await {
                    Ok(t) => applied.done.push(t),
                    Err(e) if matches!(e.kind(), ErrorKind::NotFound | ErrorKind::Conflict) => {
                        applied.skipped.push((task.id, e))
                    }
                    Err(e) => return Err(e),
                }
            }
            Ok(applied)
        }
    }
}

fn list(statuses: &[Status]) -> String {
    let names: Vec<String> = statuses.iter().map(Status::to_string).collect();
    match names.split_last() {
        Some((last, rest)) if !rest.is_empty() => format!("{} or {last}", rest.join(", ")),
        _ => names.join(""),
    }
}

/// Parse an age like `90s`, `15m`, `2h`, `7d` (or a plain number of seconds).
///
/// ```
/// use std::time::Duration;
/// assert_eq!(backstop_console::ops::parse_age("2h").unwrap(), Duration::from_secs(7200));
/// assert!(backstop_console::ops::parse_age("soon").is_err());
/// ```
pub fn parse_age(s: &str) -> Result<std::time::Duration> {
    let s = s.trim();
    let (num, unit) = s.split_at(s.find(|c: char| !c.is_ascii_digit()).unwrap_or(s.len()));
    let n: u64 = num.parse().map_err(|_| {
        Error::invalid_input(
            "parse_age",
            format!("bad age {s:?}: use a number and s, m, h or d (90s, 15m, 2h, 7d)"),
        )
    })?;
    let secs = match unit {
        "" | "s" => 1,
        "m" => 60,
        "h" => 3600,
        "d" => 86_400,
        _ => {
            return Err(Error::invalid_input(
                "parse_age",
                format!("bad age {s:?}: use a number and s, m, h or d (90s, 15m, 2h, 7d)"),
            ))
        }
    };
    Ok(std::time::Duration::from_secs(n.saturating_mul(secs)))
}

/// A task as JSON, for scripts and the console's API: every column, times in RFC 3339,
/// the payload as JSON (as a string if it is not valid JSON), the retry policy spelled
/// out. `payload` is the payload to show (redacted, say).
pub fn task_json(task: &Task, payload: &str) -> serde_json::Value {
    let payload = json_or_text(payload);
    serde_json::json!({
        "id": task.id,
        "event_type": task.event_type,
        "biz_key": task.biz_key,
        "status": task.status.to_string(),
        "attempts": task.attempts,
        "max_attempts": task.retry.max_attempts,
        "snoozes": task.snoozes,
        "retry": {
            "strategy": task.retry.backoff.strategy(),
            "interval_ms": task.retry.backoff.interval().as_millis() as u64,
            "max_interval_ms": task.retry.backoff.max_interval().as_millis() as u64,
        },
        "next_run_at": task.next_run_at.to_rfc3339(),
        "owner": task.owner,
        "lease": task.lease,
        "last_error": task.last_error,
        "created_at": task.created_at.to_rfc3339(),
        "updated_at": task.updated_at.to_rfc3339(),
        "payload": payload,
        "tags": task.tags,
        "metadata": task.metadata.as_deref().map(json_or_text),
        "output": task.output.as_deref().map(json_or_text),
        "traceparent": task.traceparent,
        "partition": task.partition,
    })
}

/// `text` as JSON, or as a JSON string when it does not parse.
fn json_or_text(text: &str) -> serde_json::Value {
    serde_json::from_str(text).unwrap_or_else(|_| serde_json::Value::String(text.to_owned()))
}

/// An audit entry as JSON.
pub fn audit_json(entry: &backstop_core::AuditEntry) -> serde_json::Value {
    serde_json::json!({
        "action": entry.action,
        "operator": entry.operator,
        "reason": entry.reason,
        "at": entry.at.to_rfc3339(),
    })
}
