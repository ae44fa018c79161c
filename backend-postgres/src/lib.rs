//! # backstop-postgres
//!
//! The PostgreSQL backend of backstop: a [`TaskStore`](backstop_core::TaskStore) on tokio-postgres with a
//! deadpool-postgres pool.
//!
//! - **Claims** use a `MATERIALIZED` locking CTE with `FOR UPDATE SKIP LOCKED`, so
//!   concurrent pollers pass each other and a batch never takes more than its limit.
//! - **Database time** (`now()`) everywhere; delays are bound as milliseconds.
//! - **Prepared statements**, cached per pooled connection.
//! - **Batches are set-based**: a batch of marks or heartbeats is one statement over
//!   `unnest(…)` arrays, not one round trip per task.
//! - **Transactional enqueue**: [`PgStore::enqueue_tx`] writes the task on the caller's
//!   own transaction (a deadpool or tokio-postgres one, see [`PgExecutor`]), so it commits or rolls back
//!   with the business rows.
//! - **Migration** is safe to run from several instances at once (an advisory lock).
//! - **Errors**: lost connections, serialization failures (40001), deadlocks (40P01), lock
//!   timeouts and an exhausted pool are `Unavailable` and temporary.
//!
//! **TLS** (feature `tls`, rustls, no OpenSSL) follows libpq's URL parameters:
//! `sslmode=require|verify-ca|verify-full` and `sslrootcert=/path/ca.pem` (Mozilla's roots
//! when absent). Without `sslmode` a connection is plain. A certificate the CA did not
//! sign, a host name it does not name, or a server that refuses an unencrypted
//! connection is a `Config` error saying TLS failed.
//!
//! ```no_run
//! # async fn demo() -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
//! use backstop_core::{NewTask, TaskStore};
//! use backstop_postgres::PgStore;
//!
//! let store = PgStore::connect("postgres://app@localhost/app").await?;
//! store.migrate().await?;
//!
//! let mut client = store.client().await?;
//! let tx = client.transaction().await?;
//! tx.execute("INSERT INTO orders (id) VALUES (42)", &[]).await?;
//! let enqueued = store.enqueue_tx(&tx, &NewTask::new("PAY_ORDER", "42")).await?;
//! tx.commit().await?;
//! assert!(enqueued.created);
//! # Ok(()) }
//! ```
#![forbid(unsafe_code)]
#![warn(missing_docs)]
// Without `tls` the connector is `NoTls`, which is `Copy`: the clones are for the rustls one.
#![cfg_attr(not(feature = "tls"), allow(clippy::clone_on_copy))]

mod conn;
mod connect;
mod driver;
mod enqueue;
mod inbox;
mod limited;
mod listen;
mod options;
mod rows;
mod sql;
mod store;
mod tls;
mod url;

pub use conn::PgExecutor;
pub use inbox::{pg_handler, PgHandler};
pub use listen::PgListener;
pub use options::PgOptions;
pub use store::PgStore;

pub use deadpool_postgres;
pub use tokio_postgres;
