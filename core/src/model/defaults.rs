//! The defaults of an event type that a typed kind registered in this process (see
//! [`register_kind`](crate::register_kind)): a task enqueued by name gets its kind's
//! retry policy and dedup rule.

use std::collections::HashMap;
use std::sync::{OnceLock, RwLock};

use super::{Dedup, RetryPolicy};

struct Known {
    policy: RetryPolicy,
    dedup: Dedup,
    kind: &'static str,
}

fn registry() -> &'static RwLock<HashMap<&'static str, Known>> {
    static KINDS: OnceLock<RwLock<HashMap<&'static str, Known>>> = OnceLock::new();
    KINDS.get_or_init(Default::default)
}

/// Register `kind` (a type's name) as the kind of `event_type`, with its retry policy and
/// dedup rule. Idempotent; a second kind of the same event type with another policy is
/// refused with an error logged (the first is kept).
pub(crate) fn register(
    event_type: &'static str,
    kind: &'static str,
    policy: RetryPolicy,
    dedup: Dedup,
) {
    if let Ok(known) = registry().read() {
        if let Some(k) = known.get(event_type) {
            if k.kind != kind && k.policy != policy {
                tracing::error!(
                    event_type,
                    kept = k.kind,
                    ignored = kind,
                    "two task kinds claim one event type with different retry policies; \
                     the first registered is kept"
                );
            }
            return;
        }
    }
    if let Ok(mut known) = registry().write() {
        known.entry(event_type).or_insert(Known {
            policy,
            dedup,
            kind,
        });
    }
}

/// The dedup rule of the kind registered for `event_type`, if any.
pub(crate) fn dedup_of(event_type: &str) -> Option<Dedup> {
    registry()
        .read()
        .ok()
        .and_then(|k| k.get(event_type).map(|k| k.dedup))
}

/// The retry policy of the kind registered for `event_type`, if any.
pub(crate) fn policy_of(event_type: &str) -> Option<RetryPolicy> {
    registry()
        .read()
        .ok()
        .and_then(|k| k.get(event_type).map(|k| k.policy))
}
