//! Rows read as core's raw rows.

use backstop_core::driver::prelude::*;
#[cfg(doc)]
use backstop_core::TaskStore;
use tokio_postgres::types::Type;
use tokio_postgres::Row;

/// Column `i` of `r`, or an `Unexpected` error naming it.
pub(crate) fn col<'a, T: tokio_postgres::types::FromSql<'a>>(r: &'a Row, i: usize) -> Result<T> {
    r.try_get(i).map_err(|e| {
        Error::new(
            ErrorKind::Unexpected,
            "decode_row",
            format!("column {i} does not decode: {e}"),
        )
        .with_source(e)
    })
}

/// Read a row of [`COLUMNS`](backstop_core::driver::COLUMNS).
pub(crate) fn raw_task(r: &Row) -> Result<RawTask> {
    RawTask::read(&Cols(r))
}

/// A row's columns.
pub(crate) struct Cols<'r>(pub(crate) &'r Row);

impl TaskRow for Cols<'_> {
    type Error = Error;
    fn int(&self, i: usize) -> Result<i64> {
        match self.0.columns().get(i).map(|c| c.type_()) {
            Some(&Type::INT2) => col::<i16>(self.0, i).map(i64::from),
            Some(&Type::INT4) => col::<i32>(self.0, i).map(i64::from),
            _ => col(self.0, i),
        }
    }
    fn text(&self, i: usize) -> Result<String> {
        col(self.0, i)
    }
    fn opt_text(&self, i: usize) -> Result<Option<String>> {
        col(self.0, i)
    }
    fn opt_int(&self, i: usize) -> Result<Option<i64>> {
        col(self.0, i)
    }
    fn time(&self, i: usize) -> Result<chrono::DateTime<chrono::Utc>> {
        col(self.0, i)
    }
}
