//! What the store's queries take and answer: the list filter, the sweep's count, the
//! stats and the throughput.

use std::time::Duration;

use chrono::{DateTime, Utc};

use super::{Status, TaskId};
use crate::error::{Error, Result};
use crate::limits::{self, MAX_ERROR_FILTER_BYTES};

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
    /// Only business keys that start with this text (exactly: no wildcards, case
    /// sensitive): a saga's step tasks are `<saga key>/…`.
    pub biz_key_prefix: Option<String>,
    /// Only tasks whose `last_error` contains this text (exactly: no wildcards, case
    /// sensitive; 1 to 200 bytes).
    pub error_contains: Option<String>,
    /// Only tasks with every one of these tags ([`NewTask::tag`](crate::NewTask::tag)).
    pub tags: Vec<String>,
    /// Only tasks whose metadata has each of these top-level keys with exactly that
    /// string value ([`NewTask::metadata`](crate::NewTask::metadata)); a number, a
    /// boolean or an object under the key does not match.
    pub metadata: Vec<(String, String)>,
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
            biz_key_prefix: None,
            error_contains: None,
            tags: Vec::new(),
            metadata: Vec::new(),
            after_id: None,
            older_than: None,
            limit: 100,
        }
    }
}

impl TaskFilter {
    /// Check a `list` filter: limit, event type, age.
    pub(crate) fn check(&self) -> Result<()> {
        const OP: &str = "list";
        limits::check_limit(OP, self.limit)?;
        if let Some(t) = &self.event_type {
            limits::check_event_type(OP, t)?;
        }
        if let Some(d) = self.older_than {
            limits::check_duration(OP, "older_than", d)?;
        }
        if let Some(k) = &self.biz_key {
            limits::check_biz_key(OP, k)?;
        }
        if let Some(k) = &self.biz_key_prefix {
            limits::check_key(OP, "biz_key_prefix", k, limits::MAX_BIZ_KEY_BYTES)?;
        }
        let labels = self.tags.len() + self.metadata.len();
        if labels > limits::MAX_LABEL_FILTERS {
            return Err(Error::invalid_input(
                OP,
                format!(
                    "a list filters on at most {} tags and metadata keys, got {labels}",
                    limits::MAX_LABEL_FILTERS
                ),
            ));
        }
        for tag in &self.tags {
            crate::model::check_tag(OP, tag)?;
        }
        for (key, value) in &self.metadata {
            crate::model::check_metadata_key(OP, key)?;
            if value.len() > limits::MAX_METADATA_BYTES {
                return Err(Error::invalid_input(
                    OP,
                    format!(
                        "metadata value of {key:?} is over {} bytes",
                        limits::MAX_METADATA_BYTES
                    ),
                ));
            }
        }
        if let Some(text) = &self.error_contains {
            if text.is_empty() || text.len() > MAX_ERROR_FILTER_BYTES {
                return Err(Error::invalid_input(
                    OP,
                    format!(
                        "error_contains must be 1 to {MAX_ERROR_FILTER_BYTES} bytes, got {}",
                        text.len()
                    ),
                ));
            }
        }
        Ok(())
    }

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

    /// Only tasks whose business key starts with `prefix`.
    pub fn biz_key_prefix(mut self, prefix: impl Into<String>) -> Self {
        self.biz_key_prefix = Some(prefix.into());
        self
    }

    /// Only tasks whose last error contains `text`.
    pub fn error_contains(mut self, text: impl Into<String>) -> Self {
        self.error_contains = Some(text.into());
        self
    }

    /// Only tasks tagged `tag` (added to the tags asked for before: all must match).
    ///
    /// ```
    /// use backstop_core::TaskFilter;
    /// let f = TaskFilter::default().tag("tenant:acme").metadata("region", "eu");
    /// assert_eq!(f.tags, vec!["tenant:acme"]);
    /// ```
    pub fn tag(mut self, tag: impl Into<String>) -> Self {
        self.tags.push(tag.into());
        self
    }

    /// Only tasks whose metadata holds `key` with the string `value` (added to the
    /// conditions before: all must match). The key is 1 to 64 bytes of ASCII letters,
    /// digits, `_` and `-`.
    pub fn metadata(mut self, key: impl Into<String>, value: impl Into<String>) -> Self {
        self.metadata.push((key.into(), value.into()));
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
    /// Dead tasks the sweep saw but left alone because another transaction held their
    /// rows at that moment (a sweep that passes locked rows: `SKIP LOCKED`). They are
    /// still dead: the engine sweeps again shortly rather than at its next interval. A
    /// backend whose sweep waits for such rows, or that has no row locks, reports 0.
    pub passed_over: u64,
}

impl Recycled {
    /// All tasks recycled (not counting those passed over).
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
