//! Rows read as core's raw rows.

use backstop_core::driver::prelude::*;
#[cfg(doc)]
use backstop_core::TaskStore;
use chrono::{DateTime, Utc};
use rusqlite::Row;

/// Rows of `stmt` run with `params`, read as tasks.
pub(crate) fn tasks(
    stmt: &mut rusqlite::Statement<'_>,
    params: impl rusqlite::Params,
) -> rusqlite::Result<Vec<RawTask>> {
    stmt.query_map(params, raw_task)?.collect()
}

pub(crate) fn raw_task(r: &Row<'_>) -> rusqlite::Result<RawTask> {
    RawTask::read(&Cols(r))
}

/// A row's columns (times are Unix milliseconds).
pub(crate) struct Cols<'a, 'r>(pub(crate) &'a Row<'r>);

impl TaskRow for Cols<'_, '_> {
    type Error = rusqlite::Error;
    fn int(&self, i: usize) -> rusqlite::Result<i64> {
        self.0.get(i)
    }
    fn text(&self, i: usize) -> rusqlite::Result<String> {
        self.0.get(i)
    }
    fn opt_text(&self, i: usize) -> rusqlite::Result<Option<String>> {
        self.0.get(i)
    }
    fn opt_int(&self, i: usize) -> rusqlite::Result<Option<i64>> {
        self.0.get(i)
    }
    fn time(&self, i: usize) -> rusqlite::Result<DateTime<Utc>> {
        let ms: i64 = self.0.get(i)?;
        DateTime::from_timestamp_millis(ms).ok_or(rusqlite::Error::IntegralValueOutOfRange(i, ms))
    }
}
