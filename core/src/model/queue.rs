//! Operators' settings of an event type (a *queue*): pause and resume, and their log.
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
}

impl QueueChange {
    /// The change's name in the queue's operators' log (`pause`, `resume`).
    ///
    /// ```
    /// assert_eq!(backstop_core::QueueChange::Pause.action(), "pause");
    /// ```
    pub fn action(self) -> &'static str {
        match self {
            QueueChange::Pause => "pause",
            QueueChange::Resume => "resume",
        }
    }

    /// The change named `action` (`pause`, `resume`), as [`action`](Self::action)
    /// writes it.
    ///
    /// ```
    /// use backstop_core::QueueChange;
    /// assert_eq!(QueueChange::parse("resume"), Some(QueueChange::Resume));
    /// assert_eq!(QueueChange::parse("stop"), None);
    /// ```
    pub fn parse(action: &str) -> Option<QueueChange> {
        [QueueChange::Pause, QueueChange::Resume]
            .into_iter()
            .find(|c| c.action() == action)
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
