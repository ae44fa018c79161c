//! Typed task kinds: a payload type tied to its event type, retry policy and priority, so
//! the code that enqueues a task and the handler that runs it cannot disagree on them.

use serde::de::DeserializeOwned;
use serde::Serialize;

use crate::model::{Dedup, NewTask, Priority, RetryPolicy};

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

/// Make kind `K` known to this process, so tasks of its event type built by name get its
/// retry policy (see [`TaskKind`]). Idempotent; done for you by `NewTask::of` and by
/// registering a handler for the kind. Call it at startup in a process that only
/// enqueues by name.
pub fn register_kind<K: TaskKind>() {
    let kind = std::any::type_name::<K>();
    crate::model::register_defaults(K::EVENT_TYPE, kind, K::retry(), K::dedup());
}

impl NewTask {
    /// The task of a [kind](TaskKind): its event type, business key, JSON
    /// payload, retry policy and priority all come from `kind` (and the kind becomes
    /// known to this process, see [`register_kind`](crate::register_kind)).
    pub fn of<K: TaskKind>(kind: &K) -> Self {
        register_kind::<K>();
        let task = NewTask::new(K::EVENT_TYPE, kind.biz_key())
            .json(kind)
            .retry(K::retry())
            .dedup(K::dedup())
            .priority(kind.priority());
        match kind.order_key() {
            Some(key) => task.order_key(key),
            None => task,
        }
    }
}

impl<K: TaskKind> From<K> for NewTask {
    /// [`NewTask::of`].
    fn from(kind: K) -> Self {
        NewTask::of(&kind)
    }
}
