//! The store's own retry of operations the database rolled back on contention.

use std::time::Duration;

use crate::error::{ErrorKind, Result};

/// Run `call` as operation `op`, again (backoff from 5 ms, doubling, with jitter) while it
/// fails with temporary [`ErrorKind::Contention`], up to `config.contention_retries`
/// times; then the error is persistent. Every error returned names `op`. The store's own
/// retry, for backend operations outside [`TaskStore`](crate::TaskStore) (an inbox's first statement, say);
/// `call` must be safe to run again (the database rolled the failed try back).
pub async fn retry_contention<T, F, Fut>(
    config: &crate::limits::StoreConfig,
    op: &'static str,
    mut call: F,
) -> Result<T>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<T>>,
{
    /// The first wait; each further one doubles, up to `MAX_BACKOFF`.
    const FIRST_BACKOFF: Duration = Duration::from_millis(5);
    const MAX_BACKOFF: Duration = Duration::from_secs(1);
    let retries = config.contention_retries;
    let mut backoff = FIRST_BACKOFF;
    let mut attempt = 0;
    loop {
        match call().await {
            Ok(v) => return Ok(v),
            Err(e) if e.kind() == ErrorKind::Contention && e.is_temporary() => {
                if attempt >= retries {
                    let e = e.with_operation(op);
                    return Err(if attempt > 0 { e.retried(attempt) } else { e });
                }
                attempt += 1;
                // jitter, so that two victims of one deadlock do not collide again
                tokio::time::sleep(backoff + jitter(backoff / 2)).await;
                backoff = (backoff * 2).min(MAX_BACKOFF);
            }
            Err(e) => return Err(e.with_operation(op)),
        }
    }
}

/// A pseudo-random duration in `[0, max)` (no need for a random number crate here).
fn jitter(max: Duration) -> Duration {
    use std::hash::{BuildHasher, Hasher};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u128(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or_default(),
    );
    let micros = max.as_micros().max(1) as u64;
    Duration::from_micros(h.finish() % micros)
}
