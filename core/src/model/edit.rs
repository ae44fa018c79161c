//! An operator's edit of a task that waits to run: when it runs, what it carries.

use std::time::Duration;

use chrono::{DateTime, Utc};

use crate::error::{Error, Result};
use crate::limits::MAX_INTERVAL;

/// When an edited task becomes due ([`TaskEdit`]), in database time.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Due {
    /// Now: the next poll (or a wake-up) runs it.
    Now,
    /// This long from now (at most [`MAX_INTERVAL`]).
    In(Duration),
    /// At this time; a time already past is now.
    At(DateTime<Utc>),
}

/// An operator's edit of a pending or waiting task ([`TaskStore::edit`]): run it now,
/// reschedule it, replace its payload, or both.
///
/// ```
/// use std::time::Duration;
/// use backstop_core::TaskEdit;
/// let now = TaskEdit::run_now();
/// assert_eq!(now.action(), "run_now");
/// let later = TaskEdit::run_in(Duration::from_secs(3600));
/// assert_eq!(later.action(), "reschedule");
/// let fixed = TaskEdit::default().payload(r#"{"to":"ada@example.com"}"#);
/// assert_eq!(fixed.action(), "edit");
/// ```
///
/// [`TaskStore::edit`]: crate::TaskStore::edit
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct TaskEdit {
    /// When it becomes due; `None` keeps its due time.
    pub due: Option<Due>,
    /// Its new payload (a JSON document); `None` keeps it.
    pub payload: Option<String>,
}

impl TaskEdit {
    /// Due now.
    pub fn run_now() -> Self {
        Self::default().due(Due::Now)
    }

    /// Due `delay` from now.
    pub fn run_in(delay: Duration) -> Self {
        Self::default().due(Due::In(delay))
    }

    /// Due at `at` (now if it is past).
    pub fn run_at(at: DateTime<Utc>) -> Self {
        Self::default().due(Due::At(at))
    }

    /// Set when it becomes due.
    pub fn due(mut self, due: Due) -> Self {
        self.due = Some(due);
        self
    }

    /// Replace its payload with `json` (checked to parse, and against the store's
    /// payload limit).
    pub fn payload(mut self, json: impl Into<String>) -> Self {
        self.payload = Some(json.into());
        self
    }

    /// The edit's name in the task's audit log: `edit` when it replaces the payload,
    /// else `run_now` or `reschedule`.
    pub fn action(&self) -> &'static str {
        match (&self.payload, self.due) {
            (Some(_), _) => "edit",
            (None, Some(Due::Now)) => "run_now",
            (None, _) => "reschedule",
        }
    }

    /// **For backend authors**: the new due time as an edit statement binds it: a delay
    /// in milliseconds (`Some(0)` for now), or a time; `(None, None)` keeps it.
    ///
    /// ```
    /// use backstop_core::TaskEdit;
    /// assert_eq!(TaskEdit::run_now().due_parts(), (Some(0), None));
    /// assert_eq!(TaskEdit::default().due_parts(), (None, None));
    /// ```
    pub fn due_parts(&self) -> (Option<i64>, Option<DateTime<Utc>>) {
        match self.due {
            Some(Due::Now) => (Some(0), None),
            Some(Due::In(d)) => (Some(crate::driver::millis(d)), None),
            Some(Due::At(t)) => (None, Some(t)),
            None => (None, None),
        }
    }

    /// Check the edit against a store's payload limit: something to change, a payload
    /// that parses as JSON and fits, a delay within [`MAX_INTERVAL`].
    pub(crate) fn check(&self, operation: &'static str, max_payload_bytes: usize) -> Result<()> {
        if self.due.is_none() && self.payload.is_none() {
            return Err(Error::invalid_input(
                operation,
                "the edit changes nothing: give a due time or a payload",
            ));
        }
        if let Some(Due::In(d)) = self.due {
            if d > MAX_INTERVAL {
                return Err(Error::invalid_input(
                    operation,
                    format!("due in {d:?} is past the longest delay, {MAX_INTERVAL:?}"),
                ));
            }
        }
        if let Some(p) = &self.payload {
            if let Err(e) = serde_json::from_str::<serde::de::IgnoredAny>(p) {
                return Err(Error::invalid_input(
                    operation,
                    format!("payload is not valid JSON: {e}"),
                ));
            }
            if p.len() > max_payload_bytes {
                return Err(Error::invalid_input(
                    operation,
                    format!(
                        "payload is {} bytes, over the limit of {max_payload_bytes} bytes",
                        p.len()
                    ),
                ));
            }
        }
        Ok(())
    }
}
