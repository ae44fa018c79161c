//! sqlx's connections as [`TxConnection`]s (features `sqlx-postgres`, `sqlx-mysql`,
//! `sqlx-sqlite`), and what sqlx's errors mean.

use async_trait::async_trait;

use super::{Answer, Dialect, Returns, Statement, TxConnection, Value};
use crate::error::{Error, ErrorKind, Result};

/// A sqlx error as a backstop error: the database's code read with the table of its
/// database ([`postgres_error_kind`](crate::driver::postgres_error_kind) and friends), a
/// failed or lost connection `Unavailable` (temporary), a bad option `Config`. The
/// caller names the operation.
pub fn sqlx_error(e: sqlx::Error) -> Error {
    let (kind, what) = match &e {
        sqlx::Error::Database(db) => database_kind(&**db),
        sqlx::Error::Io(_)
        | sqlx::Error::Tls(_)
        | sqlx::Error::PoolTimedOut
        | sqlx::Error::PoolClosed
        | sqlx::Error::WorkerCrashed
        | sqlx::Error::Protocol(_) => (ErrorKind::Unavailable, "connection failed".to_owned()),
        sqlx::Error::Configuration(_) => (ErrorKind::Config, "configuration".to_owned()),
        _ => (ErrorKind::Unexpected, "driver error".to_owned()),
    };
    Error::new(kind, "sqlx", format!("{what}: {e}")).with_source(e)
}

fn database_kind(db: &dyn sqlx::error::DatabaseError) -> (ErrorKind, String) {
    #[cfg(feature = "sqlx-postgres")]
    if let Some(pg) = db.try_downcast_ref::<sqlx::postgres::PgDatabaseError>() {
        let (kind, hint) = crate::driver::postgres_error_kind(pg.code());
        return (kind, format!("PostgreSQL error {}{hint}", pg.code()));
    }
    #[cfg(feature = "sqlx-mysql")]
    if let Some(my) = db.try_downcast_ref::<sqlx::mysql::MySqlDatabaseError>() {
        let (kind, hint) = crate::driver::mysql_error_kind(my.number());
        return (kind, format!("MySQL error {}{hint}", my.number()));
    }
    #[cfg(feature = "sqlx-sqlite")]
    if db.try_downcast_ref::<sqlx::sqlite::SqliteError>().is_some() {
        let code = db.code().and_then(|c| c.parse().ok()).unwrap_or(0);
        let (kind, what) = crate::driver::sqlite_error_kind(code);
        return (kind, what.to_owned());
    }
    (ErrorKind::Unexpected, "database error".to_owned())
}

/// The first row's columns, each a 64-bit integer.
fn columns<R: sqlx::Row>(row: R) -> Result<Vec<i64>>
where
    usize: sqlx::ColumnIndex<R>,
    i64: for<'r> sqlx::Decode<'r, R::Database> + sqlx::Type<R::Database>,
{
    (0..row.len())
        .map(|i| row.try_get::<i64, usize>(i).map_err(sqlx_error))
        .collect()
}

/// A row of an order key, then maybe a task id.
fn key_row<R: sqlx::Row>(row: R) -> Result<(String, Option<i64>)>
where
    usize: sqlx::ColumnIndex<R>,
    i64: for<'r> sqlx::Decode<'r, R::Database> + sqlx::Type<R::Database>,
    String: for<'r> sqlx::Decode<'r, R::Database> + sqlx::Type<R::Database>,
{
    let key = row.try_get::<String, usize>(0).map_err(sqlx_error)?;
    let id = match row.len() {
        1 => None,
        _ => Some(row.try_get::<i64, usize>(1).map_err(sqlx_error)?),
    };
    Ok((key, id))
}

/// The error of a list value on a sqlx connection: lists are bound only by a store's own
/// statements on its own connection.
fn no_lists() -> Error {
    Error::new(
        ErrorKind::Unexpected,
        "enqueue",
        "a list value cannot be bound on a sqlx connection",
    )
}

fn is_duplicate_key(e: &sqlx::Error) -> bool {
    matches!(e, sqlx::Error::Database(db) if db.is_unique_violation())
}

/// `TxConnection` for one sqlx database: its connection, transaction and pooled
/// connection. `$dialect` names the connection's dialect, `$time` makes a timestamp
/// bindable in it, and `$insert_id` reads the id an insert made from its query result.
macro_rules! sqlx_connection {
    ($db:ty, $conn:ty, $dialect:path, $time:path, $insert_id:expr) => {
        #[async_trait]
        impl TxConnection for $conn {
            fn dialect(&self) -> Dialect {
                $dialect(self)
            }

            async fn run(&mut self, statement: &Statement<'_>) -> Result<Answer> {
                let dialect = $dialect(self);
                let mut query = sqlx::query::<$db>(sqlx::AssertSqlSafe(statement.sql()));
                for value in statement.params() {
                    query = match *value {
                        Value::SmallInt(v) => query.bind(v),
                        Value::Int(v) => query.bind(v),
                        Value::BigInt(v) => query.bind(v),
                        Value::Text(v) => query.bind(v),
                        Value::Timestamp(v) => query.bind(v.map(|t| $time(t, dialect))),
                        Value::TextList(_) | Value::BigIntList(_) => return Err(no_lists()),
                    };
                }
                match statement.returns() {
                    Returns::Row => {
                        let row = query.fetch_optional(&mut *self).await.map_err(sqlx_error)?;
                        Ok(Answer::Row(row.map(columns).transpose()?))
                    }
                    Returns::Rows => match query.fetch_all(&mut *self).await {
                        Ok(rows) => Ok(Answer::Rows(
                            rows.into_iter().map(columns).collect::<Result<_>>()?,
                        )),
                        Err(e) if is_duplicate_key(&e) => Ok(Answer::DuplicateKey),
                        Err(e) => Err(sqlx_error(e)),
                    },
                    Returns::RowsAffected => {
                        let done = query.execute(&mut *self).await.map_err(sqlx_error)?;
                        Ok(Answer::RowsAffected(done.rows_affected()))
                    }
                    Returns::InsertId => match query.execute(&mut *self).await {
                        Ok(done) => Ok(Answer::InsertId(($insert_id)(&done))),
                        Err(e) if is_duplicate_key(&e) => Ok(Answer::DuplicateKey),
                        Err(e) => Err(sqlx_error(e)),
                    },
                    Returns::KeyRows => {
                        let rows = query.fetch_all(&mut *self).await.map_err(sqlx_error)?;
                        Ok(Answer::KeyRows(
                            rows.into_iter().map(key_row).collect::<Result<_>>()?,
                        ))
                    }
                }
            }
        }

        #[async_trait]
        impl TxConnection for sqlx::Transaction<'_, $db> {
            fn dialect(&self) -> Dialect {
                let conn: &$conn = self;
                conn.dialect()
            }
            async fn run(&mut self, statement: &Statement<'_>) -> Result<Answer> {
                let conn: &mut $conn = self;
                conn.run(statement).await
            }
        }

        #[async_trait]
        impl TxConnection for sqlx::pool::PoolConnection<$db> {
            fn dialect(&self) -> Dialect {
                let conn: &$conn = self;
                conn.dialect()
            }
            async fn run(&mut self, statement: &Statement<'_>) -> Result<Answer> {
                let conn: &mut $conn = self;
                conn.run(statement).await
            }
        }
    };
}

/// A timestamp as the driver binds it.
#[allow(dead_code)] // used by the native drivers' features only
fn native_time(t: chrono::DateTime<chrono::Utc>, _: Dialect) -> chrono::DateTime<chrono::Utc> {
    t
}

#[cfg(feature = "sqlx-postgres")]
fn postgres(_: &sqlx::PgConnection) -> Dialect {
    Dialect::Postgres
}

#[cfg(feature = "sqlx-postgres")]
sqlx_connection!(
    sqlx::Postgres,
    sqlx::PgConnection,
    postgres,
    native_time,
    |_: &sqlx::postgres::PgQueryResult| -1
);

#[cfg(feature = "sqlx-mysql")]
fn mysql(_: &sqlx::MySqlConnection) -> Dialect {
    Dialect::MySql
}

#[cfg(feature = "sqlx-mysql")]
sqlx_connection!(
    sqlx::MySql,
    sqlx::MySqlConnection,
    mysql,
    native_time,
    |done: &sqlx::mysql::MySqlQueryResult| i64::try_from(done.last_insert_id()).unwrap_or(i64::MAX)
);

#[cfg(feature = "sqlx-sqlite")]
fn sqlite(_: &sqlx::SqliteConnection) -> Dialect {
    Dialect::Sqlite
}

#[cfg(feature = "sqlx-sqlite")]
sqlx_connection!(
    sqlx::Sqlite,
    sqlx::SqliteConnection,
    sqlite,
    native_time,
    |done: &sqlx::sqlite::SqliteQueryResult| done.last_insert_rowid()
);

/// The dialect of sqlx's `Any` connection: the driver it runs on.
#[cfg(feature = "sqlx-any")]
fn any(conn: &sqlx::AnyConnection) -> Dialect {
    match conn.backend_name() {
        "PostgreSQL" => Dialect::Postgres,
        "MySQL" => Dialect::MySql,
        "SQLite" => Dialect::Sqlite,
        _ => Dialect::Other,
    }
}

/// sqlx's `Any` has no time type: a timestamp goes as text the database reads as one
/// (PostgreSQL casts it; MySQL compares and stores it as a `DATETIME` in UTC).
#[cfg(feature = "sqlx-any")]
fn any_time(t: chrono::DateTime<chrono::Utc>, dialect: Dialect) -> String {
    match dialect {
        Dialect::Postgres => t.format("%Y-%m-%d %H:%M:%S%.6f+00").to_string(),
        _ => t.format("%Y-%m-%d %H:%M:%S%.6f").to_string(),
    }
}

#[cfg(feature = "sqlx-any")]
sqlx_connection!(
    sqlx::Any,
    sqlx::AnyConnection,
    any,
    any_time,
    |done: &sqlx::any::AnyQueryResult| done.last_insert_id().unwrap_or(-1)
);
