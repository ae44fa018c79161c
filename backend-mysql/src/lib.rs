//! # backstop-mysql
//!
//! The MySQL 8 / MariaDB 10.6+ backend of backstop: a [`TaskStore`](backstop_core::TaskStore) on sqlx's MySQL
//! driver (InnoDB).
//!
//! - **Three claim strategies** ([`ClaimStrategy`]), one transaction each: a locking
//!   read of the oldest due ids, then `UPDATE … WHERE id IN (…)` tagging the rows with a
//!   per-call claim token, then a `SELECT` of exactly those rows. They differ in what the
//!   read does with rows another claim holds: *queue then skip* waits its turn up to
//!   1 s, then passes them (`FOR UPDATE WAIT 1`, then `SKIP LOCKED`; MariaDB ≥ 10.6, the
//!   default there), *skip locked* passes them at once (MySQL ≥ 8.0.1, the default
//!   there), the *ordered update* waits (`FOR UPDATE`; every version).
//! - **READ COMMITTED** on every pooled connection (no gap locks to deadlock with
//!   inserts); claim indexes that match the `ORDER BY` exactly.
//! - **Deadlocks (1213) and lock-wait timeouts (1205)** are retried a few times with
//!   backoff, then reported as temporary `Unavailable` errors.
//! - **Database time** (`NOW(3)`, `DATETIME(3)`, session time zone UTC) everywhere.
//! - **Transactional enqueue** on the caller's `sqlx::Transaction<MySql>` or
//!   `&mut MySqlConnection`: [`MySqlStore::enqueue_tx`]. A duplicate returns the existing
//!   id; any other error is reported, never swallowed.
//!
//! ```no_run
//! # async fn demo() -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
//! use backstop_core::{NewTask, TaskStore};
//! use backstop_mysql::MySqlStore;
//!
//! let store = MySqlStore::connect("mysql://app:secret@localhost/app").await?;
//! store.migrate().await?;
//! let mut tx = store.pool().begin().await?;
//! sqlx::query("INSERT INTO orders (id) VALUES (42)").execute(&mut *tx).await?;
//! let enqueued = store.enqueue_tx(&mut tx, &NewTask::new("PAY_ORDER", "42")).await?;
//! tx.commit().await?;
//! assert!(enqueued.created);
//! # Ok(()) }
//! ```
#![forbid(unsafe_code)]
#![warn(missing_docs)]

mod claim;
mod conn;
mod connect;
mod driver;
mod enqueue;
mod hosts;
mod inbox;
mod maintenance;
mod marks;
mod operators;
mod options;
mod partitions;
mod rows;
mod sql;
mod store;
mod url;

pub use claim::ClaimStrategy;
pub use inbox::{mysql_handler, MySqlHandler};
pub use options::MySqlOptions;
pub use sqlx;
pub use store::MySqlStore;
