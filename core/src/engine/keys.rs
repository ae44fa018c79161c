//! Moving order keys along after their tasks finished: shared by the completer, the
//! executor and the key sweep.

use super::Shared;
use crate::store::TaskStore;

/// Move these order keys along after their tasks finished (best effort: a failure is
/// logged and the key sweep catches up); wake the poller for the tasks made pending.
pub(super) async fn release_keys<S: TaskStore + Clone>(shared: &Shared<S>, keys: &[String]) {
    for chunk in keys.chunks(crate::limits::MAX_BATCH) {
        match shared.store.release_order_keys(chunk).await {
            Ok(promoted) if !promoted.is_empty() => shared.wake_all(),
            Ok(_) => {}
            Err(e) => {
                shared.counters.store_errors("*");
                tracing::warn!(error = %e, keys = chunk.len(),
                    "could not move order keys along; the key sweep will");
            }
        }
    }
}
