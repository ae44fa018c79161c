//! Enqueue in the caller's transaction, on any connection and any backend.
//!
//! The transactional enqueue is the heart of the pattern: the task row commits or rolls
//! back with the business rows. [`Transactional::enqueue_in`] writes it on whatever
//! connection holds the caller's transaction, the same call on every backend:
//!
//! - **sqlx** (features `sqlx-postgres`, `sqlx-mysql`, `sqlx-sqlite`, `sqlx-any` of
//!   `backstop-core`, turned on by the facade's `postgres-sqlx`, `mysql`, `sqlite-sqlx`
//!   and `any-sqlx`): pass `&mut *tx` for a `sqlx::Transaction`, or a `&mut` connection.
//!   On sqlx's `Any` the same code runs on whichever database the URL names.
//! - **Any other driver** (diesel, sea-orm, `postgres`, `mysql_async`…): implement
//!   [`TxConnection`] for a wrapper of your connection. Its one method runs a
//!   [`Statement`]: SQL text in the store's dialect, its parameters as [`Value`]s, and
//!   what it [`Returns`]. The store validates the task first (bad input runs nothing),
//!   then hands over its statements one by one; an enqueue is one statement unless the
//!   task has an order key or meets a duplicate.
//!
//! ```no_run
//! # #[cfg(feature = "sqlx-postgres")]
//! # async fn demo<S: backstop_core::Transactional>(store: S, pool: sqlx::PgPool) -> Result<(), Box<dyn std::error::Error>> {
//! use backstop_core::{NewTask, Transactional};
//!
//! let mut tx = pool.begin().await?;
//! sqlx::query("INSERT INTO orders (id) VALUES (42)").execute(&mut *tx).await?;
//! let enqueued = store.enqueue_in(&mut *tx, &NewTask::new("PAY_ORDER", "42")).await?;
//! tx.commit().await?;
//! # Ok(()) }
//! ```
//!
//! # Running the statements yourself
//!
//! An adapter for a driver without built-in support runs each statement and answers
//! with what the statement asks for:
//!
//! | [`Returns`] | run it | answer |
//! |---|---|---|
//! | `Row` | as a query | [`Answer::Row`] with the first row's columns (each a 64-bit integer), or `None` |
//! | `Rows` | as a query | [`Answer::Rows`] with every row's columns (each a 64-bit integer); on MySQL [`Answer::DuplicateKey`] when it fails with a duplicate key (error 1062) |
//! | `RowsAffected` | as an update | [`Answer::RowsAffected`] |
//! | `InsertId` (MySQL) | as an insert | [`Answer::InsertId`] with the new row's `AUTO_INCREMENT` id, or [`Answer::DuplicateKey`] when it fails with a duplicate key (error 1062) |
//! | `KeyRows` | never on an application's connection: only a store's own statements ask for it | — |
//!
//! Placeholders are the dialect's: `$1, $2…` on PostgreSQL, `?` on MySQL, `?1, ?2…` on
//! SQLite. Text parameters are UTF-8 strings; a `None` is SQL `NULL` of the value's type.
//! The statements leave the transaction open: the caller commits or rolls back.
//!
//! ```
//! use backstop_core::tx::{Answer, Dialect, Returns, Statement, TxConnection, Value};
//! use backstop_core::{async_trait, Error, ErrorKind};
//!
//! /// A connection of some driver, inside the caller's transaction.
//! struct MyConn { /* … */ }
//!
//! #[async_trait]
//! impl TxConnection for MyConn {
//!     fn dialect(&self) -> Dialect {
//!         Dialect::Postgres
//!     }
//!     async fn run(&mut self, statement: &Statement<'_>) -> backstop_core::Result<Answer> {
//!         for value in statement.params() {
//!             match value {
//!                 Value::Text(text) => { /* bind text (Option<&str>) */ }
//!                 Value::BigInt(n) => { /* bind n (Option<i64>) */ }
//!                 _ => { /* and so on for each kind of value */ }
//!             }
//!         }
//!         // run statement.sql() and answer as statement.returns() asks; a driver
//!         // error becomes a backstop error (kind Unavailable when retrying may help)
//!         Err(Error::new(ErrorKind::Unavailable, "enqueue", "no database in this example"))
//!     }
//! }
//! ```

#[cfg(any(
    feature = "sqlx-postgres",
    feature = "sqlx-mysql",
    feature = "sqlx-sqlite"
))]
pub use crate::driver::sqlx_error;
pub use crate::driver::{
    Answer, Attempt, BlockingTxConnection, Dialect, Returns, Statement, Transactional,
    TxConnection, Value, MAX_INSERT_BYTES, MAX_INSERT_ROWS,
};
