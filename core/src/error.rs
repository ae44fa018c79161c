//! The one error type of backstop.

use std::fmt;

/// A boxed error source.
pub type BoxError = Box<dyn std::error::Error + Send + Sync + 'static>;

/// What kind of failure an [`Error`] is.
///
/// Non-exhaustive: match the kinds you handle and treat the rest as unexpected.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ErrorKind {
    /// The caller passed something invalid (an empty event type, an over-size payload…).
    /// Nothing was written.
    InvalidInput,
    /// The task (or other object) does not exist.
    NotFound,
    /// The object exists but is not in a state that allows the operation
    /// (for example resetting a task that is still pending).
    Conflict,
    /// The database is unreachable, busy, or reported a transient failure (a lost
    /// connection, an exhausted pool, a server shutting down). Retrying may succeed.
    Unavailable,
    /// A concurrent transaction conflicted with this one (deadlock, serialization
    /// failure, lock wait timeout) and the database rolled the operation back: nothing
    /// it would have changed was changed. A store runs such an operation again a few
    /// times ([`StoreConfig::contention_retries`](crate::StoreConfig::contention_retries))
    /// before it reports this kind; by then the error is
    /// [persistent](Error::is_persistent).
    Contention,
    /// The store is misconfigured (bad table name, unsupported server version…).
    Config,
    /// Anything else: a bug, a corrupt row, an unexpected database answer.
    Unexpected,
}

impl ErrorKind {
    /// Whether errors of this kind are temporary by default.
    pub fn is_temporary(self) -> bool {
        matches!(self, ErrorKind::Unavailable | ErrorKind::Contention)
    }
}

impl fmt::Display for ErrorKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            ErrorKind::InvalidInput => "invalid input",
            ErrorKind::NotFound => "not found",
            ErrorKind::Conflict => "conflict",
            ErrorKind::Unavailable => "unavailable",
            ErrorKind::Contention => "contention",
            ErrorKind::Config => "configuration error",
            ErrorKind::Unexpected => "unexpected error",
        })
    }
}

/// Whether retrying an error may help (OpenDAL's model).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Retry {
    /// Retrying the same operation cannot help.
    Permanent,
    /// Retrying later may succeed.
    Temporary,
    /// Temporary in kind, but already retried (by the store) and still failing.
    Persistent,
}

/// The error of every backstop operation.
///
/// It carries a [`kind`](Error::kind), the [`operation`](Error::operation) that failed
/// (`"enqueue"`, `"claim_batch"`, …), a message, whether retrying may help
/// ([`is_temporary`](Error::is_temporary)), whether it was already retried and still
/// failed ([`is_persistent`](Error::is_persistent)) and, when there is one, the
/// underlying error as its [`source`](std::error::Error::source).
///
/// ```
/// use backstop_core::{Error, ErrorKind};
///
/// let err = Error::new(ErrorKind::InvalidInput, "enqueue", "event_type must not be empty");
/// assert_eq!(err.kind(), ErrorKind::InvalidInput);
/// assert!(!err.is_temporary());
/// assert_eq!(err.to_string(), "enqueue: invalid input: event_type must not be empty");
/// ```
#[derive(Debug, thiserror::Error)]
#[error("{operation}: {kind}: {message}")]
pub struct Error {
    kind: ErrorKind,
    operation: &'static str,
    message: String,
    status: Retry,
    #[source]
    source: Option<BoxError>,
}

impl Error {
    /// A new error; temporary when its kind is ([`ErrorKind::is_temporary`]).
    pub fn new(kind: ErrorKind, operation: &'static str, message: impl Into<String>) -> Self {
        Self {
            kind,
            operation,
            message: message.into(),
            status: if kind.is_temporary() {
                Retry::Temporary
            } else {
                Retry::Permanent
            },
            source: None,
        }
    }

    /// Shorthand for an [`ErrorKind::InvalidInput`] error.
    pub fn invalid_input(operation: &'static str, message: impl Into<String>) -> Self {
        Self::new(ErrorKind::InvalidInput, operation, message)
    }

    /// Shorthand for an [`ErrorKind::Config`] error.
    pub fn config(operation: &'static str, message: impl Into<String>) -> Self {
        Self::new(ErrorKind::Config, operation, message)
    }

    /// The `NotFound` error of an operation on task `id`, which does not exist.
    pub fn task_not_found(operation: &'static str, id: i64) -> Self {
        Self::new(
            ErrorKind::NotFound,
            operation,
            format!("task {id} does not exist"),
        )
    }

    /// Attach the underlying error.
    pub fn with_source(mut self, source: impl Into<BoxError>) -> Self {
        self.source = Some(source.into());
        self
    }

    /// Override whether the error is temporary (a backend knows better than the kind,
    /// for example a deadlock reported as a generic database error).
    pub fn with_temporary(mut self, temporary: bool) -> Self {
        self.status = if temporary {
            Retry::Temporary
        } else {
            Retry::Permanent
        };
        self
    }

    /// Name the operation that failed (a store names it for the errors its driver
    /// returns, whatever the driver put there).
    pub fn with_operation(mut self, operation: &'static str) -> Self {
        self.operation = operation;
        self
    }

    /// A temporary error that was retried `retries` times and still failed: no longer
    /// temporary (retrying at once again is unlikely to help), but persistent.
    pub(crate) fn retried(mut self, retries: u32) -> Self {
        if self.status == Retry::Temporary {
            self.status = Retry::Persistent;
            self.message = format!("{} (retried {retries} times)", self.message);
        }
        self
    }

    /// The kind of failure.
    pub fn kind(&self) -> ErrorKind {
        self.kind
    }

    /// The operation that failed, such as `"enqueue"` or `"claim_batch"`.
    pub fn operation(&self) -> &'static str {
        self.operation
    }

    /// The human-readable message (without the operation and kind prefix).
    pub fn message(&self) -> &str {
        &self.message
    }

    /// Whether retrying the same operation later may succeed. `false` for a
    /// [persistent](Self::is_persistent) error: the store has retried it already.
    pub fn is_temporary(&self) -> bool {
        self.status == Retry::Temporary
    }

    /// Whether the error is temporary in kind but was already retried (by the store, a
    /// few times with backoff) and still failed: a caller should not retry it at once,
    /// but may much later (the next poll, the next request).
    pub fn is_persistent(&self) -> bool {
        self.status == Retry::Persistent
    }
}

/// `Result<T, backstop_core::Error>`.
pub type Result<T, E = Error> = std::result::Result<T, E>;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn temporary_follows_kind_and_can_be_overridden() {
        let e = Error::new(ErrorKind::Unavailable, "claim_batch", "database is locked");
        assert!(e.is_temporary());
        let e = Error::new(ErrorKind::Unexpected, "claim_batch", "deadlock").with_temporary(true);
        assert!(e.is_temporary());
        assert!(!Error::invalid_input("enqueue", "x").is_temporary());
    }

    #[test]
    fn retried_contention_becomes_persistent() {
        let e = Error::new(ErrorKind::Contention, "mark", "deadlock");
        assert!(e.is_temporary() && !e.is_persistent());
        let e = e.retried(5);
        assert!(!e.is_temporary() && e.is_persistent());
        assert_eq!(e.kind(), ErrorKind::Contention);
        assert_eq!(
            e.to_string(),
            "mark: contention: deadlock (retried 5 times)"
        );
        // a permanent error stays permanent
        let e = Error::invalid_input("enqueue", "x").retried(5);
        assert!(!e.is_temporary() && !e.is_persistent());
        assert_eq!(e.message(), "x");
    }

    #[test]
    fn source_is_kept() {
        let io = std::io::Error::other("boom");
        let e = Error::new(ErrorKind::Unavailable, "migrate", "cannot open").with_source(io);
        let src = std::error::Error::source(&e).map(|s| s.to_string());
        assert_eq!(src.as_deref(), Some("boom"));
    }
}
