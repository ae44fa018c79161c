//! Operators' settings of an event type (a *queue*): pause and resume, a global
//! concurrency limit, a rate limit, and their log.
//!
//! A queue is an event type: the tasks of one type are what a setting applies to. A type
//! nobody has set anything for has no row and runs as it always does.

use std::time::Duration;

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
    /// Set (`Some`) or remove (`None`) the type's rate limit: at most
    /// [`starts`](RateLimit::starts) of its tasks start in any
    /// [`per`](RateLimit::per)-long interval, across every instance sharing the store.
    /// Claimed as a limited type is (the batch claim only, under the queue's row lock),
    /// with the room the limit leaves: its starts are counted in a ledger of claims
    /// (`<table>_rate`), a sliding window of database time.
    Rate(Option<RateLimit>),
    /// Hold the type's limits per partition (`true`) or for the type as a whole
    /// (`false`, the default). A partitioned queue's concurrency limit N allows N
    /// running tasks of each partition key ([`NewTask::partition`]: a tenant, an
    /// account), its rate limit N starts of each key per window; tasks without a key
    /// share one partition. Each claim takes the partitions in turn — the first due
    /// task of every partition with room, then the second, … — so a busy or full
    /// partition never holds up the others. Changes nothing for a type without a limit.
    ///
    /// A claim reads the head of every partition with a due task: its cost grows with
    /// the number of such partitions (an index dive each), not with their backlogs.
    ///
    /// [`NewTask::partition`]: crate::NewTask::partition
    Partition(bool),
}

/// The largest global concurrency limit ([`QueueChange::Concurrency`]), and the most
/// starts a rate limit allows per window ([`RateLimit`]).
pub const MAX_CONCURRENCY: u32 = 100_000;

/// A rate limit ([`QueueChange::Rate`]): at most `starts` tasks of the type start in any
/// interval of length `per`.
///
/// The window **slides**: the claims of the last `per` (database time) are counted, so
/// no interval of that length ever holds more than `starts` starts. A fixed window (a
/// counter reset every `per`) lets twice the limit through around a reset — `starts` at
/// the end of one window and `starts` again at the start of the next — which is what
/// trips a third party's quota; the sliding count costs one ledger row per claim of the
/// type, not per task.
///
/// ```
/// use std::time::Duration;
/// use backstop_core::{QueueChange, RateLimit};
/// let rate = RateLimit::new(100, Duration::from_secs(60));
/// assert_eq!(QueueChange::Rate(Some(rate)).action(), "rate 100 per 60s");
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct RateLimit {
    /// At most this many starts (1 to [`MAX_CONCURRENCY`]).
    pub starts: u32,
    /// In any interval this long: whole seconds, 1 s to [`MAX_RATE_WINDOW`].
    pub per: Duration,
}

/// The longest window of a rate limit: a day.
pub const MAX_RATE_WINDOW: Duration = Duration::from_secs(24 * 3600);

impl RateLimit {
    /// At most `starts` starts per `per` (checked by the store: see the fields).
    pub fn new(starts: u32, per: Duration) -> Self {
        RateLimit { starts, per }
    }

    /// Refuse a limit out of bounds, naming the field.
    fn check(self, op: &'static str) -> crate::Result<()> {
        if self.starts == 0 || self.starts > MAX_CONCURRENCY {
            return Err(crate::Error::invalid_input(
                op,
                format!(
                    "rate: {} starts is out of bounds (1 to {MAX_CONCURRENCY}; to lift the \
                     limit, remove it instead)",
                    self.starts
                ),
            ));
        }
        if self.per < Duration::from_secs(1)
            || self.per > MAX_RATE_WINDOW
            || self.per.subsec_nanos() != 0
        {
            return Err(crate::Error::invalid_input(
                op,
                format!(
                    "rate: the window {:?} must be whole seconds, 1 s to {} s",
                    self.per,
                    MAX_RATE_WINDOW.as_secs()
                ),
            ));
        }
        Ok(())
    }
}

/// What a [`QueueChange`] writes to a queue's row: each column's new value, `None` where
/// the change keeps it (`concurrency` and `rate_limit` 0 are no limit).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct QueueColumns {
    /// `paused`: 1 or 0.
    pub paused: Option<i16>,
    /// `concurrency`.
    pub concurrency: Option<i32>,
    /// `rate_limit`: the starts per window.
    pub rate_limit: Option<i32>,
    /// `rate_window_ms`: the window, in milliseconds.
    pub rate_window_ms: Option<i64>,
    /// `partitioned`: 1 or 0.
    pub partitioned: Option<i16>,
}

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
            QueueChange::Rate(Some(r)) => format!("rate {} per {}s", r.starts, r.per.as_secs()),
            QueueChange::Rate(None) => "rate off".to_owned(),
            QueueChange::Partition(true) => "partition on".to_owned(),
            QueueChange::Partition(false) => "partition off".to_owned(),
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
    /// assert_eq!(QueueChange::parse("rate off"), Some(QueueChange::Rate(None)));
    /// let rate = QueueChange::parse("rate 10 per 60s").unwrap();
    /// assert_eq!(rate.action(), "rate 10 per 60s");
    /// assert_eq!(QueueChange::parse("partition on"), Some(QueueChange::Partition(true)));
    /// ```
    pub fn parse(action: &str) -> Option<QueueChange> {
        match action {
            "pause" => Some(QueueChange::Pause),
            "resume" => Some(QueueChange::Resume),
            "concurrency off" => Some(QueueChange::Concurrency(None)),
            "rate off" => Some(QueueChange::Rate(None)),
            "partition on" => Some(QueueChange::Partition(true)),
            "partition off" => Some(QueueChange::Partition(false)),
            _ => {
                if let Some(rate) = action.strip_prefix("rate ") {
                    let (starts, per) = rate.split_once(" per ")?;
                    let secs = per.strip_suffix('s')?.parse().ok()?;
                    return Some(QueueChange::Rate(Some(RateLimit::new(
                        starts.parse().ok()?,
                        Duration::from_secs(secs),
                    ))));
                }
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
            QueueChange::Rate(Some(rate)) => rate.check(op),
            _ => Ok(()),
        }
    }

    /// The change as a statement binds it: each column's new value, `None` where the
    /// change keeps the column.
    ///
    /// ```
    /// use std::time::Duration;
    /// use backstop_core::{QueueChange, RateLimit};
    /// assert_eq!(QueueChange::Pause.columns().paused, Some(1));
    /// assert_eq!(QueueChange::Concurrency(None).columns().concurrency, Some(0));
    /// let rate = QueueChange::Rate(Some(RateLimit::new(5, Duration::from_secs(2)))).columns();
    /// assert_eq!((rate.rate_limit, rate.rate_window_ms, rate.paused), (Some(5), Some(2000), None));
    /// ```
    pub fn columns(self) -> QueueColumns {
        let none = QueueColumns::default();
        match self {
            QueueChange::Pause => QueueColumns {
                paused: Some(1),
                ..none
            },
            QueueChange::Resume => QueueColumns {
                paused: Some(0),
                ..none
            },
            QueueChange::Concurrency(n) => QueueColumns {
                concurrency: Some(n.map_or(0, |n| i32::try_from(n).unwrap_or(i32::MAX))),
                ..none
            },
            QueueChange::Rate(r) => QueueColumns {
                rate_limit: Some(r.map_or(0, |r| i32::try_from(r.starts).unwrap_or(i32::MAX))),
                rate_window_ms: Some(r.map_or(0, |r| crate::driver::millis(r.per))),
                ..none
            },
            QueueChange::Partition(on) => QueueColumns {
                partitioned: Some(i16::from(on)),
                ..none
            },
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
        let c = self.columns();
        c.paused.unwrap_or(0) == 0
            && c.concurrency.unwrap_or(0) == 0
            && c.rate_limit.unwrap_or(0) == 0
            && c.partitioned.unwrap_or(0) == 0
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
    /// Its rate limit, if it has one ([`QueueChange::Rate`]).
    pub rate: Option<RateLimit>,
    /// Whether its limits hold per partition key ([`QueueChange::Partition`]).
    pub partitioned: bool,
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
