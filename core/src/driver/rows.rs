//! The rows a driver reads: the task table's columns ([`RawTask`]), the audit log's
//! ([`RawAudit`]), the barrier's ([`RawBarrier`]) and the counts of the stats
//! ([`RawStats`]); core decodes them.

use std::time::Duration;

use chrono::{DateTime, Utc};

use crate::error::{Error, ErrorKind, Result};
use crate::model::{
    Backoff, BarrierRecord, BranchOp, Priority, Queue, QueueLogEntry, RetryPolicy, Saga,
    SagaStatus, SagaStepRecord, Status, StepState, Task, TaskId, WhenParked,
};

/// The audit table's columns, in the order [`RawAudit::read`] reads them.
pub const AUDIT_COLUMNS: &str = "task_id, action, operator, reason, at";

/// An audit log entry as a driver reads it (a row of [`AUDIT_COLUMNS`]).
#[derive(Debug, Clone, PartialEq, Eq)]
#[allow(missing_docs)] // the columns of the audit table
pub struct RawAudit {
    pub task_id: TaskId,
    pub action: String,
    pub operator: String,
    pub reason: String,
    pub at: DateTime<Utc>,
}

impl RawAudit {
    /// Read a row of [`AUDIT_COLUMNS`].
    pub fn read<R: TaskRow + ?Sized>(r: &R) -> std::result::Result<RawAudit, R::Error> {
        Ok(RawAudit {
            task_id: r.int(0)?,
            action: r.text(1)?,
            operator: r.text(2)?,
            reason: r.text(3)?,
            at: r.time(4)?,
        })
    }
}

/// The queues table's columns, in the order [`read_queue`] reads them.
pub const QUEUE_COLUMNS: &str =
    "event_type, paused, updated_at, concurrency, rate_limit, rate_window_ms, partitioned";

/// Read a row of [`QUEUE_COLUMNS`]: a queue's settings (`paused` a non-zero integer,
/// `concurrency` and `rate_limit` 0 for no limit, `rate_window_ms` the rate's window,
/// `partitioned` a non-zero integer).
pub fn read_queue<R: TaskRow + ?Sized>(r: &R) -> std::result::Result<Queue, R::Error> {
    Ok(Queue {
        event_type: r.text(0)?,
        paused: r.int(1)? != 0,
        updated_at: r.time(2)?,
        concurrency: u32::try_from(r.int(3)?).ok().filter(|n| *n > 0),
        rate: match (u32::try_from(r.int(4)?), u64::try_from(r.int(5)?)) {
            (Ok(starts), Ok(ms)) if starts > 0 => Some(crate::model::RateLimit::new(
                starts,
                Duration::from_millis(ms),
            )),
            _ => None,
        },
        partitioned: r.int(6)? != 0,
    })
}

/// The queues' operators' log's columns, in the order [`read_queue_entry`] reads them.
pub const QUEUE_AUDIT_COLUMNS: &str = "event_type, action, operator, reason, at";

/// Read a row of [`QUEUE_AUDIT_COLUMNS`].
pub fn read_queue_entry<R: TaskRow + ?Sized>(
    r: &R,
) -> std::result::Result<QueueLogEntry, R::Error> {
    Ok(QueueLogEntry {
        event_type: r.text(0)?,
        action: r.text(1)?,
        operator: r.text(2)?,
        reason: r.text(3)?,
        at: r.time(4)?,
    })
}

/// The barrier table's columns, in the order [`RawBarrier::read`] reads them.
pub const BARRIER_COLUMNS: &str = "gid, branch_id, op, reason, created_at";

/// A record of the participant barrier as a driver reads it (a row of
/// [`BARRIER_COLUMNS`]).
#[derive(Debug, Clone, PartialEq, Eq)]
#[allow(missing_docs)] // the columns of the barrier table
pub struct RawBarrier {
    pub gid: String,
    pub branch_id: String,
    pub op: String,
    pub reason: String,
    pub created_at: DateTime<Utc>,
}

impl RawBarrier {
    /// Read a row of [`BARRIER_COLUMNS`].
    pub fn read<R: TaskRow + ?Sized>(r: &R) -> std::result::Result<RawBarrier, R::Error> {
        Ok(RawBarrier {
            gid: r.text(0)?,
            branch_id: r.text(1)?,
            op: r.text(2)?,
            reason: r.text(3)?,
            created_at: r.time(4)?,
        })
    }

    /// The record, or `Unexpected` for an operation this release does not know.
    pub fn decode(self) -> Result<BarrierRecord> {
        let op = |name: &str| {
            BranchOp::ALL
                .into_iter()
                .find(|o| o.as_str() == name)
                .ok_or_else(|| {
                    Error::new(
                        ErrorKind::Unexpected,
                        "barrier_records",
                        format!("a barrier record names the unknown operation {name:?}"),
                    )
                })
        };
        Ok(BarrierRecord {
            op: op(&self.op)?,
            reason: op(&self.reason)?,
            gid: self.gid,
            branch_id: self.branch_id,
            created_at: self.created_at,
        })
    }
}

/// The saga table's columns, in the order [`RawSaga::read`] reads them.
pub const SAGA_COLUMNS: &str =
    "id, name, saga_key, status, grp, input, reason, version, created_at, updated_at";

/// A saga's state row as a driver reads it (a row of [`SAGA_COLUMNS`]).
#[derive(Debug, Clone, PartialEq, Eq)]
#[allow(missing_docs)] // the columns of the saga table
pub struct RawSaga {
    pub id: i64,
    pub name: String,
    pub saga_key: String,
    pub status: i64,
    pub grp: i64,
    pub input: String,
    pub reason: Option<String>,
    pub version: i64,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
}

impl RawSaga {
    /// Read a row of [`SAGA_COLUMNS`].
    pub fn read<R: TaskRow + ?Sized>(r: &R) -> std::result::Result<RawSaga, R::Error> {
        Ok(RawSaga {
            id: r.int(0)?,
            name: r.text(1)?,
            saga_key: r.text(2)?,
            status: r.int(3)?,
            grp: r.int(4)?,
            input: r.text(5)?,
            reason: r.opt_text(6)?,
            version: r.int(7)?,
            created_at: r.time(8)?,
            updated_at: r.time(9)?,
        })
    }

    /// The saga, or `Unexpected` for a status code or group this release does not know.
    pub fn decode(self) -> Result<Saga> {
        let corrupt = |what: String| Error::new(ErrorKind::Unexpected, "saga", what);
        let status = SagaStatus::from_code(self.status).ok_or_else(|| {
            corrupt(format!(
                "saga {} has the unknown status code {}",
                self.id, self.status
            ))
        })?;
        let group = u32::try_from(self.grp)
            .map_err(|_| corrupt(format!("saga {} is at group {}", self.id, self.grp)))?;
        Ok(Saga {
            id: self.id,
            name: self.name,
            key: self.saga_key,
            status,
            group,
            input: self.input,
            reason: self.reason,
            version: self.version,
            created_at: self.created_at,
            updated_at: self.updated_at,
        })
    }
}

/// The saga step table's columns, in the order [`RawSagaStep::read`] reads them.
pub const SAGA_STEP_COLUMNS: &str = "step, position, grp, state, output, updated_at";

/// A saga's step row as a driver reads it (a row of [`SAGA_STEP_COLUMNS`]).
#[derive(Debug, Clone, PartialEq, Eq)]
#[allow(missing_docs)] // the columns of the saga step table
pub struct RawSagaStep {
    pub step: String,
    pub position: i64,
    pub grp: i64,
    pub state: i64,
    pub output: Option<String>,
    pub updated_at: DateTime<Utc>,
}

impl RawSagaStep {
    /// Read a row of [`SAGA_STEP_COLUMNS`].
    pub fn read<R: TaskRow + ?Sized>(r: &R) -> std::result::Result<RawSagaStep, R::Error> {
        Ok(RawSagaStep {
            step: r.text(0)?,
            position: r.int(1)?,
            grp: r.int(2)?,
            state: r.int(3)?,
            output: r.opt_text(4)?,
            updated_at: r.time(5)?,
        })
    }

    /// The step's record, or `Unexpected` for a state code or number this release does
    /// not know.
    pub fn decode(self) -> Result<SagaStepRecord> {
        let corrupt = |what: String| Error::new(ErrorKind::Unexpected, "saga_steps", what);
        let state = StepState::from_code(self.state).ok_or_else(|| {
            corrupt(format!(
                "step {:?} has the unknown state code {}",
                self.step, self.state
            ))
        })?;
        let number = |n: i64| {
            u32::try_from(n)
                .map_err(|_| corrupt(format!("step {:?}: {n} is out of range", self.step)))
        };
        Ok(SagaStepRecord {
            position: number(self.position)?,
            group: number(self.grp)?,
            step: self.step,
            state,
            output: self.output,
            updated_at: self.updated_at,
        })
    }
}

/// The task table's columns, in the order [`RawTask::read`] reads them: select (or
/// return) exactly these, in this order, for every statement shape that answers rows.
pub const COLUMNS: &str = "id, event_type, biz_key, payload, status, attempts, \
    max_attempts, retry_strategy, retry_interval_ms, retry_max_interval_ms, next_run_at, \
    owner, lease, last_error, created_at, updated_at, priority, retry_jitter_pct, order_key, \
    order_block, timeout_ms, snoozes, tags, metadata, output, traceparent, partition_key";

/// How many columns [`COLUMNS`] names: the position of a column a statement selects
/// after them.
pub const COLUMN_COUNT: usize = 27;

/// One row of [`COLUMNS`] as the database returned it, read column by column (`i` is the
/// column's position). A driver implements it on its driver's row type, in its stored
/// form: any integer width as `i64`, times as UTC.
pub trait TaskRow {
    /// The driver's error.
    type Error;
    /// An integer column.
    fn int(&self, i: usize) -> std::result::Result<i64, Self::Error>;
    /// A text column that is never NULL.
    fn text(&self, i: usize) -> std::result::Result<String, Self::Error>;
    /// A text column that may be NULL.
    fn opt_text(&self, i: usize) -> std::result::Result<Option<String>, Self::Error>;
    /// An integer column that may be NULL.
    fn opt_int(&self, i: usize) -> std::result::Result<Option<i64>, Self::Error>;
    /// A timestamp column.
    fn time(&self, i: usize) -> std::result::Result<DateTime<Utc>, Self::Error>;
}

/// A task row as a driver reads it: the columns in their stored form. Core decodes it
/// into a [`Task`] (status code, counts, backoff) and reports a corrupt row as
/// `Unexpected`.
#[derive(Debug, Clone, PartialEq, Eq)]
#[allow(missing_docs)] // the columns of the task table
pub struct RawTask {
    pub id: TaskId,
    pub event_type: String,
    pub biz_key: String,
    pub payload: String,
    pub status: i64,
    pub attempts: i64,
    pub max_attempts: i64,
    pub retry_strategy: String,
    pub retry_interval_ms: i64,
    pub retry_max_interval_ms: i64,
    pub next_run_at: DateTime<Utc>,
    pub owner: Option<String>,
    pub lease: i64,
    pub last_error: Option<String>,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
    pub priority: i64,
    pub retry_jitter_pct: i64,
    pub order_key: Option<String>,
    pub order_block: i64,
    pub timeout_ms: Option<i64>,
    pub snoozes: i64,
    pub tags: Option<String>,
    pub metadata: Option<String>,
    pub output: Option<String>,
    pub traceparent: Option<String>,
    /// `''` for none.
    pub partition_key: String,
}

impl RawTask {
    /// A due task of id `id`, due at `id` seconds after the epoch (for tests).
    #[cfg(test)]
    pub(crate) fn due(id: i64) -> RawTask {
        let at = chrono::DateTime::from_timestamp(id, 0).unwrap_or_default();
        RawTask {
            id,
            event_type: "T".into(),
            biz_key: id.to_string(),
            payload: "{}".into(),
            status: 0,
            attempts: 0,
            max_attempts: 3,
            retry_strategy: "fixed".into(),
            retry_interval_ms: 0,
            retry_max_interval_ms: 0,
            next_run_at: at,
            owner: None,
            lease: 0,
            last_error: None,
            created_at: at,
            updated_at: at,
            priority: 0,
            retry_jitter_pct: 0,
            order_key: None,
            order_block: 0,
            timeout_ms: None,
            snoozes: 0,
            tags: None,
            metadata: None,
            output: None,
            traceparent: None,
            partition_key: String::new(),
        }
    }

    /// Read a row of [`COLUMNS`].
    pub fn read<R: TaskRow + ?Sized>(r: &R) -> std::result::Result<RawTask, R::Error> {
        Ok(RawTask {
            id: r.int(0)?,
            event_type: r.text(1)?,
            biz_key: r.text(2)?,
            payload: r.text(3)?,
            status: r.int(4)?,
            attempts: r.int(5)?,
            max_attempts: r.int(6)?,
            retry_strategy: r.text(7)?,
            retry_interval_ms: r.int(8)?,
            retry_max_interval_ms: r.int(9)?,
            next_run_at: r.time(10)?,
            owner: r.opt_text(11)?,
            lease: r.int(12)?,
            last_error: r.opt_text(13)?,
            created_at: r.time(14)?,
            updated_at: r.time(15)?,
            priority: r.int(16)?,
            retry_jitter_pct: r.int(17)?,
            order_key: r.opt_text(18)?,
            order_block: r.int(19)?,
            timeout_ms: r.opt_int(20)?,
            snoozes: r.int(21)?,
            tags: r.opt_text(22)?,
            metadata: r.opt_text(23)?,
            output: r.opt_text(24)?,
            traceparent: r.opt_text(25)?,
            partition_key: r.text(26)?,
        })
    }

    /// The task this row holds.
    pub(crate) fn decode(self) -> Result<Task> {
        let id = self.id;
        let bad = |what: &str| {
            Error::new(
                ErrorKind::Unexpected,
                "decode_task",
                format!("task {id} has an invalid {what}"),
            )
        };
        let dur = |ms: i64, what: &str| -> Result<Duration> {
            u64::try_from(ms)
                .map(Duration::from_millis)
                .map_err(|_| bad(what))
        };
        Ok(Task {
            id,
            status: Status::from_code(self.status)?,
            attempts: u32::try_from(self.attempts).map_err(|_| bad("attempts"))?,
            retry: RetryPolicy {
                max_attempts: u32::try_from(self.max_attempts).map_err(|_| bad("max_attempts"))?,
                backoff: Backoff::from_parts(
                    &self.retry_strategy,
                    dur(self.retry_interval_ms, "retry_interval_ms")?,
                    dur(self.retry_max_interval_ms, "retry_max_interval_ms")?,
                )?,
                jitter_pct: u8::try_from(self.retry_jitter_pct)
                    .ok()
                    .filter(|p| *p <= 100)
                    .ok_or_else(|| bad("retry_jitter_pct"))?,
            },
            priority: u8::try_from(self.priority)
                .ok()
                .and_then(|p| Priority::new(p).ok())
                .ok_or_else(|| bad("priority"))?,
            when_parked: match self.order_block {
                0 => WhenParked::Skip,
                _ => WhenParked::Block,
            },
            order_key: self.order_key,
            timeout: match self.timeout_ms {
                Some(ms) => Some(dur(ms, "timeout_ms")?),
                None => None,
            },
            snoozes: u32::try_from(self.snoozes).map_err(|_| bad("snoozes"))?,
            tags: crate::model::decode_tags(self.tags.as_deref().unwrap_or("")),
            metadata: self.metadata,
            output: self.output,
            traceparent: self.traceparent,
            partition: Some(self.partition_key).filter(|k| !k.is_empty()),
            next_run_at: self.next_run_at,
            created_at: self.created_at,
            updated_at: self.updated_at,
            event_type: self.event_type,
            biz_key: self.biz_key,
            payload: self.payload,
            owner: self.owner,
            lease: self.lease,
            last_error: self.last_error,
        })
    }
}

/// The counts a driver's stats query reads.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RawStats {
    /// `(event_type, status code, count)` of every non-empty group.
    pub counts: Vec<(String, i64, i64)>,
    /// How long the oldest due pending task has been due, in milliseconds (database
    /// time); `None` when none is due.
    pub oldest_due_pending_ms: Option<i64>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn column_count_counts_columns() {
        assert_eq!(COLUMNS.split(',').count(), COLUMN_COUNT);
    }
}
