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
//!
//! Each takes a URL: `redis://[[user]:password@]host[:port][/db]` for one server,
//! `rediss://…[?sslrootcert=<ca.pem>]` for one server over TLS (rustls; the server's
//! certificate checked against that CA file, as the database backends' `sslrootcert`, or
//! against the system's roots without it), or
//! `redis+sentinel://[[user]:password@]host[:port][,host[:port]…]/<master>[/db]` for the
//! master that the Sentinels at those addresses (port 26379 by default) name: every new
//! connection asks them, so a failover is followed (the credentials and database are the
//! master's). Where Redis fails over, give the relay [`RelayOptions::replicas`] so an
//! entry a failover could lose fails its task's attempt instead.
#![forbid(unsafe_code)]
#![warn(missing_docs)]

mod consumer;
mod lock;
mod notify;
mod relay;
mod stream;
mod target;

pub use consumer::{ConsumerCounters, ConsumerOptions, StreamConsumer};
pub use lock::{KeyLock, LockGuard};
pub use notify::RedisNotifier;
pub use redis;
pub use relay::{RelayOptions, StreamRelay};

use backstop_core::{Error, ErrorKind};
pub(crate) use target::Target;

/// A redis-rs error as a backstop error of `operation`: connection trouble (refused,
/// dropped, timed out) and a master that moved (`READONLY`, `MASTERDOWN`, none named
/// by the Sentinels yet) are a temporary `Unavailable`; anything else (a wrong type, a
/// script error, a refused command) is permanent.
pub(crate) fn redis_err(operation: &'static str, e: redis::RedisError) -> Error {
    let temporary = target::reconnect(&e);
    let kind = if temporary {
        ErrorKind::Unavailable
    } else {
        ErrorKind::Unexpected
    };
    Error::new(kind, operation, format!("redis: {e}"))
        .with_source(e)
        .with_temporary(temporary)
}

/// A multiplexed connection made on first use and shared by clones (a multiplexed
/// connection serves concurrent commands: the lock is held only to get it, never across
/// a command). After a connection error, or an answer that the server is no longer the
/// master, it is dropped and the next use reconnects (through the Sentinels, to the
/// master they name then).
pub(crate) struct LazyConn {
    target: Target,
    slot: tokio::sync::Mutex<Option<redis::aio::MultiplexedConnection>>,
    timeout: std::time::Duration,
}

impl LazyConn {
    /// Connections to `target` whose connects and commands time out after `timeout`.
    pub fn new(target: Target, timeout: std::time::Duration) -> Self {
        Self {
            target,
            slot: tokio::sync::Mutex::new(None),
            timeout,
        }
    }

    async fn get(&self) -> redis::RedisResult<redis::aio::MultiplexedConnection> {
        let mut slot = self.slot.lock().await;
        if let Some(c) = slot.as_ref() {
            return Ok(c.clone());
        }
        let config = redis::AsyncConnectionConfig::new()
            .set_connection_timeout(Some(self.timeout))
            .set_response_timeout(Some(self.timeout));
        let connect = async {
            let client = self.target.client().await?;
            client
                .get_multiplexed_async_connection_with_config(&config)
                .await
        };
        let c = tokio::time::timeout(self.timeout, connect)
            .await
            .map_err(|_| {
                redis::RedisError::from(std::io::Error::new(
                    std::io::ErrorKind::TimedOut,
                    "connecting to Redis timed out",
                ))
            })??;
        *slot = Some(c.clone());
        Ok(c)
    }

    /// Drop the connection: the next use makes a new one.
    pub async fn reset(&self) {
        *self.slot.lock().await = None;
    }

    /// Run `cmd`; a connection error drops the connection for the next use to replace.
    pub async fn query<T: redis::FromRedisValue>(&self, cmd: &redis::Cmd) -> redis::RedisResult<T> {
        let mut conn = self.get().await?;
        self.checked(cmd.query_async::<T>(&mut conn).await).await
    }

    /// Run `pipe`'s commands in one round trip, as [`query`](Self::query).
    pub async fn pipeline<T: redis::FromRedisValue>(
        &self,
        pipe: &redis::Pipeline,
    ) -> redis::RedisResult<T> {
        let mut conn = self.get().await?;
        self.checked(pipe.query_async::<T>(&mut conn).await).await
    }

    /// Run `script` with `key` and `arg`, as [`query`](Self::query).
    pub async fn invoke<T: redis::FromRedisValue>(
        &self,
        script: &redis::Script,
        key: &str,
        arg: &str,
    ) -> redis::RedisResult<T> {
        let mut conn = self.get().await?;
        let r = script.key(key).arg(arg).invoke_async::<T>(&mut conn).await;
        self.checked(r).await
    }

    /// `r`, after dropping the connection when `r` says it is broken or no longer on
    /// the master.
    async fn checked<T>(&self, r: redis::RedisResult<T>) -> redis::RedisResult<T> {
        if r.as_ref().is_err_and(target::reconnect) {
            self.reset().await;
        }
        r
    }
}
