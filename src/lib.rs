//! # backstop
//!
//! The *local message table* pattern (transactional outbox / retry-task table) for Rust.
//!
//! A service writes its business rows **and** a task row in one local transaction. After
//! commit the task runs at once in-process; a periodic poller is the safety net that
//! picks up whatever the fast path missed (crashes, restarts, retries). Delivery is
//! at-least-once, every state change is fenced by a lease, and failed tasks park for an
//! operator to inspect and reset.
//!
//! This crate is the facade: it re-exports [`backstop_core`] (the model and the
//! [`TaskStore`] contract) and each backend behind a cargo feature:
//!
//! | feature | backend | module |
//! |---|---|---|
//! | `sqlite` (default) | embedded SQLite (bundled) | [`sqlite`] |
//! | `postgres` | PostgreSQL (tokio-postgres + deadpool) | `postgres` |
//! | `mysql` | MySQL 8 / MariaDB 10.6+ (sqlx) | `mysql` |
//! | `postgres-sqlx` | `postgres`, and the enqueue on a `sqlx::Transaction<Postgres>` | |
//! | `sqlite-sqlx` | `sqlite`, and the enqueue on a `sqlx::Transaction<Sqlite>` | |
//!
//! **The transactional enqueue** is one call on every backend:
//! [`Transactional::enqueue_in`] writes the task on the caller's own transaction — a
//! sqlx transaction on any of the three databases, or any other driver's connection
//! through [`TxConnection`] (see [`tx`]). Each backend keeps its native form too
//! (`PgStore::enqueue_tx` on tokio-postgres, `SqliteStore::transaction` on rusqlite).
//!
//! and Redis (feature `redis`, module `redis`): wake-ups over pub/sub for deployments
//! whose database has no notifications of its own.
//!
//! [`connect`] opens an [`AnyStore`] on whichever enabled backend the URL names, so an
//! application moves between databases by changing a feature and a URL.
//!
//! ```no_run
//! # #[cfg(feature = "sqlite")]
//! # async fn demo() -> backstop::Result<()> {
//! use backstop::{NewTask, Owner, TaskStore, TaskStoreExt};
//! use backstop::sqlite::SqliteStore;
//!
//! let store = SqliteStore::open("app.db").await?;
//! store.migrate().await?;
//! let enq = store.enqueue(NewTask::new("SEND_EMAIL", "order-42")).await?;
//! if let Some(task) = store.claim_by_id(enq.id, &Owner::generate()).await? {
//!     // ... do the work, idempotently ...
//!     store.mark_success(task.lease()).await?;
//! }
//! # Ok(()) }
//! ```
//!
//! Two modules hold what most applications never need: [`limits`] (the input limits every
//! store enforces) and [`driver`] (for authors of a new backend: the driver interface
//! under the [`TaskStore`] contract).
#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub use backstop_core::{driver, limits};
// The engine and its handlers.
pub use backstop_core::{
    describe_metrics, handler_fn, is_lease_lost, kind_fn, lease_lost, metric_names, register_kind,
    Archive, BacklogGauges, BacklogReading, Cancelled, Claimed, Context, Engine, EngineBuilder,
    EngineConfig, EngineCounters, ErrorAction, FnHandler, Handler, HandlerError, HandlerOptions,
    Json, JsonHandler, KindFn, RunAhead, TaskKind,
};
// The enqueue in the caller's transaction, on any connection.
pub use backstop_core::tx;
pub use backstop_core::{BlockingTxConnection, Transactional, TxConnection};
// The participant barrier: saga steps and TCC branches delivered twice, early or late.
pub use backstop_core::{Barrier, BarrierRecord, BranchCall, BranchOp};
// Sagas: definitions, their start in the caller's transaction, their steps' code and
// reports, their state rows.
pub use backstop_core::{
    NudgeTask, ReconcileTask, Saga, SagaCommand, SagaCount, SagaDef, SagaDefBuilder, SagaFilter,
    SagaId, SagaLogEntry, SagaStart, SagaStarted, SagaStatus, SagaStep, SagaStepRecord, SagaSteps,
    StepApplied, StepContext, StepError, StepOutcome, StepPhase, StepReport, StepRole, StepState,
    StepTask, TccDefBuilder,
};
// Reconcilers: stuck rows found on a schedule and resolved by policy.
pub use backstop_core::{Finding, Reconciler, Resolution};
// Wake-ups across processes, and the consumer's inbox.
pub use backstop_core::{Inbox, Message, Notifier, Processed, Wake, Wakes};
// Periodic tasks.
pub use backstop_core::{Missed, Periodic, Schedule};
// Flow control: each event type's queue, paused or running, limited or not.
pub use backstop_core::{
    Queue, QueueChange, QueueLogEntry, RateLimit, MAX_CONCURRENCY, MAX_RATE_WINDOW,
};
// The store contract and the task model.
pub use backstop_core::{
    Audit, AuditEntry, Backoff, Dedup, Due, Enqueued, EventTypeSeen, Lease, Mark, MarkAction,
    NewTask, OnDuplicate, Owner, Priority, Recycled, RetryPolicy, Stats, Status, StatusCount,
    StoreConfig, Task, TaskEdit, TaskFilter, TaskId, TaskStore, TaskStoreExt, Throughput,
    WhenParked,
};
// Wrapping a store: the layer mechanism and the layers backstop ships.
pub use backstop_core::layers;
pub use backstop_core::{Call, Layer, Op, StoreLayer};
// Errors.
/// Re-exported so handlers (and backends) use the same `#[async_trait]` as the traits.
pub use backstop_core::async_trait;
pub use backstop_core::{BoxError, Error, ErrorKind, Result};

mod any;
pub mod guide;
pub use any::{connect, connect_with, ddl, AnyStore};

/// The embedded SQLite backend (feature `sqlite`, on by default).
#[cfg(feature = "sqlite")]
pub mod sqlite {
    pub use backstop_sqlite::*;
}

/// The PostgreSQL backend (feature `postgres`).
#[cfg(feature = "postgres")]
pub mod postgres {
    pub use backstop_postgres::*;
}

/// The MySQL / MariaDB backend (feature `mysql`).
#[cfg(feature = "mysql")]
pub mod mysql {
    pub use backstop_mysql::*;
}

/// Redis: wake-ups over pub/sub (feature `redis`).
#[cfg(feature = "redis")]
pub mod redis {
    pub use backstop_redis::*;
}

/// The operator's back office (feature `console`): the web console's axum `Router`,
/// Prometheus metrics, and the actions the `backstop` CLI shares.
#[cfg(feature = "console")]
pub mod console {
    pub use backstop_console::*;
}

/// Helpers for an application's tests (feature `testing`): assert what was enqueued,
/// move due times along; [`Engine::drain`] runs what is due. See the guide's
/// [testing chapter](crate::guide::testing).
#[cfg(feature = "testing")]
pub mod testing {
    pub use backstop_core::testing::*;
}

/// The README's examples, compiled as doctests so they stay true.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
pub struct ReadmeDoctests;
