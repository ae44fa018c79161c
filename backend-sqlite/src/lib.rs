//! # backstop-sqlite
//!
//! The embedded SQLite backend of backstop: a [`TaskStore`](backstop_core::TaskStore) on a local database file,
//! with SQLite bundled (no system library, no server).
//!
//! - **WAL** journal and a busy timeout on every connection; every write runs under
//!   `BEGIN IMMEDIATE`, so a transaction never fails to upgrade from read to write
//!   (the `SQLITE_BUSY` that `busy_timeout` cannot absorb).
//! - **No blocking of the async runtime**: reads run on pooled connections on tokio's
//!   blocking pool; writes run one after another on the file's writer thread (one per
//!   file in the process, with its own connection), see [`SqliteOptions::queue_writers`].
//! - **Transactional enqueue**: [`SqliteStore::enqueue_tx`] writes the task on the
//!   caller's own [`rusqlite::Transaction`], so it commits or rolls back with the business
//!   rows; [`SqliteStore::transaction`] runs such a transaction on the store's pool.
//! - **Time**: SQLite runs in this process, so "database time" is this machine's clock,
//!   read once per statement (after the write lock is taken) and stored as Unix
//!   milliseconds.
//!
//! ```no_run
//! # async fn demo() -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
//! use backstop_core::{NewTask, TaskStore};
//! use backstop_sqlite::SqliteStore;
//!
//! let store = SqliteStore::open("app.db").await?;
//! store.migrate().await?;
//! let enq = store
//!     .transaction(|tx| {
//!         // business rows and the task: one local transaction
//!         tx.execute("INSERT INTO orders (id) VALUES (42)", [])?;
//!         Ok::<_, Box<dyn std::error::Error + Send + Sync>>(
//!             tx.enqueue(&NewTask::new("PAY_ORDER", "42"))?,
//!         )
//!     })
//!     .await?;
//! assert!(enq.created);
//! # Ok(()) }
//! ```
#![forbid(unsafe_code)]
#![warn(missing_docs)]

mod batch_rows;
mod claim;
mod conn;
mod driver;
mod enqueue;
mod inbox;
mod options;
mod partitions;
mod pool;
mod rows;
mod sql;
mod store;
mod url;
mod writer;

pub use inbox::{sqlite_handler, SqliteHandler};
pub use options::{SqliteOptions, Synchronous};
/// The rusqlite this backend is built on, for the caller's own statements in
/// [`SqliteStore::transaction`].
pub use rusqlite;
pub use store::{SqliteStore, SqliteTx};
pub use url::SqliteTarget;
