//! rusqlite connections as core's connection adapter, the clock, and errors.

use backstop_core::driver::prelude::*;
#[cfg(doc)]
use backstop_core::TaskStore;
use rusqlite::{params, Connection, OptionalExtension};

use crate::sql::Sql;

/// A rusqlite connection (the store's writer, or the caller's transaction) as a
/// [`BlockingTxConnection`].
pub(crate) struct OnConn<'c>(pub(crate) &'c Connection);

impl BlockingTxConnection for OnConn<'_> {
    fn dialect(&self) -> Dialect {
        Dialect::Sqlite
    }

    fn run(&mut self, statement: &Statement<'_>) -> Result<Answer> {
        run_statement(self.0, statement).map_err(|e| db_err("enqueue", e))
    }
}

/// One [`Statement`] on a rusqlite connection.
pub(crate) fn run_statement(
    conn: &Connection,
    statement: &Statement<'_>,
) -> rusqlite::Result<Answer> {
    let mut st = conn.prepare_cached(statement.sql())?;
    for (i, value) in statement.params().iter().enumerate() {
        bind(&mut st, i + 1, value)?;
    }
    answer(&mut st, statement.returns())
}

/// Bind `value` to parameter `at` of `st`.
fn bind(st: &mut rusqlite::Statement<'_>, at: usize, value: &Value<'_>) -> rusqlite::Result<()> {
    match *value {
        Value::SmallInt(v) => st.raw_bind_parameter(at, v),
        Value::Int(v) => st.raw_bind_parameter(at, v),
        Value::BigInt(v) => st.raw_bind_parameter(at, v),
        Value::Text(v) => st.raw_bind_parameter(at, v),
        Value::Timestamp(v) => st.raw_bind_parameter(at, v.map(|t| t.timestamp_millis())),
        // SQLite's statements bind every item on its own
        _ => Err(rusqlite::Error::InvalidParameterCount(at, 0)),
    }
}

/// Run the bound `st` and answer as `returns` asks.
fn answer(st: &mut rusqlite::Statement<'_>, returns: Returns) -> rusqlite::Result<Answer> {
    let columns = |row: &rusqlite::Row<'_>| {
        (0..row.as_ref().column_count())
            .map(|i| row.get::<_, i64>(i))
            .collect::<rusqlite::Result<Vec<_>>>()
    };
    match returns {
        Returns::Rows => {
            let mut rows = st.raw_query();
            let mut all = Vec::new();
            while let Some(row) = rows.next()? {
                all.push(columns(row)?);
            }
            Ok(Answer::Rows(all))
        }
        Returns::Row => {
            let mut rows = st.raw_query();
            Ok(Answer::Row(rows.next()?.map(columns).transpose()?))
        }
        // RowsAffected (SQLite's statements ask for nothing else)
        _ => {
            let n = st.raw_execute()?;
            Ok(Answer::RowsAffected(n as u64))
        }
    }
}

/// A statement taken whole (its text and values owned), to run on another thread: the
/// pool's or the writer's.
pub(crate) struct OwnedStatement {
    sql: String,
    params: Vec<rusqlite::types::Value>,
    returns: Returns,
}

impl OwnedStatement {
    /// `statement`, owned; a value SQLite does not bind is refused.
    pub(crate) fn of(statement: &Statement<'_>) -> Result<Self> {
        use rusqlite::types::Value as V;
        let params = statement
            .params()
            .iter()
            .map(|value| {
                Ok(match *value {
                    Value::SmallInt(v) => v.map_or(V::Null, |v| V::Integer(v.into())),
                    Value::Int(v) => v.map_or(V::Null, |v| V::Integer(v.into())),
                    Value::BigInt(v) => v.map_or(V::Null, V::Integer),
                    Value::Text(v) => v.map_or(V::Null, |v| V::Text(v.to_owned())),
                    Value::Timestamp(v) => v.map_or(V::Null, |t| V::Integer(t.timestamp_millis())),
                    other => {
                        return Err(Error::new(
                            ErrorKind::Unexpected,
                            "sqlite",
                            format!("a value SQLite's statements do not bind: {other:?}"),
                        ))
                    }
                })
            })
            .collect::<Result<_>>()?;
        Ok(OwnedStatement {
            sql: statement.sql().to_owned(),
            params,
            returns: statement.returns(),
        })
    }

    /// Run it on `conn`.
    pub(crate) fn run(&self, conn: &Connection) -> rusqlite::Result<Answer> {
        let mut st = conn.prepare_cached(&self.sql)?;
        for (i, value) in self.params.iter().enumerate() {
            st.raw_bind_parameter(i + 1, value)?;
        }
        answer(&mut st, self.returns)
    }
}

/// Map a rusqlite error to a backstop error of operation `op`.
pub(crate) fn db_err(op: &'static str, e: rusqlite::Error) -> Error {
    let code = match &e {
        rusqlite::Error::SqliteFailure(f, _) => f.extended_code,
        _ => 0,
    };
    let (kind, msg) = backstop_core::driver::sqlite_error_kind(code);
    Error::new(kind, op, format!("{msg}: {e}")).with_source(e)
}

/// Read a row of [`COLUMNS`](backstop_core::driver::COLUMNS).
/// The answer of a fenced change of task `id` whose statement returned `row` (in the
/// change's transaction): the row, or why there was none.
pub(crate) fn changed(
    sql: &Sql,
    tx: &Connection,
    id: TaskId,
    row: Option<RawTask>,
) -> rusqlite::Result<Change> {
    if let Some(row) = row {
        return Ok(Change::Done(Box::new(row)));
    }
    let status: Option<i64> = tx
        .prepare_cached(&sql.status_of)?
        .query_row(params![id], |r| r.get(0))
        .optional()?;
    Ok(status.map_or(Change::Missing, Change::Refused))
}

/// [`changed`], with the operator's audit entry appended when the change was made.
pub(crate) fn audited(
    sql: &Sql,
    tx: &Connection,
    id: TaskId,
    action: &str,
    audit: &Audit,
    now: i64,
    row: Option<RawTask>,
) -> rusqlite::Result<Change> {
    if row.is_some() {
        tx.prepare_cached(&sql.audit_insert)?.execute(params![
            id,
            action,
            audit.operator,
            audit.reason,
            now
        ])?;
    }
    changed(sql, tx, id, row)
}
