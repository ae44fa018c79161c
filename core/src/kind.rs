//! Typed task kinds: a payload type tied to its event type, retry policy and priority, so
//! the code that enqueues a task and the handler that runs it cannot disagree on them.

use std::collections::HashMap;
use std::sync::{OnceLock, RwLock};

use serde::de::DeserializeOwned;
use serde::Serialize;

use crate::model::{Dedup, Priority, RetryPolicy};

/// A kind of task: its payload type, and what every task of it shares.
///
/// ```
/// use std::time::Duration;
/// use backstop_core::{NewTask, RetryPolicy, TaskKind};
///
/// #[derive(serde::Serialize, serde::Deserialize)]
/// struct SendReceipt {
///     order_id: u64,
///     email: String,
/// }
///
/// impl TaskKind for SendReceipt {
///     const EVENT_TYPE: &'static str = "SEND_RECEIPT";
///     fn biz_key(&self) -> String {
///         format!("order-{}", self.order_id)
///     }
///     fn retry() -> RetryPolicy {
///         RetryPolicy::exponential(8, Duration::from_secs(30))
///     }
/// }
///
/// let task = NewTask::of(&SendReceipt { order_id: 42, email: "a@example.com".into() });
/// assert_eq!((task.event_type(), task.biz_key()), ("SEND_RECEIPT", "order-42"));
/// assert_eq!(task.retry_policy(), SendReceipt::retry());
/// // a task of the kind's event type built by name gets the kind's policy too
/// assert_eq!(NewTask::new("SEND_RECEIPT", "order-7").retry_policy(), SendReceipt::retry());
/// ```
///
/// # Behavior
///
/// - [`NewTask::of`](crate::NewTask::of) (and `NewTask::from(kind)`, and
///   `Engine::enqueue(kind)`) makes the task: event type, business key, JSON payload,
///   retry policy and priority all come from the kind.
/// - Registering a handler for the kind (`EngineBuilder::kind`) uses the kind's event
///   type and retry policy; the payload is decoded as the kind.
/// - **A task built by name gets its kind's policy.** Once a kind is known to the process
///   (a handler for it was registered, a task of it was made with `NewTask::of`, or
///   [`register_kind`] was called), a task of its event type built with
///   `NewTask::new(event_type, key)` and no explicit `.retry(..)` takes the kind's policy
///   instead of the default: a task enqueued by name inside a business transaction runs
///   under the same policy as one enqueued through the typed API. An explicit `.retry(..)`
///   always wins.
/// - The same holds for the kind's [`dedup`](Self::dedup) rule.
/// - Two kinds claiming one event type with different policies is a programming error:
///   the first registered is kept and the conflict is logged.
pub trait TaskKind: Serialize + DeserializeOwned + Send + Sync + 'static {
    /// The event type (the handler key): 1–64 bytes of `A–Z a–z 0–9 _ . : -`.
    const EVENT_TYPE: &'static str;

    /// The business key of this task (1–128 bytes): the idempotency key of the enqueue.
    fn biz_key(&self) -> String;

    /// The retry policy of every task of this kind (default: [`RetryPolicy::default`]).
    fn retry() -> RetryPolicy {
        RetryPolicy::default()
    }

    /// The claim order of this task within its event type (default
    /// [`Priority::NORMAL`]).
    fn priority(&self) -> Priority {
        Priority::NORMAL
    }

    /// When an enqueue of the same business key is a duplicate (default
    /// [`Dedup::WhileActive`]).
    fn dedup() -> Dedup {
        Dedup::WhileActive
    }

    /// The order key of this task, if it must run in order with the other tasks of the
    /// key (see [`NewTask::order_key`](crate::NewTask::order_key)); default none.
    fn order_key(&self) -> Option<String> {
        None
    }
}

struct Known {
    policy: RetryPolicy,
    dedup: Dedup,
    kind: &'static str,
}

fn registry() -> &'static RwLock<HashMap<&'static str, Known>> {
    static KINDS: OnceLock<RwLock<HashMap<&'static str, Known>>> = OnceLock::new();
    KINDS.get_or_init(Default::default)
}

/// Make kind `K` known to this process, so tasks of its event type built by name get its
/// retry policy (see [`TaskKind`]). Idempotent; done for you by `NewTask::of` and by
/// registering a handler for the kind. Call it at startup in a process that only
/// enqueues by name.
pub fn register_kind<K: TaskKind>() {
    let kind = std::any::type_name::<K>();
    if let Ok(known) = registry().read() {
        if let Some(k) = known.get(K::EVENT_TYPE) {
            if k.kind != kind && k.policy != K::retry() {
                tracing::error!(
                    event_type = K::EVENT_TYPE,
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
        known.entry(K::EVENT_TYPE).or_insert(Known {
            policy: K::retry(),
            dedup: K::dedup(),
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
