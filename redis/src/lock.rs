//! A lock on a business key in Redis: saves wasted work, never decides correctness.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use backstop_core::{Error, Result};
use redis::Value;

use crate::{redis_err, LazyConn, Target};

const RESPONSE_TIMEOUT: Duration = Duration::from_secs(5);

/// Deletes the key only while it still holds our token (a lock that expired and was
/// taken by another holder is not ours to release).
const RELEASE: &str = r#"
if redis.call("GET", KEYS[1]) == ARGV[1] then
    return redis.call("DEL", KEYS[1])
else
    return 0
end"#;

/// A held lock: release it with [`KeyLock::release`]; it expires on its own after its
/// time to live otherwise.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LockGuard {
    key: String,
    token: String,
}

impl LockGuard {
    /// The Redis key.
    pub fn key(&self) -> &str {
        &self.key
    }
}

/// Locks on business keys (`SET <prefix><key> <random token> NX PX <ttl>`, released by
/// a compare-and-delete script), for handlers with side effects **outside** the
/// database: two deliveries of one order's message do not call the payment provider at
/// the same time.
///
/// The lock is an optimisation only, never the arbiter. It can expire while its holder
/// is paused (a GC pause, a stopped VM, a slow network) and then a second holder runs;
/// it can vanish on a Redis failover; it carries no fencing token the side effect could
/// check. The database inbox row, written in the transaction of the business writes,
/// is what makes the effect happen once: the lock only saves the wasted work of a
/// second delivery that the inbox would refuse anyway. Use it for expensive or
/// rate-limited side effects, and make them idempotent all the same (an idempotency key
/// at the provider: the message id).
///
/// ```no_run
/// # async fn demo() -> backstop_core::Result<()> {
/// use std::time::Duration;
/// use backstop_redis::KeyLock;
///
/// let locks = KeyLock::open("redis://127.0.0.1/", "lock:payments:")?;
/// if let Some(guard) = locks.acquire("order-42", Duration::from_secs(30)).await? {
///     // … call the provider …
///     locks.release(&guard).await?;
/// }
/// # Ok(()) }
/// ```
pub struct KeyLock {
    prefix: String,
    conn: LazyConn,
    script: redis::Script,
}

impl std::fmt::Debug for KeyLock {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KeyLock")
            .field("prefix", &self.prefix)
            .finish()
    }
}

impl KeyLock {
    /// Locks on the Redis at `url`, their keys prefixed by `prefix`; connects lazily.
    pub fn open(url: &str, prefix: impl Into<String>) -> Result<Self> {
        Ok(Self {
            conn: LazyConn::new(Target::open(url, "open_lock")?, RESPONSE_TIMEOUT),
            prefix: prefix.into(),
            script: redis::Script::new(RELEASE),
        })
    }

    /// Take the lock on `key` for `ttl` (at least 1 ms), or `None` when someone holds it.
    pub async fn acquire(&self, key: &str, ttl: Duration) -> Result<Option<LockGuard>> {
        let ms = ttl.as_millis();
        if ms == 0 || ms > u128::from(u32::MAX) {
            return Err(Error::invalid_input(
                "lock",
                "the lock's time to live must be 1 ms to 49 days",
            ));
        }
        let guard = LockGuard {
            key: format!("{}{key}", self.prefix),
            token: token(),
        };
        let mut set = redis::cmd("SET");
        set.arg(&guard.key)
            .arg(&guard.token)
            .arg("NX")
            .arg("PX")
            .arg(ms as u64);
        let set: Value = self
            .conn
            .query(&set)
            .await
            .map_err(|e| redis_err("lock", e))?;
        Ok(match set {
            Value::Nil => None,
            _ => Some(guard),
        })
    }

    /// Release `guard`'s lock if it still holds it; `false` when it had expired (and may
    /// now be someone else's, which is left alone).
    pub async fn release(&self, guard: &LockGuard) -> Result<bool> {
        let deleted: i64 = self
            .conn
            .invoke(&self.script, &guard.key, &guard.token)
            .await
            .map_err(|e| redis_err("unlock", e))?;
        Ok(deleted == 1)
    }
}

/// A token no other holder has: process, time, a counter, hashed with a random key.
fn token() -> String {
    use std::collections::hash_map::RandomState;
    use std::hash::{BuildHasher, Hasher};
    static N: AtomicU64 = AtomicU64::new(0);
    let mut h = RandomState::new().build_hasher();
    h.write_u32(std::process::id());
    h.write_u64(N.fetch_add(1, Ordering::Relaxed));
    h.write_u128(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or_default(),
    );
    let a = h.finish();
    h.write_u8(1);
    format!("{a:016x}{:016x}", h.finish())
}
