//! A task as the store holds it, its status, its lease and its owner.

use std::fmt;
use std::time::Duration;

use chrono::{DateTime, Utc};

use super::{Priority, RetryPolicy, WhenParked};
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
    /// `5`: queued behind an earlier task of its order key ([`NewTask::order_key`](crate::NewTask::order_key));
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

    /// Its name: `pending`, `succeeded`, `failed`, `running`, `cancelled`, `waiting`.
    pub fn as_str(self) -> &'static str {
        match self {
            Status::Pending => "pending",
            Status::Succeeded => "succeeded",
            Status::Failed => "failed",
            Status::Running => "running",
            Status::Cancelled => "cancelled",
            Status::Waiting => "waiting",
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
                crate::error::ErrorKind::Unexpected,
                "decode_task",
                format!("unknown status code {other} in the task table"),
            )),
        }
    }
}

impl fmt::Display for Status {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
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
    /// How many times the task was started (every claim adds one; a release gives it back).
    pub attempts: u32,
    /// The retry policy stored with the task at enqueue.
    pub retry: RetryPolicy,
    /// When the task is due (database time).
    pub next_run_at: DateTime<Utc>,
    /// The engine instance holding the task while it runs; `None` otherwise.
    pub owner: Option<String>,
    /// The fencing token: every claim increments it.
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
    /// [`NewTask::order_key`](crate::NewTask::order_key)).
    pub order_key: Option<String>,
    /// What this task, parked as failed, does to the tasks of its order key behind it.
    pub when_parked: WhenParked,
    /// Its own attempt timeout, overriding its event type's
    /// ([`HandlerOptions::timeout`](crate::HandlerOptions::timeout)).
    pub timeout: Option<Duration>,
    /// How many times its handlers snoozed it and got the attempt back
    /// ([`HandlerError::snooze`](crate::HandlerError::snooze)); an operator's reset sets
    /// it back to 0.
    pub snoozes: u32,
    /// Its tags, sorted ([`NewTask::tag`](crate::NewTask::tag)).
    pub tags: Vec<String>,
    /// Its metadata, a JSON object as text ([`NewTask::metadata`](crate::NewTask::metadata)).
    pub metadata: Option<String>,
    /// The output its handler recorded last, JSON as text
    /// ([`Context::record_output`](crate::Context::record_output)); kept through
    /// retries and resets until a later attempt records another.
    pub output: Option<String>,
    /// The W3C trace context of the span that enqueued it
    /// ([`NewTask::traceparent`](crate::NewTask::traceparent)).
    pub traceparent: Option<String>,
    /// The partition of its queue's limits
    /// ([`NewTask::partition`](crate::NewTask::partition)).
    pub partition: Option<String>,
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

/// A claim on a running task: its id and the lease token the claim returned.
///
/// Every state change of a running task names its lease; a lease that is no longer
/// current (the task was recycled and claimed again) changes nothing.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Lease {
    /// The task's id.
    pub task_id: TaskId,
    /// The lease token at the time of the claim.
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
