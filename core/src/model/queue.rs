//! Operators' settings of an event type (a *queue*): pause and resume, a global
//! concurrency limit, and their log.
//!
//! A queue is an event type: the tasks of one type are what a setting applies to. A type
//! nobody has set anything for has no row and runs as it always does.

use chrono::{DateTime, Utc};

/// An operator's change of a queue's settings ([`TaskStore::set_queue`]).
///
/// [`TaskStore::set_queue`]: crate::TaskStore::set_queue
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum QueueChange {
    /// Stop claiming the type's tasks: no claim (the poller's batch, run-ahead, a claim
    /// on the caller's transaction, a saga's next step claimed with its report) takes a
    /// task of a paused type. Enqueues go on as before; running tasks finish.
    Pause,
    /// Claim the type's tasks again: the next poll (or wake-up) of every instance takes
    /// them.
    Resume,
    /// Set (`Some(n)`, 1 ≤ n ≤ [`MAX_CONCURRENCY`]) or remove (`None`) the type's
    /// global concurrency limit: at most `n` of its tasks run at once across every
    /// instance sharing the store. Only the batch claim (the poller's) takes a limited
    /// type's tasks: it locks the queue's row, counts the type's running tasks, and
    /// claims at most the room left. A task whose holder died keeps its place until the
    /// dead-worker sweep recycles it.
    Concurrency(Option<u32>),
}

/// The largest global concurrency limit ([`QueueChange::Concurrency`]).
pub const MAX_CONCURRENCY: u32 = 100_000;

impl QueueChange {
    /// The change's name in the queue's operators' log (`pause`, `resume`,
    /// `concurrency 50`, `concurrency off`).
    ///
    /// ```
    /// use backstop_core::QueueChange;
    /// assert_eq!(QueueChange::Pause.action(), "pause");
    /// assert_eq!(QueueChange::Concurrency(Some(50)).action(), "concurrency 50");
    /// assert_eq!(QueueChange::Concurrency(None).action(), "concurrency off");
    /// ```
    pub fn action(self) -> String {
        match self {
            QueueChange::Pause => "pause".to_owned(),
            QueueChange::Resume => "resume".to_owned(),
            QueueChange::Concurrency(Some(n)) => format!("concurrency {n}"),
            QueueChange::Concurrency(None) => "concurrency off".to_owned(),
        }
    }

    /// The change named `action`, as [`action`](Self::action) writes it (not checked
    /// against the bounds: the store refuses a limit out of them).
    ///
    /// ```
    /// use backstop_core::QueueChange;
    /// assert_eq!(QueueChange::parse("resume"), Some(QueueChange::Resume));
    /// assert_eq!(QueueChange::parse("concurrency 8"), Some(QueueChange::Concurrency(Some(8))));
    /// assert_eq!(QueueChange::parse("concurrency off"), Some(QueueChange::Concurrency(None)));
    /// assert_eq!(QueueChange::parse("stop"), None);
    /// assert_eq!(QueueChange::parse("concurrency many"), None);
    /// ```
    pub fn parse(action: &str) -> Option<QueueChange> {
        match action {
            "pause" => Some(QueueChange::Pause),
            "resume" => Some(QueueChange::Resume),
            "concurrency off" => Some(QueueChange::Concurrency(None)),
            _ => {
                let n = action.strip_prefix("concurrency ")?.parse().ok()?;
                Some(QueueChange::Concurrency(Some(n)))
            }
        }
    }

    /// Refuse a limit out of bounds (`InvalidInput` naming the field), for `op`.
    pub(crate) fn check(self, op: &'static str) -> crate::Result<()> {
        match self {
            QueueChange::Concurrency(Some(n)) if n == 0 || n > MAX_CONCURRENCY => {
                Err(crate::Error::invalid_input(
                    op,
                    format!(
                        "concurrency: {n} is out of bounds (1 to {MAX_CONCURRENCY}; to lift \
                         the limit, remove it instead)"
                    ),
                ))
            }
            _ => Ok(()),
        }
    }

    /// The change as a statement binds it: the `paused` and `concurrency` columns' new
    /// values, `None` where the change keeps the column (`concurrency` 0 is no limit).
    ///
    /// ```
    /// use backstop_core::QueueChange;
    /// assert_eq!(QueueChange::Pause.columns(), (Some(1), None));
    /// assert_eq!(QueueChange::Concurrency(None).columns(), (None, Some(0)));
    /// ```
    pub fn columns(self) -> (Option<i16>, Option<i32>) {
        match self {
            QueueChange::Pause => (Some(1), None),
            QueueChange::Resume => (Some(0), None),
            QueueChange::Concurrency(n) => (None, Some(n.map_or(0, |n| n as i32))),
        }
    }

    /// Whether a queue row the change creates holds only what a type with no row has
    /// (not paused, no limit): such a row is not logged (a resume of a type never
    /// paused, a limit removed that was never set).
    ///
    /// ```
    /// use backstop_core::QueueChange;
    /// assert!(QueueChange::Resume.sets_nothing_new());
    /// assert!(!QueueChange::Concurrency(Some(3)).sets_nothing_new());
    /// ```
    pub fn sets_nothing_new(self) -> bool {
        let (paused, concurrency) = self.columns();
        paused.unwrap_or(0) == 0 && concurrency.unwrap_or(0) == 0
    }
}

/// A queue's settings as the store holds them ([`TaskStore::queues`]).
///
/// [`TaskStore::queues`]: crate::TaskStore::queues
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Queue {
    /// The event type.
    pub event_type: String,
    /// Whether no claim takes its tasks ([`QueueChange::Pause`]).
    pub paused: bool,
    /// Its global concurrency limit, if it has one ([`QueueChange::Concurrency`]).
    pub concurrency: Option<u32>,
    /// When a setting last changed (database time).
    pub updated_at: DateTime<Utc>,
}

/// One entry of a queue's operators' log ([`TaskStore::queue_log`]): a change of its
/// settings, by whom and why.
///
/// [`TaskStore::queue_log`]: crate::TaskStore::queue_log
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct QueueLogEntry {
    /// The event type.
    pub event_type: String,
    /// What was done (`pause`, `resume`).
    pub action: String,
    /// Who did it.
    pub operator: String,
    /// Why.
    pub reason: String,
    /// When (database time).
    pub at: DateTime<Utc>,
}
