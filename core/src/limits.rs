//! Input limits: what every store accepts, the same on every backend. Input beyond them
//! is refused with [`ErrorKind::InvalidInput`](crate::ErrorKind::InvalidInput) before
//! anything is written (the checks run in core, once for every backend).

use std::time::Duration;

use crate::error::{Error, Result};

/// Longest event type, in bytes.
pub const MAX_EVENT_TYPE_BYTES: usize = 64;
/// Longest business key, in bytes.
pub const MAX_BIZ_KEY_BYTES: usize = 128;
/// Longest global transaction id or branch id of a
/// [`BranchCall`](crate::BranchCall), in bytes.
pub const MAX_BRANCH_ID_BYTES: usize = 128;
/// Longest saga name, in bytes (letters, digits, `_`, `.`, `-`): its event type,
/// `saga:` and the name, stays within [`MAX_EVENT_TYPE_BYTES`].
pub const MAX_SAGA_NAME_BYTES: usize = 48;
/// Longest step name, in bytes (letters, digits, `_`, `.`, `-`).
pub const MAX_STEP_NAME_BYTES: usize = 48;
/// Longest saga key, in bytes (no control characters): a step's business key, the key,
/// `/`, the step's name and its phase, stays within
/// [`MAX_BIZ_KEY_BYTES`].
pub const MAX_SAGA_KEY_BYTES: usize = 64;
/// Most steps in one saga.
pub const MAX_SAGA_STEPS: usize = 64;

/// Longest owner name, in bytes.
pub const MAX_OWNER_BYTES: usize = 64;
/// Default payload limit, in bytes (64 KiB, MySQL's `TEXT`).
pub const DEFAULT_MAX_PAYLOAD_BYTES: usize = 64 * 1024;
/// The largest payload limit a store may be configured with (16 MiB − 1, MySQL's `MEDIUMTEXT`).
pub const MAX_PAYLOAD_LIMIT: usize = 16 * 1024 * 1024 - 1;
/// `last_error` is cut to this many bytes (at a character boundary).
pub const MAX_ERROR_BYTES: usize = 2000;

/// Most tags on one task ([`NewTask::tag`](crate::NewTask::tag)).
pub const MAX_TAGS: usize = 16;
/// Longest tag, in bytes (ASCII letters, digits, `_`, `.`, `:`, `/`, `-`).
pub const MAX_TAG_BYTES: usize = 64;
/// Largest metadata object of a task ([`NewTask::metadata`](crate::NewTask::metadata)),
/// in bytes of JSON.
pub const MAX_METADATA_BYTES: usize = 8 * 1024;
/// Longest metadata key a list filters on, in bytes.
pub const MAX_METADATA_KEY_BYTES: usize = 64;
/// Most tag or metadata conditions in one [`TaskFilter`](crate::TaskFilter).
pub const MAX_LABEL_FILTERS: usize = 8;
/// Largest output a handler records
/// ([`Context::record_output`](crate::Context::record_output)), in bytes of JSON.
pub const MAX_OUTPUT_BYTES: usize = 32 * 1024;
pub use crate::model::is_tag_char;

/// An event type whose handlers no engine has registered for this long (a day; engines
/// register theirs every hour) counts as unhandled: its waiting tasks are reported
/// (`backstop_unhandled_tasks`, a warning), as for a type no engine ever handled.
pub const HANDLERS_GONE_AFTER: Duration = Duration::from_secs(24 * 3600);

/// How many rounds [`Engine::drain`](crate::Engine::drain) runs before it gives up on
/// work that keeps coming due.
pub const MAX_DRAIN_ROUNDS: usize = 1000;

/// Largest `max_attempts`.
pub const MAX_ATTEMPTS: u32 = 10_000;
/// Longest delay, retry interval or age argument: 365 days.
pub const MAX_INTERVAL: Duration = Duration::from_secs(365 * 24 * 3600);
/// Most tasks [`count_matching`](crate::TaskStore::count_matching) counts: a count at
/// this cap means that many or more.
pub const MAX_COUNT: usize = 100_000;

/// Largest `limit` of a batch operation (claim, recycle, purge, list).
pub const MAX_BATCH: usize = 1000;
/// Most tasks in one [`enqueue_many`](crate::TaskStore::enqueue_many) (one transaction:
/// a larger batch holds its locks and its rows in memory longer than it gains).
pub const MAX_ENQUEUE_MANY: usize = 10_000;
/// Most event types one `claim_batch` may name.
pub const MAX_EVENT_TYPES: usize = 256;
/// Most leases one `mark` or `heartbeat` call may carry.
pub const MAX_LEASES: usize = 10_000;
/// Longest table (or schema) name, in bytes: leaves room for index-name suffixes within
/// PostgreSQL's 63-byte identifiers.
pub const MAX_IDENTIFIER_BYTES: usize = 48;

/// Whether `c` may appear in an event type: an ASCII letter or digit, `_`, `.`, `:` or
/// `-`. None of them can end or escape an SQL string literal, so a driver may write a
/// checked event type into a statement as a literal.
///
/// ```
/// use backstop_core::limits::is_event_type_char;
/// assert!("orders.created:v2".chars().all(is_event_type_char));
/// assert!(!is_event_type_char('\''));
/// ```
pub fn is_event_type_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | ':' | '-')
}

/// Check an event type: 1–64 bytes of ASCII letters, digits, `_`, `.`, `:` or `-`.
pub(crate) fn check_event_type(operation: &'static str, event_type: &str) -> Result<()> {
    if event_type.is_empty() || event_type.len() > MAX_EVENT_TYPE_BYTES {
        return Err(Error::invalid_input(
            operation,
            format!(
                "event_type must be 1 to {MAX_EVENT_TYPE_BYTES} bytes, got {}",
                event_type.len()
            ),
        ));
    }
    if let Some(c) = event_type.chars().find(|c| !is_event_type_char(*c)) {
        return Err(Error::invalid_input(
            operation,
            format!(
                "event_type {event_type:?} contains {c:?}; use ASCII letters, digits, '_', '.', ':' or '-'"
            ),
        ));
    }
    Ok(())
}

/// Check a key called `what` (a business key, an order key, a barrier's id): 1 to `max`
/// bytes, no control characters.
pub(crate) fn check_key(operation: &'static str, what: &str, key: &str, max: usize) -> Result<()> {
    if key.is_empty() || key.len() > max {
        return Err(Error::invalid_input(
            operation,
            format!("{what} must be 1 to {max} bytes, got {}", key.len()),
        ));
    }
    if key.chars().any(char::is_control) {
        return Err(Error::invalid_input(
            operation,
            format!("{what} must not contain control characters"),
        ));
    }
    Ok(())
}

/// Check a business key: 1 to [`MAX_BIZ_KEY_BYTES`] bytes, no control characters.
pub(crate) fn check_biz_key(operation: &'static str, biz_key: &str) -> Result<()> {
    check_key(operation, "biz_key", biz_key, MAX_BIZ_KEY_BYTES)
}

/// Check an order key: 1 to [`MAX_BIZ_KEY_BYTES`] bytes, no control characters.
pub(crate) fn check_order_key(operation: &'static str, key: &str) -> Result<()> {
    check_key(operation, "order_key", key, MAX_BIZ_KEY_BYTES)
}

/// Check a partition key ([`NewTask::partition`](crate::NewTask::partition)): 1 to
/// [`MAX_BIZ_KEY_BYTES`] bytes, no control characters.
pub(crate) fn check_partition_key(operation: &'static str, key: &str) -> Result<()> {
    check_key(operation, "partition", key, MAX_BIZ_KEY_BYTES)
}

/// Check a delay or age argument is at most [`MAX_INTERVAL`].
pub(crate) fn check_duration(operation: &'static str, what: &str, d: Duration) -> Result<()> {
    if d > MAX_INTERVAL {
        return Err(Error::invalid_input(
            operation,
            format!("{what} must be at most {MAX_INTERVAL:?}, got {d:?}"),
        ));
    }
    Ok(())
}

/// Most finished tasks per status [`TaskStore::throughput`](crate::TaskStore::throughput)
/// counts (the most recent ones): its cost stays bounded however busy the system is.
pub const MAX_THROUGHPUT_ROWS: usize = 20_000;

/// Most buckets of a [`TaskStore::throughput`](crate::TaskStore::throughput) window.
pub const MAX_THROUGHPUT_BUCKETS: u128 = 1440;

/// Check a throughput window: a bucket of at least one second, a window of at least one
/// bucket, at most [`MAX_THROUGHPUT_BUCKETS`] buckets and [`MAX_INTERVAL`].
pub(crate) fn check_buckets(
    operation: &'static str,
    window: Duration,
    bucket: Duration,
) -> Result<()> {
    check_duration(operation, "window", window)?;
    if bucket < Duration::from_secs(1) || window < bucket {
        return Err(Error::invalid_input(
            operation,
            format!("the bucket must be at least 1s and at most the window, got {bucket:?} of {window:?}"),
        ));
    }
    if window.as_millis().div_ceil(bucket.as_millis()) > MAX_THROUGHPUT_BUCKETS {
        return Err(Error::invalid_input(
            operation,
            format!(
                "at most {MAX_THROUGHPUT_BUCKETS} buckets, got {window:?} in buckets of {bucket:?}"
            ),
        ));
    }
    Ok(())
}

/// Check a batch `limit` is at most [`MAX_BATCH`] (0 is allowed and means "nothing").
pub(crate) fn check_limit(operation: &'static str, limit: usize) -> Result<()> {
    if limit > MAX_BATCH {
        return Err(Error::invalid_input(
            operation,
            format!("limit must be at most {MAX_BATCH}, got {limit}"),
        ));
    }
    Ok(())
}

/// Longest operator name of an [`Audit`](crate::Audit), in bytes.
pub const MAX_OPERATOR_BYTES: usize = 64;
/// Longest reason of an [`Audit`](crate::Audit), in bytes.
pub const MAX_REASON_BYTES: usize = 1024;

/// Check the event types of a `claim_batch`: at most [`MAX_EVENT_TYPES`], each valid.
pub(crate) fn check_event_types(operation: &'static str, event_types: &[String]) -> Result<()> {
    if event_types.len() > MAX_EVENT_TYPES {
        return Err(Error::invalid_input(
            operation,
            format!(
                "at most {MAX_EVENT_TYPES} event types per call, got {}",
                event_types.len()
            ),
        ));
    }
    event_types
        .iter()
        .try_for_each(|t| check_event_type(operation, t))
}

/// Longest `error_contains` of a [`TaskFilter`](crate::TaskFilter), in bytes.
pub const MAX_ERROR_FILTER_BYTES: usize = 200;

/// `error` cut to at most [`MAX_ERROR_BYTES`] at a character boundary.
pub(crate) fn bounded_error(error: &str) -> &str {
    if error.len() <= MAX_ERROR_BYTES {
        return error;
    }
    let mut end = MAX_ERROR_BYTES;
    while !error.is_char_boundary(end) {
        end -= 1;
    }
    &error[..end]
}

/// The rule for an SQL identifier (table or schema name) that a store interpolates into
/// its SQL: 1–48 bytes, an ASCII letter or `_` first, then letters, digits or `_`. A store
/// refuses to open with any other name (a `Config` error naming `what`).
pub fn check_identifier(operation: &'static str, what: &str, name: &str) -> Result<()> {
    let ok = !name.is_empty()
        && name.len() <= MAX_IDENTIFIER_BYTES
        && name
            .chars()
            .next()
            .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
    if ok {
        Ok(())
    } else {
        Err(Error::config(
            operation,
            format!(
                "{what} {name:?} is not a valid identifier: use 1 to {MAX_IDENTIFIER_BYTES} ASCII letters, digits or '_', not starting with a digit"
            ),
        ))
    }
}

/// Settings every store shares: the table name, the payload limit, and how often an
/// operation rolled back by contention is run again.
///
/// ```
/// use backstop_core::StoreConfig;
/// let cfg = StoreConfig::default().table("orders_outbox");
/// assert!(cfg.validate().is_ok());
/// assert!(StoreConfig::default().table("x; DROP TABLE y").validate().is_err());
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct StoreConfig {
    /// The task table's name (default `backstop_task`).
    pub table: String,
    /// The largest payload accepted, in bytes (default 64 KiB).
    pub max_payload_bytes: usize,
    /// How many times an operation that the database rolled back because of a concurrent
    /// transaction (deadlock, serialization failure, lock wait timeout:
    /// [`ErrorKind::Contention`](crate::ErrorKind::Contention)) is run again, with
    /// backoff from 5 ms, doubling, plus jitter, before the error is reported (default
    /// 5). Nothing else is retried by the store: a lost connection may have applied the
    /// work, so the caller decides.
    pub contention_retries: u32,
    /// Where the store announces the tasks it commits, set with
    /// [`notifier`](Self::notifier) (default none).
    pub announcer: Option<std::sync::Arc<crate::notify::Announcer>>,
}

impl Default for StoreConfig {
    fn default() -> Self {
        Self {
            table: "backstop_task".to_owned(),
            max_payload_bytes: DEFAULT_MAX_PAYLOAD_BYTES,
            contention_retries: 5,
            announcer: None,
        }
    }
}

impl StoreConfig {
    /// Use another table name.
    pub fn table(mut self, table: impl Into<String>) -> Self {
        self.table = table.into();
        self
    }

    /// Use another payload limit.
    pub fn max_payload_bytes(mut self, bytes: usize) -> Self {
        self.max_payload_bytes = bytes;
        self
    }

    /// Run an operation rolled back by contention again up to `n` times.
    pub fn contention_retries(mut self, n: u32) -> Self {
        self.contention_retries = n;
        self
    }

    /// Announce the due tasks every enqueue path commits through `notifier` (Redis
    /// pub/sub beside MySQL or SQLite), so that a process enqueuing without an engine —
    /// an API instance — wakes the engines that listen: the store's own enqueues, batch
    /// enqueues and saga starts after their commit; those on the caller's transaction
    /// once their task can be read from another connection (it committed; see
    /// [`Announcer`](crate::driver::Announcer)). Each event type at most once per 5 ms,
    /// plus a trailing announcement. A PostgreSQL store announces with `NOTIFY` in the
    /// enqueue's transaction already; this adds the notifier's announcements to those.
    /// Meant for processes without an engine: an engine on such a store announces
    /// through its own notifier what it does not run, and the store's announcement of
    /// a task the engine runs ahead wakes the others for nothing.
    ///
    /// ```no_run
    /// # fn demo(redis: std::sync::Arc<dyn backstop_core::Notifier>) {
    /// let config = backstop_core::StoreConfig::default().notifier(redis);
    /// # }
    /// ```
    pub fn notifier(mut self, notifier: std::sync::Arc<dyn crate::notify::Notifier>) -> Self {
        self.announcer = Some(crate::notify::Announcer::new(
            notifier,
            std::time::Duration::from_millis(5),
        ));
        self
    }

    /// Check the table name is a valid identifier and the payload limit is 1 byte to
    /// [`MAX_PAYLOAD_LIMIT`]; a store refuses to open with a bad config.
    pub fn validate(&self) -> Result<()> {
        check_identifier("open_store", "table name", &self.table)?;
        if self.max_payload_bytes == 0 || self.max_payload_bytes > MAX_PAYLOAD_LIMIT {
            return Err(Error::config(
                "open_store",
                format!(
                    "max_payload_bytes must be 1 to {MAX_PAYLOAD_LIMIT}, got {}",
                    self.max_payload_bytes
                ),
            ));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn identifiers() {
        for good in ["backstop_task", "_t", "T1", &"a".repeat(48)] {
            assert!(check_identifier("t", "table", good).is_ok(), "{good}");
        }
        for bad in [
            "",
            "1t",
            "a-b",
            "a b",
            "a;b",
            "\"x\"",
            "tä",
            &"a".repeat(49),
        ] {
            let e = check_identifier("t", "table", bad).unwrap_err();
            assert_eq!(e.kind(), crate::error::ErrorKind::Config, "{bad}");
        }
    }

    #[test]
    fn bounded_error_keeps_short_text_and_cuts_long_text() {
        assert_eq!(bounded_error("short"), "short");
        assert_eq!(
            bounded_error(&"é".repeat(MAX_ERROR_BYTES)).len(),
            MAX_ERROR_BYTES
        );
    }

    #[test]
    fn bounded_error_cuts_at_char_boundary() {
        let s = format!("a{}", "€".repeat(1000)); // 1 + 3000 bytes
        let b = bounded_error(&s);
        assert!(b.len() <= MAX_ERROR_BYTES && b.len() > MAX_ERROR_BYTES - 3);
        assert!(s.starts_with(b));
    }

    #[test]
    fn config_limits() {
        assert!(StoreConfig::default()
            .max_payload_bytes(0)
            .validate()
            .is_err());
        assert!(StoreConfig::default()
            .max_payload_bytes(MAX_PAYLOAD_LIMIT + 1)
            .validate()
            .is_err());
    }
}
