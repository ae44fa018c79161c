//! The task model: what a task row holds and what goes in and out of a [`TaskStore`].
//!
//! [`TaskStore`]: crate::TaskStore

use std::fmt;
use std::time::Duration;

use chrono::{DateTime, Utc};

use crate::error::{Error, Result};
use crate::limits;

/// A task's id: the 64-bit auto id of its row.
pub type TaskId = i64;

/// Where a task is in its life. The codes are what the database stores.
///
/// Statuses may be added in minor versions (a cancelled task, say): match the ones you
/// handle and treat the rest alike.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[non_exhaustive]
pub enum Status {
    /// `0`: waiting to run (first time, or a retry whose `next_run_at` is in the future).
    Pending,
    /// `1`: done; never scheduled again. Purged after the retention period.
    Succeeded,
    /// `2`: terminal failure (attempts exhausted or failed permanently); waits for an
    /// operator's [`manual_reset`](crate::TaskStore::manual_reset).
    Failed,
    /// `3`: claimed by an engine instance (`owner`) and running under a `lease`.
    Running,
    /// `4`: cancelled by an operator ([`cancel`](crate::TaskStore::cancel)); terminal,
    /// never run again.
    Cancelled,
    /// `5`: queued behind an earlier task of its order key ([`NewTask::order_key`]);
    /// becomes pending when the tasks before it are done.
    Waiting,
}

impl Status {
    /// All statuses, in code order.
    pub const ALL: [Status; 6] = [
        Status::Pending,
        Status::Succeeded,
        Status::Failed,
        Status::Running,
        Status::Cancelled,
        Status::Waiting,
    ];

    /// The code stored in the database (0 pending, 1 succeeded, 2 failed, 3 running,
    /// 4 cancelled, 5 waiting).
    pub fn code(self) -> i16 {
        match self {
            Status::Pending => 0,
            Status::Succeeded => 1,
            Status::Failed => 2,
            Status::Running => 3,
            Status::Cancelled => 4,
            Status::Waiting => 5,
        }
    }

    /// The status of a stored code.
    ///
    /// ```
    /// use backstop_core::Status;
    /// assert_eq!(Status::from_code(3).unwrap(), Status::Running);
    /// assert!(Status::from_code(7).is_err());
    /// ```
    pub fn from_code(code: i64) -> Result<Status> {
        match code {
            0 => Ok(Status::Pending),
            1 => Ok(Status::Succeeded),
            2 => Ok(Status::Failed),
            3 => Ok(Status::Running),
            4 => Ok(Status::Cancelled),
            5 => Ok(Status::Waiting),
            other => Err(Error::new(
                crate::ErrorKind::Unexpected,
                "decode_task",
                format!("unknown status code {other} in the task table"),
            )),
        }
    }
}

impl fmt::Display for Status {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Status::Pending => "pending",
            Status::Succeeded => "succeeded",
            Status::Failed => "failed",
            Status::Running => "running",
            Status::Cancelled => "cancelled",
            Status::Waiting => "waiting",
        })
    }
}

/// Parses the names [`Display`](fmt::Display) writes (`pending`, `succeeded`, `failed`,
/// `running`, `cancelled`, `waiting`), in any case; `canceled` is accepted too.
///
/// ```
/// use backstop_core::Status;
/// assert_eq!("Failed".parse::<Status>().unwrap(), Status::Failed);
/// assert!("done".parse::<Status>().is_err());
/// ```
impl std::str::FromStr for Status {
    type Err = Error;

    fn from_str(s: &str) -> Result<Status> {
        match s.to_ascii_lowercase().as_str() {
            "pending" => Ok(Status::Pending),
            "succeeded" => Ok(Status::Succeeded),
            "failed" => Ok(Status::Failed),
            "running" => Ok(Status::Running),
            "cancelled" | "canceled" => Ok(Status::Cancelled),
            "waiting" => Ok(Status::Waiting),
            _ => Err(Error::invalid_input(
                "parse_status",
                format!(
                    "unknown status {s:?}: use pending, waiting, running, succeeded, failed or cancelled"
                ),
            )),
        }
    }
}

/// How long to wait before the next attempt after a failed one. Made with
/// [`Backoff::fixed`] or [`Backoff::exponential`] (or through [`RetryPolicy`]); strategies
/// and their settings may grow in minor versions.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Backoff {
    /// Every retry waits `interval`.
    #[non_exhaustive]
    Fixed {
        /// The wait before every retry.
        interval: Duration,
    },
    /// The retry after the n-th attempt waits `initial · 2^(n−1)`, never more than `max`.
    #[non_exhaustive]
    Exponential {
        /// The wait after the first attempt.
        initial: Duration,
        /// The cap on any wait (default 24 h).
        max: Duration,
    },
}

impl Backoff {
    /// Every retry waits `interval`.
    pub fn fixed(interval: Duration) -> Backoff {
        Backoff::Fixed { interval }
    }

    /// The retry after the n-th attempt waits `initial · 2^(n−1)`, never more than `max`.
    pub fn exponential(initial: Duration, max: Duration) -> Backoff {
        Backoff::Exponential { initial, max }
    }

    /// The strategy name stored in the database: `FIXED` or `EXPONENTIAL`.
    pub fn strategy(&self) -> &'static str {
        match self {
            Backoff::Fixed { .. } => "FIXED",
            Backoff::Exponential { .. } => "EXPONENTIAL",
        }
    }

    /// The base interval (`interval` or `initial`).
    pub fn interval(&self) -> Duration {
        match *self {
            Backoff::Fixed { interval } => interval,
            Backoff::Exponential { initial, .. } => initial,
        }
    }

    /// The largest wait this backoff ever yields.
    pub fn max_interval(&self) -> Duration {
        match *self {
            Backoff::Fixed { interval } => interval,
            Backoff::Exponential { max, .. } => max,
        }
    }

    /// Rebuild a backoff from its stored columns.
    pub fn from_parts(strategy: &str, interval: Duration, max: Duration) -> Result<Backoff> {
        match strategy {
            "FIXED" => Ok(Backoff::Fixed { interval }),
            "EXPONENTIAL" => Ok(Backoff::Exponential {
                initial: interval,
                max,
            }),
            other => Err(Error::new(
                crate::ErrorKind::Unexpected,
                "decode_task",
                format!("unknown retry_strategy {other:?} in the task table"),
            )),
        }
    }

    /// The wait before the next attempt after `attempt` attempts have been made
    /// (`attempt` ≥ 1; 0 is treated as 1).
    ///
    /// ```
    /// use std::time::Duration;
    /// use backstop_core::Backoff;
    ///
    /// let b = Backoff::exponential(Duration::from_secs(10), Duration::from_secs(60));
    /// assert_eq!(b.delay_after(1), Duration::from_secs(10));
    /// assert_eq!(b.delay_after(3), Duration::from_secs(40));
    /// assert_eq!(b.delay_after(4), Duration::from_secs(60)); // capped
    /// ```
    pub fn delay_after(&self, attempt: u32) -> Duration {
        match *self {
            Backoff::Fixed { interval } => interval,
            Backoff::Exponential { initial, max } => {
                let exp = attempt.saturating_sub(1).min(62);
                let factor = 1u32.checked_shl(exp).unwrap_or(u32::MAX);
                initial.checked_mul(factor).unwrap_or(max).min(max)
            }
        }
    }
}

/// How often and how patiently a task is retried.
///
/// `max_attempts` counts every start, the first included:
/// a task with `max_attempts = 3` runs at most three times, then parks as failed.
///
/// ```
/// use std::time::Duration;
/// use backstop_core::RetryPolicy;
///
/// let p = RetryPolicy::exponential(5, Duration::from_secs(1)).with_max_interval(Duration::from_secs(8));
/// assert_eq!(p.delay_after(1), Duration::from_secs(1));
/// assert_eq!(p.delay_after(5), Duration::from_secs(8));
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub struct RetryPolicy {
    /// Total starts allowed, the first included (≥ 1).
    pub max_attempts: u32,
    /// The wait between attempts. A task's row keeps its waits in whole milliseconds:
    /// a finer part is dropped at enqueue (as are those of a delay and a timeout).
    pub backoff: Backoff,
    /// How much of each wait is random, in percent (0 to 100): the wait after a failure
    /// is drawn uniformly from `[w · (1 − jitter/100), w]`, where `w` is the backoff's
    /// wait ([`delay_after`](Self::delay_after)). So a retry never waits longer than the
    /// backoff says, and tasks that failed together (a downstream outage) come back
    /// spread out instead of as one herd. Default: [`DEFAULT_JITTER_PCT`](Self::DEFAULT_JITTER_PCT)
    /// for exponential backoff, 0 for fixed. A handler's explicit retry-after is never
    /// jittered.
    pub jitter_pct: u8,
}

impl RetryPolicy {
    /// The default cap on exponential backoff: 24 hours.
    pub const DEFAULT_MAX_INTERVAL: Duration = Duration::from_secs(24 * 3600);

    /// The default jitter of exponential backoff: each wait is drawn from 75 % to 100 %
    /// of the backoff's.
    pub const DEFAULT_JITTER_PCT: u8 = 25;

    /// Retry every `interval` (no jitter), at most `max_attempts` starts in all.
    pub fn fixed(max_attempts: u32, interval: Duration) -> Self {
        Self {
            max_attempts,
            backoff: Backoff::Fixed { interval },
            jitter_pct: 0,
        }
    }

    /// Retry after `initial`, `2·initial`, `4·initial`… capped at 24 h, with
    /// [`DEFAULT_JITTER_PCT`](Self::DEFAULT_JITTER_PCT) jitter; at most `max_attempts`
    /// starts in all.
    pub fn exponential(max_attempts: u32, initial: Duration) -> Self {
        Self {
            max_attempts,
            backoff: Backoff::Exponential {
                initial,
                max: Self::DEFAULT_MAX_INTERVAL,
            },
            jitter_pct: Self::DEFAULT_JITTER_PCT,
        }
    }

    /// Set the jitter: `pct` percent of each wait is random (0 turns it off; at most
    /// 100). See [`jitter_pct`](Self::jitter_pct).
    ///
    /// ```
    /// use std::time::Duration;
    /// use backstop_core::RetryPolicy;
    /// let p = RetryPolicy::exponential(5, Duration::from_secs(10)).jitter(50);
    /// for _ in 0..100 {
    ///     let wait = p.retry_delay(2); // the backoff says 20 s
    ///     assert!(wait >= Duration::from_secs(10) && wait <= Duration::from_secs(20));
    /// }
    /// assert_eq!(p.jitter(0).retry_delay(2), Duration::from_secs(20));
    /// ```
    pub fn jitter(mut self, pct: u8) -> Self {
        self.jitter_pct = pct;
        self
    }

    /// The wait before the next attempt after `attempt` attempts, jitter applied: drawn
    /// uniformly from `[w · (1 − jitter/100), w]` where `w` is
    /// [`delay_after(attempt)`](Self::delay_after).
    pub fn retry_delay(&self, attempt: u32) -> Duration {
        let wait = self.delay_after(attempt);
        if self.jitter_pct == 0 {
            return wait;
        }
        let span = wait.mul_f64(f64::from(self.jitter_pct.min(100)) / 100.0);
        wait.saturating_sub(span.mul_f64(random_unit()))
    }

    /// Change the cap of an exponential backoff (no effect on a fixed one).
    pub fn with_max_interval(mut self, max: Duration) -> Self {
        if let Backoff::Exponential { initial, .. } = self.backoff {
            self.backoff = Backoff::Exponential { initial, max };
        }
        self
    }

    /// See [`Backoff::delay_after`].
    pub fn delay_after(&self, attempt: u32) -> Duration {
        self.backoff.delay_after(attempt)
    }

    /// Check the policy is usable: 1 ≤ `max_attempts` ≤ [`limits::MAX_ATTEMPTS`], intervals
    /// at most [`limits::MAX_INTERVAL`], and an exponential cap not below its initial wait.
    pub fn validate(&self, operation: &'static str) -> Result<()> {
        if self.max_attempts == 0 || self.max_attempts > limits::MAX_ATTEMPTS {
            return Err(Error::invalid_input(
                operation,
                format!(
                    "max_attempts must be between 1 and {}, got {}",
                    limits::MAX_ATTEMPTS,
                    self.max_attempts
                ),
            ));
        }
        let (interval, max) = (self.backoff.interval(), self.backoff.max_interval());
        if interval > limits::MAX_INTERVAL || max > limits::MAX_INTERVAL {
            return Err(Error::invalid_input(
                operation,
                format!(
                    "retry intervals must be at most {:?}, got {:?} (cap {:?})",
                    limits::MAX_INTERVAL,
                    interval,
                    max
                ),
            ));
        }
        if max < interval {
            return Err(Error::invalid_input(
                operation,
                format!("retry cap {max:?} is below the initial interval {interval:?}"),
            ));
        }
        if self.jitter_pct > 100 {
            return Err(Error::invalid_input(
                operation,
                format!("jitter must be 0 to 100 percent, got {}", self.jitter_pct),
            ));
        }
        Ok(())
    }
}

/// A number uniformly distributed in `[0, 1)`, from the standard library's per-process
/// random hash keys (good enough to spread retries; not for anything secret).
fn random_unit() -> f64 {
    use std::collections::hash_map::RandomState;
    use std::hash::{BuildHasher, Hasher};
    use std::sync::atomic::{AtomicU64, Ordering};
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let mut h = RandomState::new().build_hasher();
    h.write_u64(COUNTER.fetch_add(1, Ordering::Relaxed));
    (h.finish() >> 11) as f64 / (1u64 << 53) as f64
}

impl Default for RetryPolicy {
    /// 5 attempts, exponential backoff from 10 s, capped at 24 h, 25 % jitter.
    fn default() -> Self {
        Self::exponential(5, Duration::from_secs(10))
    }
}

/// A task row as stored. Columns may be added in minor versions.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Task {
    /// The row id.
    pub id: TaskId,
    /// The handler key (1–64 bytes).
    pub event_type: String,
    /// The business key (1–128 bytes); unique together with `event_type`.
    pub biz_key: String,
    /// The JSON context the handler runs with.
    pub payload: String,
    /// Where the task is in its life.
    pub status: Status,
    /// How many times the task was started (every grab adds one; a release gives it back).
    pub attempts: u32,
    /// The retry policy stored with the task at enqueue.
    pub retry: RetryPolicy,
    /// When the task is due (database time).
    pub next_run_at: DateTime<Utc>,
    /// The engine instance holding the task while it runs; `None` otherwise.
    pub owner: Option<String>,
    /// The fencing token: every grab increments it.
    pub lease: i64,
    /// The last failure's message (bounded to [`limits::MAX_ERROR_BYTES`]).
    pub last_error: Option<String>,
    /// When the row was inserted (database time).
    pub created_at: DateTime<Utc>,
    /// When the row last changed, or the last heartbeat (database time).
    pub updated_at: DateTime<Utc>,
    /// Its claim order within its event type: due tasks of a lower priority number are
    /// claimed first.
    pub priority: Priority,
    /// Its order key: tasks of one key run one at a time, in enqueue order (see
    /// [`NewTask::order_key`]).
    pub order_key: Option<String>,
    /// What this task, parked as failed, does to the tasks of its order key behind it.
    pub when_parked: WhenParked,
    /// Its own attempt timeout, overriding its event type's
    /// ([`HandlerOptions::timeout`](crate::HandlerOptions::timeout)).
    pub timeout: Option<Duration>,
}

impl Task {
    /// The lease that proves this copy of the task is the current claim.
    pub fn lease(&self) -> Lease {
        Lease {
            task_id: self.id,
            token: self.lease,
        }
    }

    /// Whether another start is allowed after this one.
    pub fn has_attempts_left(&self) -> bool {
        self.attempts < self.retry.max_attempts
    }

    /// The policy's wait before the next attempt, given the attempts made so far, with
    /// the policy's jitter ([`RetryPolicy::retry_delay`]).
    pub fn retry_delay(&self) -> Duration {
        self.retry.retry_delay(self.attempts)
    }

    /// Decode the JSON payload into `T`.
    pub fn payload_as<T: serde::de::DeserializeOwned>(&self) -> Result<T> {
        serde_json::from_str(&self.payload).map_err(|e| {
            Error::invalid_input(
                "decode_payload",
                format!(
                    "payload of task {} ({}) does not decode: {e}",
                    self.id, self.event_type
                ),
            )
            .with_source(e)
        })
    }
}

/// A claim on a running task: its id and the lease token the grab returned.
///
/// Every state change of a running task names its lease; a lease that is no longer
/// current (the task was recycled and grabbed again) changes nothing.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Lease {
    /// The task's id.
    pub task_id: TaskId,
    /// The lease token at the time of the grab.
    pub token: i64,
}

/// The identity of an engine instance, unique per process start (not the IP: two
/// processes on one host, or a restart, must never share an owner).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Owner(String);

impl Owner {
    /// An owner with a chosen name (1–64 bytes, no control characters).
    pub fn new(name: impl Into<String>) -> Result<Owner> {
        let name = name.into();
        if name.is_empty() || name.len() > limits::MAX_OWNER_BYTES {
            return Err(Error::invalid_input(
                "owner",
                format!(
                    "owner must be 1 to {} bytes, got {}",
                    limits::MAX_OWNER_BYTES,
                    name.len()
                ),
            ));
        }
        if name.chars().any(char::is_control) {
            return Err(Error::invalid_input(
                "owner",
                "owner must not contain control characters",
            ));
        }
        Ok(Owner(name))
    }

    /// A fresh owner for this process start: `host-pid-random`.
    pub fn generate() -> Owner {
        use std::collections::hash_map::RandomState;
        use std::hash::{BuildHasher, Hasher};
        let host = std::env::var("HOSTNAME")
            .ok()
            .or_else(|| std::fs::read_to_string("/etc/hostname").ok())
            .map(|h| {
                h.trim()
                    .chars()
                    .filter(|c| c.is_ascii_alphanumeric() || *c == '-' || *c == '.')
                    .take(32)
                    .collect::<String>()
            })
            .filter(|h| !h.is_empty())
            .unwrap_or_else(|| "backstop".to_owned());
        let mut hasher = RandomState::new().build_hasher();
        hasher.write_u128(
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|d| d.as_nanos())
                .unwrap_or_default(),
        );
        Owner(format!(
            "{host}-{}-{:08x}",
            std::process::id(),
            hasher.finish() as u32
        ))
    }

    /// The owner's name as stored in the `owner` column.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for Owner {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// A task's place in the claim order within its event type: of the due tasks of a type,
/// those with the lowest priority number are claimed first, then the earliest due, then
/// the oldest. Five levels, from [`CRITICAL`](Self::CRITICAL) (0) to [`BULK`](Self::BULK)
/// (4); tasks are [`NORMAL`](Self::NORMAL) (2) unless told otherwise.
///
/// Priorities order claims within an event type only; types have their own executors
/// and do not wait for each other. The number of levels is small on purpose: a claim
/// reads each level's due tasks in index order and stops at its limit, so its cost stays
/// independent of the backlog.
///
/// ```
/// use backstop_core::Priority;
/// assert!(Priority::HIGH < Priority::NORMAL);
/// assert_eq!(Priority::new(4).unwrap(), Priority::BULK);
/// assert!(Priority::new(5).is_err());
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Priority(u8);

impl Priority {
    /// 0: ahead of everything else of its type.
    pub const CRITICAL: Priority = Priority(0);
    /// 1.
    pub const HIGH: Priority = Priority(1);
    /// 2: the default.
    pub const NORMAL: Priority = Priority(2);
    /// 3.
    pub const LOW: Priority = Priority(3);
    /// 4: after everything else of its type.
    pub const BULK: Priority = Priority(4);
    /// Every level, in claim order.
    pub const ALL: [Priority; 5] = [
        Priority::CRITICAL,
        Priority::HIGH,
        Priority::NORMAL,
        Priority::LOW,
        Priority::BULK,
    ];

    /// The priority numbered `n` (0 to 4); `InvalidInput` otherwise.
    pub fn new(n: u8) -> Result<Priority> {
        if usize::from(n) < Priority::ALL.len() {
            Ok(Priority(n))
        } else {
            Err(Error::invalid_input(
                "priority",
                format!("priority must be 0 (critical) to 4 (bulk), got {n}"),
            ))
        }
    }

    /// Its number, as stored (0 to 4).
    pub fn get(self) -> u8 {
        self.0
    }
}

impl Default for Priority {
    fn default() -> Self {
        Priority::NORMAL
    }
}

impl fmt::Display for Priority {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self.0 {
            0 => "critical",
            1 => "high",
            2 => "normal",
            3 => "low",
            _ => "bulk",
        })
    }
}

/// What a task of an order key that parks as failed does to the tasks of the key queued
/// behind it (see [`NewTask::order_key`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
#[non_exhaustive]
pub enum WhenParked {
    /// They wait until an operator resets (then it runs again first) or deletes or
    /// cancels it. The default: order is kept.
    #[default]
    Block,
    /// They go on; a reset later runs it after the tasks queued at that time.
    Skip,
}

/// When an enqueue with the same `(event_type, biz_key)` as an existing task is a
/// duplicate (answered with the existing task, nothing written) rather than a new task.
///
/// | rule | a duplicate while the existing task is… | after that, the same key… |
/// |---|---|---|
/// | [`WhileActive`](Self::WhileActive) (default) | pending, waiting or running | makes a new task (the finished one stays, for the record) |
/// | [`Window(d)`](Self::Window) | pending, waiting or running, or created less than `d` ago | makes a new task |
/// | [`Forever`](Self::Forever) | in the table at all (until purged or deleted) | is a duplicate |
///
/// The rule is the new enqueue's, applied to the task it meets. On a duplicate the caller
/// learns the existing task's id and status ([`Enqueued`]) and may have the payload of a
/// pending one replaced ([`NewTask::replace_pending`]).
///
/// ```
/// use std::time::Duration;
/// use backstop_core::{Dedup, NewTask};
/// let task = NewTask::new("SYNC_ACCOUNT", "acct-9").dedup(Dedup::Window(Duration::from_secs(600)));
/// assert_eq!(task.dedup_rule(), Dedup::Window(Duration::from_secs(600)));
/// assert_eq!(NewTask::new("E", "k").dedup_rule(), Dedup::WhileActive);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
#[non_exhaustive]
pub enum Dedup {
    /// A duplicate while the existing task is pending or running.
    #[default]
    WhileActive,
    /// A duplicate while the existing task is pending or running, or was created less
    /// than this long ago (database time).
    Window(Duration),
    /// A duplicate as long as the existing task's row exists.
    Forever,
}

impl Dedup {
    /// Whether a new enqueue under this rule is a duplicate of an existing task in
    /// `status`, created `age` ago.
    ///
    /// ```
    /// use std::time::Duration;
    /// use backstop_core::{Dedup, Status};
    /// let minute = Duration::from_secs(60);
    /// assert!(Dedup::WhileActive.is_duplicate(Status::Running, minute));
    /// assert!(!Dedup::WhileActive.is_duplicate(Status::Succeeded, minute));
    /// assert!(Dedup::Window(2 * minute).is_duplicate(Status::Succeeded, minute));
    /// assert!(!Dedup::Window(minute / 2).is_duplicate(Status::Failed, minute));
    /// assert!(Dedup::Forever.is_duplicate(Status::Cancelled, 1000 * minute));
    /// ```
    pub fn is_duplicate(self, status: Status, age: Duration) -> bool {
        let active = matches!(status, Status::Pending | Status::Running | Status::Waiting);
        match self {
            Dedup::WhileActive => active,
            Dedup::Window(window) => active || age < window,
            Dedup::Forever => true,
        }
    }
}

/// A task to enqueue. Build it, then hand it to [`TaskStore::enqueue`] or a backend's
/// transactional enqueue; the store validates it before writing anything.
///
/// ```
/// use std::time::Duration;
/// use backstop_core::{NewTask, RetryPolicy};
///
/// #[derive(serde::Serialize)]
/// struct Pay { order_id: u64, amount_cents: u64 }
///
/// let task = NewTask::new("PAY_ORDER", "order-42")
///     .json(&Pay { order_id: 42, amount_cents: 1999 })
///     .retry(RetryPolicy::fixed(3, Duration::from_secs(30)));
/// assert!(task.validate(64 * 1024).is_ok());
/// assert!(NewTask::new("", "order-42").validate(64 * 1024).is_err());
/// ```
///
/// [`TaskStore::enqueue`]: crate::TaskStore::enqueue
#[derive(Debug, Clone)]
pub struct NewTask {
    event_type: String,
    biz_key: String,
    payload: std::result::Result<String, String>,
    /// `None`: the kind's policy if its event type has a registered kind, else the default.
    retry: Option<RetryPolicy>,
    delay: Duration,
    run_at: Option<DateTime<Utc>>,
    priority: Priority,
    /// `None`: the kind's rule if its event type has a registered kind, else the default.
    dedup: Option<Dedup>,
    replace_pending: bool,
    order_key: Option<String>,
    when_parked: WhenParked,
    timeout: Option<Duration>,
}

impl NewTask {
    /// A task for handler `event_type` about business object `biz_key`, with an empty
    /// JSON object as payload, no delay, and the retry policy of the event type's
    /// [kind](crate::TaskKind) when one is known to this process (else the default
    /// [`RetryPolicy`]).
    pub fn new(event_type: impl Into<String>, biz_key: impl Into<String>) -> Self {
        Self {
            event_type: event_type.into(),
            biz_key: biz_key.into(),
            payload: Ok("{}".to_owned()),
            retry: None,
            delay: Duration::ZERO,
            run_at: None,
            priority: Priority::NORMAL,
            dedup: None,
            replace_pending: false,
            order_key: None,
            when_parked: WhenParked::Block,
            timeout: None,
        }
    }

    /// The same task under another business key (a periodic task's tick).
    pub(crate) fn with_biz_key(mut self, biz_key: String) -> Self {
        self.biz_key = biz_key;
        self
    }

    /// Serialize `value` as the JSON payload. A value that fails to serialize is
    /// reported by [`validate`](Self::validate) (and so by the store) as invalid input.
    pub fn json<T: serde::Serialize + ?Sized>(mut self, value: &T) -> Self {
        self.payload = serde_json::to_string(value).map_err(|e| e.to_string());
        self
    }

    /// Use `json` (a JSON document as text) as the payload; it is checked to parse.
    pub fn payload_raw(mut self, json: impl Into<String>) -> Self {
        let json = json.into();
        self.payload = match serde_json::from_str::<serde::de::IgnoredAny>(&json) {
            Ok(_) => Ok(json),
            Err(e) => Err(e.to_string()),
        };
        self
    }

    /// The task of a [kind](crate::TaskKind): its event type, business key, JSON
    /// payload, retry policy and priority all come from `kind` (and the kind becomes
    /// known to this process, see [`register_kind`](crate::register_kind)).
    pub fn of<K: crate::TaskKind>(kind: &K) -> Self {
        crate::register_kind::<K>();
        let task = NewTask::new(K::EVENT_TYPE, kind.biz_key())
            .json(kind)
            .retry(K::retry())
            .dedup(K::dedup())
            .priority(kind.priority());
        match kind.order_key() {
            Some(key) => task.order_key(key),
            None => task,
        }
    }

    /// The retry policy stored with the task (instead of its kind's or the default).
    pub fn retry(mut self, policy: RetryPolicy) -> Self {
        self.retry = Some(policy);
        self
    }

    /// Make the task due `delay` after enqueue (database time) instead of at once.
    /// Replaces a [`run_at`](Self::run_at) set before.
    pub fn delay(mut self, delay: Duration) -> Self {
        self.delay = delay;
        self.run_at = None;
        self
    }

    /// Make the task due at `at`, an absolute time compared with the database's clock.
    /// A time already past makes the task due at once (it is stored as the time of the
    /// enqueue, so it neither jumps the queue nor skews the start-delay metric). At most
    /// [`limits::MAX_INTERVAL`] ahead. Replaces a [`delay`](Self::delay) set before.
    ///
    /// ```
    /// use chrono::{Duration, Utc};
    /// use backstop_core::NewTask;
    /// let at = Utc::now() + Duration::hours(2);
    /// let task = NewTask::new("REMIND", "cart-7").run_at(at);
    /// assert_eq!(task.due_at(), Some(at));
    /// ```
    pub fn run_at(mut self, at: DateTime<Utc>) -> Self {
        self.run_at = Some(at);
        self.delay = Duration::ZERO;
        self
    }

    /// Its claim order among the due tasks of its event type (default
    /// [`Priority::NORMAL`]).
    pub fn priority(mut self, priority: Priority) -> Self {
        self.priority = priority;
        self
    }

    /// The priority.
    pub fn claim_priority(&self) -> Priority {
        self.priority
    }

    /// When an enqueue of the same key is a duplicate (see [`Dedup`]; default
    /// [`Dedup::WhileActive`], or the kind's rule).
    pub fn dedup(mut self, rule: Dedup) -> Self {
        self.dedup = Some(rule);
        self
    }

    /// The dedup rule: the one set with [`dedup`](Self::dedup), else that of the event
    /// type's [kind](crate::TaskKind) if one is known to this process, else the default.
    pub fn dedup_rule(&self) -> Dedup {
        self.dedup
            .or_else(|| crate::kind::dedup_of(&self.event_type))
            .unwrap_or_default()
    }

    /// On a duplicate of a *pending* task, replace its payload with this task's (the
    /// latest state wins: a settings sync, a search-index update). A running or finished
    /// task is never changed. [`Enqueued::replaced`] says whether it happened.
    pub fn replace_pending(mut self, replace: bool) -> Self {
        self.replace_pending = replace;
        self
    }

    /// Whether a duplicate of a pending task replaces its payload.
    pub fn replaces_pending(&self) -> bool {
        self.replace_pending
    }

    /// Run this task in order with the other tasks of `key` (an aggregate: an order, an
    /// account), whatever their event types: one at a time, in enqueue order, across
    /// every engine instance. Tasks of other keys are unaffected.
    ///
    /// - A task enqueued while an earlier one of its key is pending, running or blocking
    ///   waits ([`Status::Waiting`]); it becomes pending when those are done (succeeded,
    ///   cancelled, deleted, or parked with [`WhenParked::Skip`]).
    /// - A task that fails with retries left keeps its place: the tasks behind it wait.
    /// - One parked as failed blocks them until an operator resets it (default), or lets
    ///   them go on ([`when_parked`](Self::when_parked)).
    /// - The order is the order in which the enqueues commit (one enqueue at a time per
    ///   key: concurrent transactions enqueueing for one key wait for each other).
    ///
    /// 1 to 128 bytes, no control characters.
    ///
    /// ```
    /// use backstop_core::NewTask;
    /// let task = NewTask::new("SHIP", "order-7").order_key("order-7");
    /// assert_eq!(task.order(), Some("order-7"));
    /// ```
    pub fn order_key(mut self, key: impl Into<String>) -> Self {
        self.order_key = Some(key.into());
        self
    }

    /// The order key, if any.
    pub fn order(&self) -> Option<&str> {
        self.order_key.as_deref()
    }

    /// What this task, parked as failed, does to the tasks of its order key behind it
    /// (default [`WhenParked::Block`]).
    pub fn when_parked(mut self, policy: WhenParked) -> Self {
        self.when_parked = policy;
        self
    }

    /// The parked policy.
    pub fn parked_policy(&self) -> WhenParked {
        self.when_parked
    }

    /// This task's attempt timeout, instead of its event type's
    /// ([`HandlerOptions::timeout`](crate::HandlerOptions::timeout)): for the one export
    /// that is known to take an hour. 1 ms to [`limits::MAX_INTERVAL`].
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = Some(timeout);
        self
    }

    /// The task's own attempt timeout, if any.
    pub fn attempt_timeout(&self) -> Option<Duration> {
        self.timeout
    }

    /// The handler key.
    pub fn event_type(&self) -> &str {
        &self.event_type
    }

    /// The business key.
    pub fn biz_key(&self) -> &str {
        &self.biz_key
    }

    /// The JSON payload text (empty when it failed to serialize; `validate` says why).
    pub fn payload(&self) -> &str {
        self.payload.as_deref().unwrap_or("")
    }

    /// The retry policy stored with the task: the one set with [`retry`](Self::retry),
    /// else that of the event type's [kind](crate::TaskKind) if one is known to this
    /// process, else the default.
    pub fn retry_policy(&self) -> RetryPolicy {
        self.retry
            .or_else(|| crate::kind::policy_of(&self.event_type))
            .unwrap_or_default()
    }

    /// The delay before the task is due (zero when it has a [`due_at`](Self::due_at)).
    pub fn due_delay(&self) -> Duration {
        self.delay
    }

    /// The absolute time the task is due, when set with [`run_at`](Self::run_at).
    pub fn due_at(&self) -> Option<DateTime<Utc>> {
        self.run_at
    }

    /// About how long until the task is due, by this machine's clock (a hint for waking
    /// a poller; the database decides).
    pub fn due_in(&self) -> Duration {
        match self.run_at {
            Some(at) => (at - Utc::now()).to_std().unwrap_or(Duration::ZERO),
            None => self.delay,
        }
    }

    /// Check everything a store checks before writing: event type (1–64 bytes of
    /// `A–Z a–z 0–9 _ . : -`), business key (1–128 bytes, no control characters), a
    /// payload that serialized and fits `max_payload_bytes`, the retry policy, and a delay
    /// or a `run_at` of at most [`limits::MAX_INTERVAL`] ahead.
    pub fn validate(&self, max_payload_bytes: usize) -> Result<()> {
        const OP: &str = "enqueue";
        limits::check_event_type(OP, &self.event_type)?;
        limits::check_biz_key(OP, &self.biz_key)?;
        match &self.payload {
            Err(e) => {
                return Err(Error::invalid_input(
                    OP,
                    format!("payload is not valid JSON: {e}"),
                ))
            }
            Ok(p) if p.len() > max_payload_bytes => {
                return Err(Error::invalid_input(
                    OP,
                    format!(
                        "payload is {} bytes, over the limit of {max_payload_bytes} bytes",
                        p.len()
                    ),
                ))
            }
            Ok(_) => {}
        }
        self.retry_policy().validate(OP)?;
        limits::check_duration(OP, "delay", self.delay)?;
        limits::check_duration(OP, "run_at (from now)", self.due_in())?;
        if let Dedup::Window(w) = self.dedup_rule() {
            limits::check_duration(OP, "dedup window", w)?;
        }
        if let Some(key) = &self.order_key {
            limits::check_order_key(OP, key)?;
        }
        if let Some(t) = self.timeout {
            if t < Duration::from_millis(1) {
                return Err(Error::invalid_input(
                    OP,
                    format!("timeout must be at least 1 ms, got {t:?}"),
                ));
            }
            limits::check_duration(OP, "timeout", t)?;
        }
        Ok(())
    }
}

impl<K: crate::TaskKind> From<K> for NewTask {
    /// [`NewTask::of`].
    fn from(kind: K) -> Self {
        NewTask::of(&kind)
    }
}

/// The answer of an enqueue: hand it to the engine's `run_now` after commit.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Enqueued {
    /// The task's id (the existing one for a duplicate).
    pub id: TaskId,
    /// `true` when this call inserted the row; `false` when it was a duplicate of an
    /// existing task with the same `(event_type, biz_key)` under the task's [`Dedup`]
    /// rule (left unchanged, unless [`replaced`](Self::replaced)).
    pub created: bool,
    /// The task's event type (so a run-ahead knows its executor before claiming).
    pub event_type: String,
    /// The task's status: pending for a new task; the existing task's, as the enqueue
    /// found it, for a duplicate.
    pub status: Status,
    /// Whether a duplicate replaced the payload of the pending task it met (asked for
    /// with [`NewTask::replace_pending`]).
    pub replaced: bool,
}

/// What to do with a running task, named by its lease. See [`TaskStore::mark`].
///
/// Exhaustive on purpose (unlike the other enums): each action is a line of the store
/// contract that every driver implements in SQL, so a new action must be a compile error
/// in every driver's `match`, never a silent fallthrough.
///
/// [`TaskStore::mark`]: crate::TaskStore::mark
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum MarkAction {
    /// running → succeeded.
    Success,
    /// running → pending, due `delay` from now (database time), with `error` as
    /// `last_error`; running → failed instead when no attempts are left.
    Retry {
        /// The wait before the next attempt.
        delay: Duration,
        /// Why the attempt failed.
        error: String,
    },
    /// running → failed (terminal) with `error` as `last_error`.
    Fail {
        /// Why the task failed.
        error: String,
    },
    /// running → pending without spending the attempt (the grab's increment is undone);
    /// for a task that never started (executor full, shutdown).
    Release,
}

impl MarkAction {
    /// The error text a retry or a failure records; `None` for the others.
    pub fn error(&self) -> Option<&str> {
        match self {
            MarkAction::Retry { error, .. } | MarkAction::Fail { error } => Some(error),
            MarkAction::Success | MarkAction::Release => None,
        }
    }
}

/// One state change of a running task. Built with [`Mark::success`], [`Mark::retry`],
/// [`Mark::fail`] or [`Mark::release`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Mark {
    /// The claim the change is fenced by.
    pub lease: Lease,
    /// The change.
    pub action: MarkAction,
}

impl Mark {
    /// Mark the task succeeded.
    pub fn success(lease: Lease) -> Self {
        Self {
            lease,
            action: MarkAction::Success,
        }
    }

    /// Schedule a retry after `delay` (or fail the task when no attempts are left).
    pub fn retry(lease: Lease, delay: Duration, error: impl Into<String>) -> Self {
        Self {
            lease,
            action: MarkAction::Retry {
                delay,
                error: error.into(),
            },
        }
    }

    /// Fail the task for good.
    pub fn fail(lease: Lease, error: impl Into<String>) -> Self {
        Self {
            lease,
            action: MarkAction::Fail {
                error: error.into(),
            },
        }
    }

    /// Give the task back without spending an attempt.
    pub fn release(lease: Lease) -> Self {
        Self {
            lease,
            action: MarkAction::Release,
        }
    }
}

/// Which tasks [`TaskStore::list`] returns: filters are ANDed, rows come in id order,
/// starting after `after_id`, at most `limit` (1–1000) of them. Built from `Default`
/// with the setters; filters may be added in minor versions.
///
/// ```
/// use backstop_core::{Status, TaskFilter};
/// let failed = TaskFilter::default().status(Status::Failed).event_type("PAY").limit(50);
/// assert_eq!(failed.limit, 50);
/// ```
///
/// [`TaskStore::list`]: crate::TaskStore::list
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct TaskFilter {
    /// Only this status.
    pub status: Option<Status>,
    /// Only this event type.
    pub event_type: Option<String>,
    /// Only this business key (with `event_type`: the one task of that key).
    pub biz_key: Option<String>,
    /// Only tasks whose `last_error` contains this text (exactly: no wildcards, case
    /// sensitive; 1 to 200 bytes).
    pub error_contains: Option<String>,
    /// Only ids greater than this (for paging).
    pub after_id: Option<TaskId>,
    /// Only tasks whose `updated_at` is older than this (database time).
    pub older_than: Option<Duration>,
    /// At most this many rows.
    pub limit: usize,
}

impl Default for TaskFilter {
    fn default() -> Self {
        Self {
            status: None,
            event_type: None,
            biz_key: None,
            error_contains: None,
            after_id: None,
            older_than: None,
            limit: 100,
        }
    }
}

impl TaskFilter {
    /// Only tasks in `status`.
    pub fn status(mut self, status: Status) -> Self {
        self.status = Some(status);
        self
    }

    /// Only tasks of `event_type`.
    pub fn event_type(mut self, event_type: impl Into<String>) -> Self {
        self.event_type = Some(event_type.into());
        self
    }

    /// Only tasks of business key `biz_key`.
    pub fn biz_key(mut self, biz_key: impl Into<String>) -> Self {
        self.biz_key = Some(biz_key.into());
        self
    }

    /// Only tasks whose last error contains `text`.
    pub fn error_contains(mut self, text: impl Into<String>) -> Self {
        self.error_contains = Some(text.into());
        self
    }

    /// Only ids greater than `id` (the last id of the previous page).
    pub fn after_id(mut self, id: TaskId) -> Self {
        self.after_id = Some(id);
        self
    }

    /// Only tasks whose `updated_at` is older than `age` (database time).
    pub fn older_than(mut self, age: Duration) -> Self {
        self.older_than = Some(age);
        self
    }

    /// At most `n` rows (1–1000).
    pub fn limit(mut self, n: usize) -> Self {
        self.limit = n;
        self
    }
}

/// The answer of [`TaskStore::recycle_dead`].
///
/// [`TaskStore::recycle_dead`]: crate::TaskStore::recycle_dead
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Recycled {
    /// Dead tasks put back to pending (attempts remained).
    pub to_pending: u64,
    /// Dead tasks parked as failed (their last attempt died).
    pub to_failed: u64,
}

impl Recycled {
    /// All tasks recycled.
    pub fn total(&self) -> u64 {
        self.to_pending + self.to_failed
    }
}

/// How many tasks of one event type are in one status.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StatusCount {
    /// The event type.
    pub event_type: String,
    /// The status.
    pub status: Status,
    /// How many tasks.
    pub count: u64,
}

/// Tasks finished in one bucket of a window (see
/// [`TaskStore::throughput`](crate::TaskStore::throughput)).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Throughput {
    /// The event type.
    pub event_type: String,
    /// [`Status::Succeeded`] or [`Status::Failed`] (parked for good).
    pub status: Status,
    /// Which bucket: 0 is the most recent (`[now − bucket, now]`), 1 the one before…
    pub bucket: u32,
    /// How many tasks of this event type reached this status in the bucket (and have not
    /// changed since).
    pub count: u64,
}

/// An event type some engine of the fleet has a handler for (see
/// [`TaskStore::event_types`](crate::TaskStore::event_types)).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct EventTypeSeen {
    /// The event type.
    pub event_type: String,
    /// When an engine with a handler for it first started (database time).
    pub first_seen: DateTime<Utc>,
    /// When one last started or said it still runs (database time).
    pub last_seen: DateTime<Utc>,
}

/// The answer of [`TaskStore::stats`].
///
/// [`TaskStore::stats`]: crate::TaskStore::stats
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct Stats {
    /// Counts per event type and status (only non-zero ones).
    pub counts: Vec<StatusCount>,
    /// How long the oldest due pending task has been due; `None` when none is due.
    pub oldest_due_pending: Option<Duration>,
}

impl Stats {
    /// Tasks in `status` over all event types.
    pub fn count(&self, status: Status) -> u64 {
        self.counts
            .iter()
            .filter(|c| c.status == status)
            .map(|c| c.count)
            .sum()
    }

    /// Tasks of `event_type` in `status`.
    pub fn count_for(&self, event_type: &str, status: Status) -> u64 {
        self.counts
            .iter()
            .filter(|c| c.status == status && c.event_type == event_type)
            .map(|c| c.count)
            .sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exponential_doubles_and_caps_without_overflow() {
        let b = Backoff::Exponential {
            initial: Duration::from_millis(1500),
            max: Duration::from_secs(3600),
        };
        assert_eq!(b.delay_after(0), Duration::from_millis(1500));
        assert_eq!(b.delay_after(1), Duration::from_millis(1500));
        assert_eq!(b.delay_after(2), Duration::from_millis(3000));
        assert_eq!(b.delay_after(5), Duration::from_millis(24000));
        assert_eq!(b.delay_after(40), Duration::from_secs(3600));
        assert_eq!(b.delay_after(u32::MAX), Duration::from_secs(3600));
    }

    #[test]
    fn fixed_is_constant() {
        let p = RetryPolicy::fixed(3, Duration::from_secs(7));
        for n in 1..10 {
            assert_eq!(p.delay_after(n), Duration::from_secs(7));
        }
        // with_max_interval leaves a fixed backoff alone
        assert_eq!(p.with_max_interval(Duration::from_secs(1)), p);
    }

    #[test]
    fn policy_validation() {
        assert!(RetryPolicy::default().validate("t").is_ok());
        assert!(RetryPolicy::fixed(0, Duration::ZERO).validate("t").is_err());
        assert!(RetryPolicy::fixed(limits::MAX_ATTEMPTS + 1, Duration::ZERO)
            .validate("t")
            .is_err());
        let p = RetryPolicy::exponential(3, Duration::from_secs(10))
            .with_max_interval(Duration::from_secs(5));
        let e = p.validate("enqueue").unwrap_err();
        assert!(e.to_string().contains("below the initial interval"), "{e}");
        assert!(
            RetryPolicy::fixed(3, limits::MAX_INTERVAL + Duration::from_secs(1))
                .validate("t")
                .is_err()
        );
    }

    #[test]
    fn new_task_validation_messages() {
        let lim = 100;
        let ok = NewTask::new("PAY_ORDER", "o-1");
        assert!(ok.validate(lim).is_ok());
        let msg = |t: NewTask| t.validate(lim).unwrap_err().to_string();
        assert!(msg(NewTask::new("", "k")).contains("event_type must be 1 to 64 bytes"));
        assert!(msg(NewTask::new("a".repeat(65), "k")).contains("event_type"));
        assert!(msg(NewTask::new("has space", "k")).contains("event_type"));
        assert!(msg(NewTask::new("E", "")).contains("biz_key must be 1 to 128 bytes"));
        assert!(msg(NewTask::new("E", "k".repeat(129))).contains("biz_key"));
        assert!(msg(NewTask::new("E", "a\0b")).contains("control"));
        assert!(msg(NewTask::new("E", "k").payload_raw("{nope")).contains("not valid JSON"));
        assert!(msg(NewTask::new("E", "k").json(&"x".repeat(200))).contains("over the limit"));
        assert!(
            msg(NewTask::new("E", "k").delay(limits::MAX_INTERVAL * 2)).contains("delay must be")
        );
        // exactly at the limits is fine
        assert!(NewTask::new("a".repeat(64), "k".repeat(128))
            .payload_raw("x".repeat(98).replace('x', " ") + "{}")
            .validate(lim)
            .is_ok());
    }

    #[test]
    fn owner_generate_is_unique_and_valid() {
        let a = Owner::generate();
        let b = Owner::generate();
        assert_ne!(a, b);
        assert!(Owner::new(a.as_str()).is_ok());
        assert!(Owner::new("").is_err());
        assert!(Owner::new("x".repeat(65)).is_err());
    }

    #[test]
    fn status_codes_round_trip() {
        for s in Status::ALL {
            assert_eq!(Status::from_code(s.code().into()).unwrap(), s);
        }
    }
}

/// Who changes a task by hand, and why: recorded in the task's audit log (see
/// [`TaskStore::audit_log`](crate::TaskStore::audit_log)) in the same transaction as the
/// change.
///
/// ```
/// use backstop_core::Audit;
/// let audit = Audit::new("alice", "the customer asked to stop the mailing");
/// assert_eq!(audit.operator, "alice");
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Audit {
    /// Who (1 to 64 bytes, no control characters).
    pub operator: String,
    /// Why (at most 1024 bytes; may be empty).
    pub reason: String,
}

impl Audit {
    /// `operator` does it because of `reason`.
    pub fn new(operator: impl Into<String>, reason: impl Into<String>) -> Self {
        Self {
            operator: operator.into(),
            reason: reason.into(),
        }
    }

    /// The check every operator's change runs first: `InvalidInput` for an empty,
    /// over-long or control-character operator, or an over-long reason.
    ///
    /// ```
    /// use backstop_core::Audit;
    /// assert!(Audit::new("alice", "").validate().is_ok());
    /// assert!(Audit::new("", "why").validate().is_err());
    /// ```
    pub fn validate(&self) -> Result<()> {
        crate::limits::check_audit("audit", self)
    }
}

/// One entry of a task's audit log: an operator's change.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct AuditEntry {
    /// The task changed.
    pub task_id: TaskId,
    /// What was done (`cancel`, `delete`).
    pub action: String,
    /// Who did it.
    pub operator: String,
    /// Why.
    pub reason: String,
    /// When (database time).
    pub at: DateTime<Utc>,
}
