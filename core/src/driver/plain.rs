//! Plain tasks in the batch enqueue: the settings of `NewTask::new`, which a backend
//! that pays per bound value or expression writes into a text of its own as constants,
//! binding only each row's own values.

use super::{insert_params, Checked, RunAt, Value, INSERT_PARAMS};
#[cfg(doc)]
use super::{plain_document, EnqueueSql};
use crate::model::{NewTask, Status};

/// The places in [`insert_params`] a plain row binds ([`is_plain`]): event type,
/// business key, payload, trace context.
pub const PLAIN_OWN: [usize; 4] = [0, 1, 2, 17];

/// **For backend authors**: [`insert_params`] of a plain task, pending: the settings of
/// [`NewTask::new`] (the default retry policy and priority, due at once, no order key,
/// timeout, tags, metadata or partition). A backend whose multi-row insert costs a
/// bound value or an expression per column writes these settings into a second text as
/// constants, and binds only [`PLAIN_OWN`] of rows that are [`is_plain`].
///
/// ```
/// use backstop_core::driver::{plain_params, Value};
/// assert_eq!(plain_params()[7], Value::BigInt(Some(0)), "no delay");
/// assert_eq!(plain_params()[8], Value::Timestamp(None), "no time to run at");
/// ```
pub fn plain_params() -> &'static [Value<'static>] {
    // an event type no policy can be registered for: the default retry policy
    static TASK: std::sync::LazyLock<NewTask> = std::sync::LazyLock::new(|| NewTask::new("", ""));
    static PARAMS: std::sync::LazyLock<Vec<Value<'static>>> = std::sync::LazyLock::new(|| {
        insert_params(
            Checked::new(&*TASK),
            Status::Pending.code(),
            RunAt::Timestamp,
        )
    });
    &PARAMS
}

/// **For backend authors**: [`plain_params`]`[i]` as an SQL literal every backend reads
/// (a number, `NULL`, or a text of ASCII letters, digits and `_` in single quotes), for
/// the text of a plain row; `None` for another value or a place past the end.
///
/// ```
/// use backstop_core::driver::plain_literal;
/// assert_eq!(plain_literal(7).as_deref(), Some("0"), "no delay");
/// assert_eq!(plain_literal(12).as_deref(), Some("NULL"), "no order key");
/// assert_eq!(plain_literal(99), None);
/// ```
pub fn plain_literal(i: usize) -> Option<String> {
    Some(match plain_params().get(i)? {
        Value::SmallInt(Some(n)) => n.to_string(),
        Value::Int(Some(n)) => n.to_string(),
        Value::BigInt(Some(n)) => n.to_string(),
        Value::SmallInt(None)
        | Value::Int(None)
        | Value::BigInt(None)
        | Value::Text(None)
        | Value::Timestamp(None) => "NULL".to_owned(),
        Value::Text(Some(t)) if t.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') => {
            format!("'{t}'")
        }
        _ => return None,
    })
}

/// **For backend authors**: whether `task`, pending in a multi-row insert, has a plain
/// task's settings ([`plain_params`]) whatever its event type, key, payload and trace
/// context ([`PLAIN_OWN`]).
pub fn is_plain(task: Checked<&NewTask>) -> bool {
    is_plain_params(&insert_params(
        task,
        Status::Pending.code(),
        RunAt::Timestamp,
    ))
}

/// **For backend authors**: whether `params`, [`insert_params`] of a pending task (its
/// time to run at in either [`RunAt`]), are a plain task's ([`is_plain`]): a backend
/// that has made them already asks this instead.
///
/// ```
/// use backstop_core::driver::{is_plain_params, plain_params, Value};
/// let mut params = plain_params().to_vec();
/// params[1] = Value::Text(Some("order-1"));
/// assert!(is_plain_params(&params), "its own key");
/// params[9] = Value::SmallInt(Some(0));
/// assert!(!is_plain_params(&params), "another priority");
/// ```
pub fn is_plain_params(params: &[Value<'_>]) -> bool {
    params.len() == plain_params().len()
        && params
            .iter()
            .zip(plain_params())
            .enumerate()
            .all(|(i, (a, b))| {
                PLAIN_OWN.contains(&i)
                    || a == b
                    // no time to run at, whichever way times go
                    || (i == 8 && matches!(a, Value::BigInt(None) | Value::Timestamp(None)))
            })
}

/// The column of each place of [`insert_params`], `None` for the two that make the due
/// time (the delay in ms and the time to run at).
const INSERT_PARAM_COLUMNS: [Option<&str>; INSERT_PARAMS] = [
    Some("event_type"),
    Some("biz_key"),
    Some("payload"),
    Some("max_attempts"),
    Some("retry_strategy"),
    Some("retry_interval_ms"),
    Some("retry_max_interval_ms"),
    None,
    None,
    Some("priority"),
    Some("retry_jitter_pct"),
    Some("status"),
    Some("order_key"),
    Some("order_block"),
    Some("timeout_ms"),
    Some("tags"),
    Some("metadata"),
    Some("traceparent"),
    Some("partition_key"),
];

/// A value of a plain task's row ([`plain_row`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PlainValue {
    /// The task's own value `PLAIN_OWN[i]` of [`insert_params`]: bound, or element `i`
    /// of its [`plain_document`] row.
    Own(usize),
    /// A setting every plain task shares, as an SQL literal ([`plain_literal`]).
    Literal(String),
    /// The database's clock.
    Now,
}

/// **For backend authors**: the columns of a plain task's row ([`is_plain`]) and their
/// values, for the text of a multi-row insert of plain tasks: due, created and updated
/// now, then each place of [`insert_params`] in its order (its own values
/// [`PlainValue::Own`], its settings literals). `attempts` and `lease` are left to the
/// table (0). `None` when a setting has no literal or a plain task is not due at once.
///
/// ```
/// use backstop_core::driver::{plain_row, PlainValue};
/// let row = plain_row().unwrap();
/// assert_eq!(row[0], ("next_run_at", PlainValue::Now));
/// assert_eq!(row[3], ("event_type", PlainValue::Own(0)));
/// ```
pub fn plain_row() -> Option<Vec<(&'static str, PlainValue)>> {
    // due at once: no delay, no time to run at
    if (plain_literal(7)?, plain_literal(8)?) != ("0".into(), "NULL".into()) {
        return None;
    }
    let mut row: Vec<(&'static str, PlainValue)> = ["next_run_at", "created_at", "updated_at"]
        .into_iter()
        .map(|c| (c, PlainValue::Now))
        .collect();
    for (place, column) in INSERT_PARAM_COLUMNS.iter().enumerate() {
        let Some(column) = column else { continue };
        let value = match PLAIN_OWN.iter().position(|&own| own == place) {
            Some(i) => PlainValue::Own(i),
            None => PlainValue::Literal(plain_literal(place)?),
        };
        row.push((column, value));
    }
    Some(row)
}

/// **For backend authors**: the task table's column defaults that a plain row may leave
/// to the table ([`plain_row_written`]), as every backend's migrations declare them
/// (`DEFAULT …`, or a nullable column's implicit `NULL`), each as its
/// [`plain_literal`]. The conformance case `enqueue_many_stores_a_plain_batch_as_enqueue_does`
/// reads the rows of a plain batch back beside a task enqueued alone: a default that
/// drifted from the plain value fails it on that backend.
pub const TABLE_DEFAULTS: [(&str, &str); 9] = [
    ("priority", "2"),
    ("retry_jitter_pct", "0"),
    ("status", "0"),
    ("order_key", "NULL"),
    ("order_block", "1"),
    ("timeout_ms", "NULL"),
    ("tags", "NULL"),
    ("metadata", "NULL"),
    ("partition_key", "''"),
];

/// **For backend authors**: [`plain_row`] without the columns whose table default
/// ([`TABLE_DEFAULTS`]) is their plain value, for a backend that spends per column of
/// every row it inserts: 12 columns instead of 22.
///
/// ```
/// use backstop_core::driver::{plain_row_written, PlainValue};
/// let row = plain_row_written().unwrap();
/// assert_eq!(row.len(), 12);
/// assert!(row.iter().all(|(column, _)| *column != "priority"), "left to the table");
/// ```
pub fn plain_row_written() -> Option<Vec<(&'static str, PlainValue)>> {
    let mut row = plain_row()?;
    row.retain(|(column, value)| {
        !TABLE_DEFAULTS
            .iter()
            .any(|(c, d)| c == column && *value == PlainValue::Literal((*d).to_owned()))
    });
    Some(row)
}
