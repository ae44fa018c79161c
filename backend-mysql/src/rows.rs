//! Rows read as core's raw rows.

use backstop_core::driver::prelude::*;
#[cfg(doc)]
use backstop_core::TaskStore;
use chrono::NaiveDateTime;
use sqlx::mysql::MySqlRow;
use sqlx::Row;

/// Read a row of [`COLUMNS`](backstop_core::driver::COLUMNS).
pub(crate) fn raw_task(r: &MySqlRow) -> std::result::Result<RawTask, sqlx::Error> {
    RawTask::read(&Cols(r))
}

/// A row's columns (`DATETIME(3)` in UTC: the session time zone is `+00:00`).
pub(crate) struct Cols<'r>(pub(crate) &'r MySqlRow);

impl TaskRow for Cols<'_> {
    type Error = sqlx::Error;
    fn int(&self, i: usize) -> std::result::Result<i64, sqlx::Error> {
        self.0.try_get(i)
    }
    fn text(&self, i: usize) -> std::result::Result<String, sqlx::Error> {
        self.0.try_get(i)
    }
    fn opt_text(&self, i: usize) -> std::result::Result<Option<String>, sqlx::Error> {
        self.0.try_get(i)
    }
    fn opt_int(&self, i: usize) -> std::result::Result<Option<i64>, sqlx::Error> {
        self.0.try_get(i)
    }
    fn time(&self, i: usize) -> std::result::Result<chrono::DateTime<chrono::Utc>, sqlx::Error> {
        Ok(self.0.try_get::<NaiveDateTime, _>(i)?.and_utc())
    }
}
