//! # backstop-redis
//!
//! Redis for [backstop](https://docs.rs/backstop):
//!
//! - [`RedisNotifier`]: wake-ups across processes over Redis pub/sub, for deployments
//!   whose database has no notifications of its own (MySQL, SQLite). Published after
//!   commit; fire-and-forget, so the poller stays the safety net.
//! - [`StreamRelay`]: a ready-made handler that publishes tasks to a Redis stream, so the
//!   task table is a transactional outbox for a broker.
//! - [`StreamConsumer`]: a consumer-group reader that processes each message through the
//!   database inbox ([`backstop_core::inbox`]): exactly once in effect.
//! - [`KeyLock`]: an optional lock on a business key for handlers with side effects
//!   outside the database (the inbox stays the arbiter).
#![forbid(unsafe_code)]
#![warn(missing_docs)]

mod consumer;
mod lock;
mod notify;
mod relay;
mod stream;

pub use consumer::{ConsumerCounters, ConsumerOptions, StreamConsumer};
pub use lock::{KeyLock, LockGuard};
pub use notify::RedisNotifier;
pub use redis;
pub use relay::{RelayOptions, StreamRelay};

use backstop_core::{Error, ErrorKind};

/// A redis-rs error as a backstop error of `operation`: connection trouble (refused,
/// dropped, timed out) is a temporary `Unavailable`; anything else (a wrong type, a
/// script error, a refused command) is permanent.
pub(crate) fn redis_err(operation: &'static str, e: redis::RedisError) -> Error {
    let temporary = e.is_io_error() || e.is_timeout() || e.is_connection_dropped();
    let kind = if temporary {
        ErrorKind::Unavailable
    } else {
        ErrorKind::Unexpected
    };
    Error::new(kind, operation, format!("redis: {e}"))
        .with_source(e)
        .with_temporary(temporary)
}
