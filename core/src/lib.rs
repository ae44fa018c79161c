//! # backstop-core
//!
//! The model, the [`TaskStore`] contract and the error type of
//! [backstop](https://docs.rs/backstop), a library for the *local message table* pattern:
//! a service writes its business rows and a task row in one local transaction; after
//! commit the task runs at once in-process, and a poller is the safety net for everything
//! the fast path missed. Delivery is at-least-once; handlers must be idempotent.
//!
//! Most users depend on the `backstop` crate, which re-exports this one together with the
//! backend of their choice.
#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub mod driver;
mod engine;
mod error;
pub mod inbox;
mod kind;
pub mod layers;
pub mod limits;
mod model;
mod notify;
pub mod otel;
mod schedule;
mod store;
#[cfg(feature = "testing")]
pub mod testing;
pub mod tx;

pub use engine::{
    describe_metrics, handler_fn, is_lease_lost, kind_fn, lease_lost, metric_names, Archive,
    BacklogGauges, BacklogReading, Cancelled, Claimed, Context, Engine, EngineBuilder,
    EngineConfig, EngineCounters, ErrorAction, Finding, FnHandler, Handler, HandlerError,
    HandlerOptions, Json, JsonHandler, KindFn, Reconciler, Resolution, RunAhead, SagaSteps,
    StepContext, StepError,
};
pub use error::{BoxError, Error, ErrorKind, Result};
pub use inbox::{Inbox, Message, Processed};
pub use kind::{register_kind, TaskKind};
pub use limits::StoreConfig;
pub use model::{
    Audit, AuditEntry, Backoff, Barrier, BarrierRecord, BranchCall, BranchOp, Dedup, Due, Enqueued,
    EventTypeSeen, Lease, Mark, MarkAction, NewTask, NudgeTask, OnDuplicate, Owner, Priority,
    Queue, QueueChange, QueueColumns, QueueLogEntry, RateLimit, ReconcileTask, Recycled,
    RetryPolicy, Saga, SagaCommand, SagaCount, SagaDef, SagaDefBuilder, SagaFilter, SagaId,
    SagaLogEntry, SagaStart, SagaStarted, SagaStatus, SagaStep, SagaStepRecord, Stats, Status,
    StatusCount, StepApplied, StepOutcome, StepPhase, StepReport, StepRole, StepState, StepTask,
    Task, TaskEdit, TaskFilter, TaskId, TccDefBuilder, Throughput, WhenParked, MAX_CONCURRENCY,
    MAX_RATE_WINDOW,
};
pub use notify::{Notifier, Wake, Wakes};
pub use otel::is_traceparent;
pub use schedule::{Missed, Periodic, Schedule};
pub use store::{Call, Layer, Op, StoreLayer, TaskStore, TaskStoreExt};
pub use tx::{BlockingTxConnection, Transactional, TxConnection};

/// Re-exported so implementors use the same `#[async_trait]` as the trait.
pub use async_trait::async_trait;
