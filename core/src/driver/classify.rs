//! What a database's error codes mean for backstop: one table per database, shared by
//! every driver of that database (a backend's native one and sqlx's).

use crate::error::ErrorKind;

/// The kind of a PostgreSQL error by its SQLSTATE `code`, and a hint for the message.
///
/// ```
/// use backstop_core::driver::postgres_error_kind;
/// use backstop_core::ErrorKind;
/// assert_eq!(postgres_error_kind("40P01").0, ErrorKind::Contention); // deadlock
/// assert_eq!(postgres_error_kind("08006").0, ErrorKind::Unavailable);
/// assert_eq!(postgres_error_kind("42P01").0, ErrorKind::Config); // no such table
/// ```
pub fn postgres_error_kind(code: &str) -> (ErrorKind, &'static str) {
    match code {
        // the transaction was aborted: nothing it did is applied
        "40001" => (ErrorKind::Contention, " (serialization failure)"),
        "40P01" => (ErrorKind::Contention, " (deadlock)"),
        "55P03" => (ErrorKind::Contention, " (lock not available)"),
        // query cancelled, too many connections, connection exception, operator
        // intervention (admin shutdown…), insufficient resources
        "57014" | "53300" => (ErrorKind::Unavailable, ""),
        c if c.starts_with("08") || c.starts_with("57P") || c.starts_with("53") => {
            (ErrorKind::Unavailable, "")
        }
        "23505" => (ErrorKind::Conflict, ""),
        // a named prepared statement gone: another server connection answered
        "26000" => (
            ErrorKind::Config,
            " (prepared statement missing: behind a transaction pooler such as PgBouncer? \
             set transaction_pooling)",
        ),
        // undefined table, invalid schema name
        "42P01" | "3F000" => (ErrorKind::Config, " (has `migrate` run?)"),
        c if c.starts_with("22") => (ErrorKind::InvalidInput, ""),
        _ => (ErrorKind::Unexpected, ""),
    }
}

/// The kind of a MySQL / MariaDB error by its error `number`, and a hint for the message.
///
/// ```
/// use backstop_core::driver::mysql_error_kind;
/// use backstop_core::ErrorKind;
/// assert_eq!(mysql_error_kind(1213), (ErrorKind::Contention, " (deadlock)"));
/// assert_eq!(mysql_error_kind(1062).0, ErrorKind::Conflict);
/// ```
pub fn mysql_error_kind(number: u16) -> (ErrorKind, &'static str) {
    match number {
        // deadlock (the transaction is rolled back), lock wait timeout (the statement
        // is; the driver then drops the transaction, rolling back the rest)
        1213 => (ErrorKind::Contention, " (deadlock)"),
        1205 => (ErrorKind::Contention, " (lock wait timeout)"),
        1040 | 1053 | 2006 | 2013 | 1927 => (ErrorKind::Unavailable, ""),
        // a Galera node outside the primary component ("WSREP has not yet prepared node
        // for application use"): another node, or this one once it rejoins, serves
        1047 => (ErrorKind::Unavailable, " (Galera node not ready)"),
        1062 => (ErrorKind::Conflict, ""),
        1146 => (ErrorKind::Config, " (has `migrate` run?)"),
        1049 | 1142 | 1044 | 1045 => (ErrorKind::Config, ""),
        1406 | 1366 | 1292 | 1264 => (ErrorKind::InvalidInput, ""),
        _ => (ErrorKind::Unexpected, ""),
    }
}

/// The kind of an SQLite error by its (extended) result `code`, and what it means.
///
/// ```
/// use backstop_core::driver::sqlite_error_kind;
/// use backstop_core::ErrorKind;
/// assert_eq!(sqlite_error_kind(5).0, ErrorKind::Unavailable); // SQLITE_BUSY
/// assert_eq!(sqlite_error_kind(2067).0, ErrorKind::Conflict); // SQLITE_CONSTRAINT_UNIQUE
/// ```
pub fn sqlite_error_kind(code: i32) -> (ErrorKind, &'static str) {
    match code & 0xff {
        // SQLITE_BUSY, SQLITE_LOCKED
        5 | 6 => (
            ErrorKind::Unavailable,
            "the database is busy (locked by another writer)",
        ),
        // SQLITE_CANTOPEN, SQLITE_IOERR, SQLITE_FULL
        14 | 10 | 13 => (ErrorKind::Unavailable, "the database file is not usable"),
        // SQLITE_READONLY, SQLITE_PERM
        8 | 3 => (ErrorKind::Config, "the database is read-only"),
        // SQLITE_CONSTRAINT
        19 => (ErrorKind::Conflict, "a constraint was violated"),
        _ => (ErrorKind::Unexpected, "SQLite failed"),
    }
}
