//! Operators' changes of a task, and their log.

use chrono::{DateTime, Utc};

use super::TaskId;
use crate::error::{Error, Result};
use crate::limits::{MAX_OPERATOR_BYTES, MAX_REASON_BYTES};

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
        self.check("audit")
    }

    /// Check an operator's audit: a named operator without control
    /// characters, a reason of bounded size.
    pub(crate) fn check(&self, operation: &'static str) -> Result<()> {
        let op = &self.operator;
        if op.is_empty() || op.len() > MAX_OPERATOR_BYTES || op.chars().any(char::is_control) {
            return Err(Error::invalid_input(
                operation,
                format!(
                    "the operator must be 1 to {MAX_OPERATOR_BYTES} bytes without control characters, got {op:?}"
                ),
            ));
        }
        if self.reason.len() > MAX_REASON_BYTES {
            return Err(Error::invalid_input(
                operation,
                format!(
                    "the reason must be at most {MAX_REASON_BYTES} bytes, got {}",
                    self.reason.len()
                ),
            ));
        }
        Ok(())
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
