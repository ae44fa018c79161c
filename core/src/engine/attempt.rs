//! What a running handler can learn about its own attempt.

use std::future::Future;
use std::sync::Arc;

use super::tracker::LeaseSignal;

tokio::task_local! {
    static LEASE: Arc<LeaseSignal>;
}

/// Run `f` (an attempt) with its lease signal in reach of [`lease_lost`].
pub(crate) fn scoped<F: Future>(signal: Arc<LeaseSignal>, f: F) -> impl Future<Output = F::Output> {
    LEASE.scope(signal, f)
}

/// Inside a handler: completes when this attempt's lease is found gone — an operator
/// cancelled or reset the task, or it was recycled as dead and claimed again. The engine
/// learns it within a round trip of an operator's change that its notifier announces
/// ([`Wake::Revoked`](crate::Wake::Revoked)), else at its next heartbeat of the task
/// (every [`heartbeat_interval`](crate::EngineConfig::heartbeat_interval)). From then on the
/// attempt's outcome is refused whatever the handler returns, so a handler that can stop
/// early should: race its work against this and return.
///
/// The handler is never interrupted for it (a cancel is cooperative). Outside an attempt
/// (or on a task the handler spawned) it never completes.
///
/// ```
/// # async fn send_batch(_: u32) {}
/// use backstop_core::{handler_fn, HandlerError, Task};
/// let handler = handler_fn(|task: Task| async move {
///     for batch in 0..100 {
///         tokio::select! {
///             _ = send_batch(batch) => {}
///             _ = backstop_core::lease_lost() => {
///                 return Err(HandlerError::retry("lease lost: stopped early"));
///             }
///         }
///     }
///     Ok(())
/// });
/// ```
pub async fn lease_lost() {
    match LEASE.try_with(Arc::clone) {
        Ok(signal) => signal.raised().await,
        Err(_) => std::future::pending().await,
    }
}

/// Inside a handler: whether this attempt's lease was found gone (see [`lease_lost`]).
/// `false` outside an attempt.
pub fn is_lease_lost() -> bool {
    LEASE.try_with(|s| s.is_raised()).unwrap_or(false)
}
