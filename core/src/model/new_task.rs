//! A task to enqueue ([`NewTask`]) and its options: priority, dedup rule, what a parked
//! task does to its order key; and what an enqueue answers ([`Enqueued`]).

use std::fmt;
use std::time::Duration;

use chrono::{DateTime, Utc};

use super::{RetryPolicy, Status, TaskId};
use crate::error::{Error, Result};
use crate::limits;

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

/// What an enqueue does to the *pending* task it is a duplicate of (see [`Dedup`]), as
/// graphile-worker's `job_key_mode`. A running, waiting or finished task is never changed:
/// the enqueue is answered with it as it is.
///
/// | mode | the pending duplicate's payload | its due time | graphile-worker |
/// |---|---|---|---|
/// | [`Keep`](Self::Keep) (default) | kept | kept | `unsafe_dedupe`, with [`Dedup::Forever`] (a match in any state) |
/// | [`PreserveRunAt`](Self::PreserveRunAt) | replaced | kept (throttle: the first due time holds) | `preserve_run_at` |
/// | [`Replace`](Self::Replace) | replaced | the new enqueue's (debounce: each enqueue pushes it back) | `replace` |
///
/// [`Enqueued::replaced`](crate::Enqueued::replaced) says whether the duplicate was
/// changed. Unlike graphile-worker, a duplicate of a *running* task is answered with it
/// (under [`Dedup::WhileActive`]) rather than made a new task: enqueue under a key of
/// its own, or use [`NewTask::order_key`], to have new data run after it.
///
/// ```
/// use std::time::Duration;
/// use backstop_core::{NewTask, OnDuplicate};
/// // rebuild the search index at most once a minute, with the latest state
/// let t = NewTask::new("REINDEX", "product-7")
///     .delay(Duration::from_secs(60))
///     .on_duplicate(OnDuplicate::PreserveRunAt);
/// assert_eq!(t.on_duplicate_mode(), OnDuplicate::PreserveRunAt);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
#[non_exhaustive]
pub enum OnDuplicate {
    /// Leave the pending task as it is.
    #[default]
    Keep,
    /// Replace its payload; keep its due time.
    PreserveRunAt,
    /// Replace its payload and its due time with the new enqueue's (`delay`, `run_at`).
    Replace,
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
    on_duplicate: OnDuplicate,
    /// Why [`unique_by`](Self::unique_by) could not make the key, reported by `validate`.
    key_error: Option<String>,
    order_key: Option<String>,
    when_parked: WhenParked,
    timeout: Option<Duration>,
    /// The tags' column text, canonical (`,a,b,`; empty for none): see `labels`.
    tags: String,
    /// Why a tag could not be added, reported by `validate`.
    tags_error: Option<String>,
    /// The metadata object's JSON text, or why it is not one.
    metadata: Option<std::result::Result<String, String>>,
    /// The W3C trace context of the span that made the task (see `crate::otel`).
    traceparent: Option<String>,
    /// The partition of its queue's limits ([`partition`](Self::partition)).
    partition: Option<String>,
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
            on_duplicate: OnDuplicate::Keep,
            key_error: None,
            order_key: None,
            when_parked: WhenParked::Block,
            timeout: None,
            tags: String::new(),
            tags_error: None,
            metadata: None,
            traceparent: crate::otel::current(),
            partition: None,
        }
    }

    /// The same task under another business key (a periodic task's tick), with the trace
    /// context of the span making the tick (not of the one that registered it).
    pub(crate) fn with_biz_key(mut self, biz_key: String) -> Self {
        self.biz_key = biz_key;
        self.traceparent = crate::otel::current();
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
            .or_else(|| super::defaults::dedup_of(&self.event_type))
            .unwrap_or_default()
    }

    /// On a duplicate of a *pending* task, replace its payload with this task's (the
    /// latest state wins: a settings sync, a search-index update), keeping its due time:
    /// [`OnDuplicate::PreserveRunAt`] (`true`) or [`OnDuplicate::Keep`] (`false`). A
    /// running or finished task is never changed. [`Enqueued::replaced`] says whether it
    /// happened.
    pub fn replace_pending(self, replace: bool) -> Self {
        self.on_duplicate(if replace {
            OnDuplicate::PreserveRunAt
        } else {
            OnDuplicate::Keep
        })
    }

    /// What a duplicate of a pending task does to it (see [`OnDuplicate`]).
    pub fn on_duplicate(mut self, mode: OnDuplicate) -> Self {
        self.on_duplicate = mode;
        self
    }

    /// What a duplicate of a pending task does to it.
    pub fn on_duplicate_mode(&self) -> OnDuplicate {
        self.on_duplicate
    }

    /// Whether a duplicate of a pending task replaces its payload.
    pub fn replaces_pending(&self) -> bool {
        self.on_duplicate != OnDuplicate::Keep
    }

    /// Make the business key — the key duplicates are found by ([`Dedup`]) — from these
    /// fields of the payload set so far (call it after [`json`](Self::json)): unique by
    /// payload fields. The key is `field=value` per field, joined by `&`, each value as
    /// compact JSON (an object's keys sorted), so tasks whose fields are equal share a
    /// key whatever else their payloads hold. A field may be a path into nested objects
    /// (`customer.id`).
    ///
    /// `InvalidInput` at the enqueue, naming the field, when the payload is not a JSON
    /// object, a field is missing, no field is named, or the key is over
    /// [`MAX_BIZ_KEY_BYTES`](crate::limits::MAX_BIZ_KEY_BYTES) (128; name fewer or
    /// shorter fields).
    ///
    /// ```
    /// use backstop_core::NewTask;
    /// let t = NewTask::new("SEND_DIGEST", "-")
    ///     .json(&serde_json::json!({"user": {"id": 7}, "day": "2026-12-04", "items": [1, 2]}))
    ///     .unique_by(&["user.id", "day"]);
    /// assert_eq!(t.biz_key(), r#"user.id=7&day="2026-12-04""#);
    /// assert!(t.validate(64 * 1024).is_ok());
    /// let e = NewTask::new("SEND_DIGEST", "-").json(&serde_json::json!({})).unique_by(&["day"]);
    /// assert!(e.validate(64 * 1024).unwrap_err().to_string().contains("day"));
    /// ```
    pub fn unique_by(mut self, fields: &[&str]) -> Self {
        match key_of(self.payload.as_deref().map_err(Clone::clone), fields) {
            Ok(key) => {
                self.biz_key = key;
                self.key_error = None;
            }
            Err(why) => self.key_error = Some(why),
        }
        self
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

    /// Count the task in partition `key` (a tenant, an account) of its type's limits:
    /// where the type's queue is partitioned
    /// ([`QueueChange::Partition`](crate::QueueChange::Partition)), its concurrency and
    /// rate limits hold per partition — at most N of one tenant's tasks at once, at most
    /// N starts of one tenant's per window — and a full partition does not hold up the
    /// others. A task without one is in the partition of the tasks without a key. Where
    /// the queue is not partitioned, the key changes nothing.
    ///
    /// 1 to 128 bytes, no control characters.
    ///
    /// ```
    /// use backstop_core::NewTask;
    /// let task = NewTask::new("SYNC_MAILBOX", "mailbox-9").partition("tenant-42");
    /// assert_eq!(task.partition_key(), Some("tenant-42"));
    /// ```
    pub fn partition(mut self, key: impl Into<String>) -> Self {
        self.partition = Some(key.into());
        self
    }

    /// The partition key, if any.
    pub fn partition_key(&self) -> Option<&str> {
        self.partition.as_deref()
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

    /// Add a tag: a label to find the task by
    /// ([`TaskFilter::tag`](crate::TaskFilter::tag), `backstop tasks list --tag`, the
    /// console). 1 to [`limits::MAX_TAG_BYTES`] bytes of ASCII letters, digits, `_`, `.`,
    /// `:`, `/` and `-`; at most [`limits::MAX_TAGS`] per task; stored sorted, each once.
    /// A bad tag is reported by the enqueue, which writes nothing.
    ///
    /// ```
    /// use backstop_core::NewTask;
    /// let task = NewTask::new("EMAIL", "u-7").tag("tenant:acme").tags(["welcome", "eu"]);
    /// assert_eq!(task.tag_list(), vec!["eu", "tenant:acme", "welcome"]);
    /// ```
    pub fn tag(self, tag: impl Into<String>) -> Self {
        self.tags([tag])
    }

    /// Add several tags (see [`tag`](Self::tag)).
    pub fn tags<I, S>(mut self, tags: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        if self.tags_error.is_none() {
            match super::add_tags(&self.tags, tags) {
                Ok(column) => self.tags = column,
                Err(why) => self.tags_error = Some(why),
            }
        }
        self
    }

    /// The task's tags, sorted.
    pub fn tag_list(&self) -> Vec<String> {
        super::decode_tags(&self.tags)
    }

    /// The tags as stored (`,a,b,`), `None` for no tag.
    pub(crate) fn tags_column(&self) -> Option<&str> {
        Some(self.tags.as_str()).filter(|t| !t.is_empty())
    }

    /// Serialize `value` as the task's metadata: a JSON object of at most
    /// [`limits::MAX_METADATA_BYTES`], stored with the task for people and tools (who
    /// asked for it, a trace, a tenant), shown by the CLI and the console and filtered
    /// on with [`TaskFilter::metadata`](crate::TaskFilter::metadata). The handler sees it
    /// as [`Task::metadata`](crate::Task::metadata). Anything but an object is reported
    /// by the enqueue, which writes nothing.
    ///
    /// ```
    /// use backstop_core::NewTask;
    /// let task = NewTask::new("EMAIL", "u-7").metadata(&serde_json::json!({"tenant": "acme"}));
    /// assert_eq!(task.metadata_json(), Some(r#"{"tenant":"acme"}"#));
    /// ```
    pub fn metadata<T: serde::Serialize + ?Sized>(mut self, value: &T) -> Self {
        self.metadata = Some(serde_json::to_string(value).map_err(|e| e.to_string()));
        self
    }

    /// Use `json` (a JSON object as text) as the metadata (see
    /// [`metadata`](Self::metadata)).
    pub fn metadata_raw(mut self, json: impl Into<String>) -> Self {
        self.metadata = Some(Ok(json.into()));
        self
    }

    /// The metadata's JSON text, if set (and serialized).
    pub fn metadata_json(&self) -> Option<&str> {
        self.metadata.as_ref().and_then(|m| m.as_deref().ok())
    }

    /// Carry the W3C trace context `traceparent` (`00-<trace id>-<parent id>-<flags>`,
    /// lowercase hex; see [`is_traceparent`](crate::is_traceparent)) instead of the one
    /// [`new`](Self::new) captured: the attempt's span links to it. With the feature
    /// `otel`, `new` captures the current span's; without it, a task has one only when
    /// set here (a context received from elsewhere). An invalid one is reported by the
    /// enqueue, which writes nothing.
    pub fn traceparent(mut self, traceparent: impl Into<String>) -> Self {
        self.traceparent = Some(traceparent.into());
        self
    }

    /// The trace context the task carries, if any.
    pub fn trace_context(&self) -> Option<&str> {
        self.traceparent.as_deref()
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
            .or_else(|| super::defaults::policy_of(&self.event_type))
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
        if let Some(why) = &self.key_error {
            return Err(Error::invalid_input(OP, format!("unique_by: {why}")));
        }
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
        if let Some(key) = &self.partition {
            limits::check_partition_key(OP, key)?;
        }
        if let Some(tp) = &self.traceparent {
            if !crate::otel::is_traceparent(tp) {
                return Err(Error::invalid_input(
                    OP,
                    format!(
                        "traceparent {:?} is not a W3C trace context (00-<32 hex>-<16 hex>-<2 hex>)",
                        tp.chars().take(64).collect::<String>()
                    ),
                ));
            }
        }
        if let Some(why) = &self.tags_error {
            return Err(Error::invalid_input(OP, why.clone()));
        }
        match &self.metadata {
            Some(Err(e)) => {
                return Err(Error::invalid_input(
                    OP,
                    format!("metadata does not serialize: {e}"),
                ))
            }
            Some(Ok(json)) => {
                if let Some(why) = super::metadata_problem(json) {
                    return Err(Error::invalid_input(OP, why));
                }
            }
            None => {}
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

/// The key [`NewTask::unique_by`] makes of `fields` of `payload`, or why it cannot.
fn key_of(
    payload: std::result::Result<&str, String>,
    fields: &[&str],
) -> std::result::Result<String, String> {
    let payload = payload.map_err(|e| format!("the payload is not valid JSON: {e}"))?;
    let doc: serde_json::Value =
        serde_json::from_str(payload).map_err(|e| format!("the payload is not valid JSON: {e}"))?;
    if !doc.is_object() {
        return Err("the payload is not a JSON object".to_owned());
    }
    if fields.is_empty() {
        return Err("no field named".to_owned());
    }
    let mut parts = Vec::with_capacity(fields.len());
    for field in fields {
        let value = field
            .split('.')
            .try_fold(&doc, |v, name| v.get(name))
            .ok_or_else(|| format!("the payload has no field {field:?}"))?;
        parts.push(format!("{field}={}", canonical(value)));
    }
    let key = parts.join("&");
    if key.len() > limits::MAX_BIZ_KEY_BYTES {
        return Err(format!(
            "the key of {fields:?} is {} bytes, over {} (name fewer or shorter fields)",
            key.len(),
            limits::MAX_BIZ_KEY_BYTES
        ));
    }
    Ok(key)
}

/// `value` as compact JSON with every object's keys sorted, whatever order the payload
/// (or serde_json's `preserve_order`, if some crate turns it on) keeps them in.
fn canonical(value: &serde_json::Value) -> String {
    match value {
        serde_json::Value::Object(map) => {
            let mut entries: Vec<(&String, &serde_json::Value)> = map.iter().collect();
            entries.sort_by(|a, b| a.0.cmp(b.0));
            let inner: Vec<String> = entries
                .into_iter()
                .map(|(k, v)| format!("{}:{}", serde_json::Value::String(k.clone()), canonical(v)))
                .collect();
            format!("{{{}}}", inner.join(","))
        }
        serde_json::Value::Array(items) => {
            let inner: Vec<String> = items.iter().map(canonical).collect();
            format!("[{}]", inner.join(","))
        }
        other => other.to_string(),
    }
}
