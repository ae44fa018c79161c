//! Handlers: the code that runs a task of one event type.

use std::fmt;
use std::future::Future;
use std::marker::PhantomData;
use std::time::Duration;

use async_trait::async_trait;
use serde::de::DeserializeOwned;

use crate::error::{Error, Result};
use crate::model::{RetryPolicy, Task};

/// What a failed attempt asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum ErrorAction {
    /// Retry after the task's backoff (the default for any error).
    Retry,
    /// Retry after this delay instead of the backoff (a downstream said "come back in
    /// 30 s", say).
    RetryAfter(Duration),
    /// Fail now, without further attempts: the error is permanent (a discard).
    Fail,
    /// Cancel the task: terminal, cancelled with the message as its reason, no further
    /// attempts; not a failure (nothing for an operator to fix).
    Cancel,
    /// Run again after this delay without spending the attempt, up to the type's
    /// [`max_snoozes`](HandlerOptions::max_snoozes); past that, a retry after it.
    Snooze(Duration),
}

/// The error a handler returns. Whatever converts into a
/// `Box<dyn std::error::Error + Send + Sync>` converts into a retryable one, so `?` works in
/// handlers on any `std::error::Error`, on `Box<dyn Error + Send + Sync>`, on
/// `anyhow::Error` and on strings; the message recorded is the error and its source chain
/// (`top: cause: root`), and the error itself is kept as [`cause`](Self::cause).
/// [`HandlerError::fail`] marks a permanent failure.
///
/// ```
/// use std::time::Duration;
/// use backstop_core::{ErrorAction, HandlerError};
///
/// let e = HandlerError::retry_after(Duration::from_secs(30), "rate limited");
/// assert_eq!(e.action(), ErrorAction::RetryAfter(Duration::from_secs(30)));
/// let e: HandlerError = std::io::Error::other("connection reset").into();
/// assert_eq!(e.action(), ErrorAction::Retry);
/// assert_eq!(e.message(), "connection reset");
/// let boxed: Box<dyn std::error::Error + Send + Sync> = "quota exceeded".into();
/// assert_eq!(HandlerError::from(boxed).message(), "quota exceeded");
/// ```
#[derive(Debug)]
pub struct HandlerError {
    action: ErrorAction,
    message: String,
    cause: Option<crate::error::BoxError>,
}

impl HandlerError {
    /// Retry after the task's backoff.
    pub fn retry(message: impl fmt::Display) -> Self {
        Self {
            action: ErrorAction::Retry,
            message: message.to_string(),
            cause: None,
        }
    }

    /// Retry after `delay`; a delay past [`MAX_INTERVAL`](crate::limits::MAX_INTERVAL)
    /// (365 days) is cut to it, with a warning.
    pub fn retry_after(delay: Duration, message: impl fmt::Display) -> Self {
        Self {
            action: ErrorAction::RetryAfter(delay),
            message: message.to_string(),
            cause: None,
        }
    }

    /// Fail the task now, for good (it waits for an operator's reset): a discard, with
    /// the attempts it has left unspent.
    pub fn fail(message: impl fmt::Display) -> Self {
        Self {
            action: ErrorAction::Fail,
            message: message.to_string(),
            cause: None,
        }
    }

    /// Snooze the task: run it again after `delay` without spending an attempt (the
    /// resource it waits for is not ready: a file not yet uploaded, a rate limit's
    /// window), up to its event type's [`max_snoozes`](HandlerOptions::max_snoozes)
    /// times over its life; past that a snooze is a [`retry_after`](Self::retry_after)
    /// (an attempt spent, `message` recorded). Unlike `retry_after`, a snooze within the
    /// bound keeps `last_error` as it was. Counted in `backstop_snoozed_total`. A delay
    /// past [`MAX_INTERVAL`](crate::limits::MAX_INTERVAL) (365 days) is cut to it.
    ///
    /// ```
    /// use std::time::Duration;
    /// use backstop_core::{ErrorAction, HandlerError};
    /// let e = HandlerError::snooze(Duration::from_secs(30), "the upload is not there yet");
    /// assert_eq!(e.action(), ErrorAction::Snooze(Duration::from_secs(30)));
    /// ```
    pub fn snooze(delay: Duration, message: impl fmt::Display) -> Self {
        Self {
            action: ErrorAction::Snooze(delay),
            message: message.to_string(),
            cause: None,
        }
    }

    /// Cancel the task: it ends cancelled (terminal) with `reason` as its
    /// `last_error`, never run again; the next task of its order key goes on. For work
    /// the handler finds is no longer wanted (the order was withdrawn), as an operator's
    /// cancel would end it. Unlike [`fail`](Self::fail), it is not a failure: no
    /// operator is needed, and it counts in `backstop_cancelled_total`.
    ///
    /// ```
    /// use backstop_core::{ErrorAction, HandlerError};
    /// let e = HandlerError::cancel("the order was withdrawn");
    /// assert_eq!((e.action(), e.message()), (ErrorAction::Cancel, "the order was withdrawn"));
    /// ```
    pub fn cancel(reason: impl fmt::Display) -> Self {
        Self {
            action: ErrorAction::Cancel,
            message: reason.to_string(),
            cause: None,
        }
    }

    /// What the failure asks for.
    pub fn action(&self) -> ErrorAction {
        self.action
    }

    /// The message recorded as the task's `last_error`.
    pub fn message(&self) -> &str {
        &self.message
    }

    /// The error this one was converted from, with its source chain (none for one made
    /// from a message).
    pub fn cause(&self) -> Option<&(dyn std::error::Error + Send + Sync + 'static)> {
        self.cause.as_deref()
    }

    /// The same failure, but permanent: no further attempts.
    ///
    /// ```
    /// use backstop_core::{ErrorAction, HandlerError};
    /// let e = HandlerError::from(std::io::Error::other("bad request")).permanent();
    /// assert_eq!((e.action(), e.message()), (ErrorAction::Fail, "bad request"));
    /// ```
    pub fn permanent(mut self) -> Self {
        self.action = ErrorAction::Fail;
        self
    }
}

impl fmt::Display for HandlerError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl<E: Into<crate::error::BoxError>> From<E> for HandlerError {
    fn from(e: E) -> Self {
        let e: crate::error::BoxError = e.into();
        let mut message = e.to_string();
        let mut source = e.source();
        while let Some(s) = source {
            message.push_str(": ");
            message.push_str(&s.to_string());
            source = s.source();
        }
        HandlerError {
            action: ErrorAction::Retry,
            message,
            cause: Some(e),
        }
    }
}

/// Runs the tasks of one event type. Must be idempotent: delivery is at-least-once.
///
/// A panic in `handle` is caught and treated as a retryable failure.
#[async_trait]
pub trait Handler: Send + Sync + 'static {
    /// Do the work of `task`.
    async fn handle(&self, task: &Task) -> std::result::Result<(), HandlerError>;

    /// Called before `handle`: return `true` when the work is already done (its business
    /// outcome exists, say), and the task is marked succeeded without running `handle`.
    async fn pre_check_skip(&self, _task: &Task) -> std::result::Result<bool, HandlerError> {
        Ok(false)
    }
}

/// A handler whose payload is JSON decoded into [`JsonHandler::Payload`]; wrap it in
/// [`Json`] to register it. A payload that does not decode is a permanent failure whose
/// `last_error` says why.
///
/// ```
/// use backstop_core::{HandlerError, JsonHandler, Task};
///
/// #[derive(serde::Deserialize)]
/// struct Pay { order_id: u64 }
///
/// struct PayHandler;
///
/// #[backstop_core::async_trait]
/// impl JsonHandler for PayHandler {
///     type Payload = Pay;
///     async fn handle(&self, pay: Pay, _task: &Task) -> Result<(), HandlerError> {
///         println!("paying order {}", pay.order_id);
///         Ok(())
///     }
/// }
/// let _h = backstop_core::Json(PayHandler);
/// ```
#[async_trait]
pub trait JsonHandler: Send + Sync + 'static {
    /// The payload type.
    type Payload: DeserializeOwned + Send + Sync;

    /// Do the work.
    async fn handle(
        &self,
        payload: Self::Payload,
        task: &Task,
    ) -> std::result::Result<(), HandlerError>;

    /// See [`Handler::pre_check_skip`].
    async fn pre_check_skip(
        &self,
        _payload: &Self::Payload,
        _task: &Task,
    ) -> std::result::Result<bool, HandlerError> {
        Ok(false)
    }
}

/// Adapts a [`JsonHandler`] into a [`Handler`].
pub struct Json<H>(pub H);

fn decode<P: DeserializeOwned>(task: &Task) -> std::result::Result<P, HandlerError> {
    serde_json::from_str(&task.payload).map_err(|e| {
        HandlerError::fail(format!(
            "payload does not decode as {}: {e}",
            std::any::type_name::<P>()
        ))
    })
}

#[async_trait]
impl<H: JsonHandler> Handler for Json<H> {
    async fn handle(&self, task: &Task) -> std::result::Result<(), HandlerError> {
        let payload = decode::<H::Payload>(task)?;
        self.0.handle(payload, task).await
    }

    async fn pre_check_skip(&self, task: &Task) -> std::result::Result<bool, HandlerError> {
        let payload = decode::<H::Payload>(task)?;
        self.0.pre_check_skip(&payload, task).await
    }
}

/// A handler made of an async closure taking the task by value.
///
/// ```
/// use backstop_core::{handler_fn, HandlerError, Task};
/// let h = handler_fn(|task: Task| async move {
///     println!("running {}", task.biz_key);
///     Ok::<_, HandlerError>(())
/// });
/// # let _ = h;
/// ```
pub fn handler_fn<F, Fut>(f: F) -> FnHandler<F, Fut>
where
    F: Fn(Task) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = std::result::Result<(), HandlerError>> + Send + 'static,
{
    FnHandler(f, PhantomData)
}

/// See [`handler_fn`].
pub struct FnHandler<F, Fut>(F, PhantomData<fn() -> Fut>);

#[async_trait]
impl<F, Fut> Handler for FnHandler<F, Fut>
where
    F: Fn(Task) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = std::result::Result<(), HandlerError>> + Send + 'static,
{
    async fn handle(&self, task: &Task) -> std::result::Result<(), HandlerError> {
        (self.0)(task.clone()).await
    }
}

/// A handler for a [kind](crate::TaskKind) from an async closure over the decoded
/// payload and the attempt's [`Context`](crate::Context) (the task is `cx.task()`):
/// register it with [`EngineBuilder::kind`](crate::EngineBuilder::kind).
/// A payload that does not decode as `K` fails the task permanently (retrying cannot fix
/// it).
///
/// ```
/// use backstop_core::{kind_fn, Context, HandlerError, TaskKind};
///
/// #[derive(serde::Serialize, serde::Deserialize)]
/// struct Ship { order_id: u64 }
/// impl TaskKind for Ship {
///     const EVENT_TYPE: &'static str = "SHIP";
///     fn biz_key(&self) -> String { self.order_id.to_string() }
/// }
///
/// let handler = kind_fn(|ship: Ship, cx: Context| async move {
///     println!("shipping order {} (attempt {})", ship.order_id, cx.task().attempts);
///     Ok::<_, HandlerError>(())
/// });
/// # let _ = handler;
/// ```
pub fn kind_fn<K, F, Fut>(f: F) -> KindFn<K, F, Fut>
where
    K: crate::kind::TaskKind,
    F: Fn(K, super::Context) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = std::result::Result<(), HandlerError>> + Send + 'static,
{
    KindFn(f, PhantomData)
}

/// See [`kind_fn`].
pub struct KindFn<K, F, Fut>(F, PhantomData<fn(K) -> Fut>);

#[async_trait]
impl<K, F, Fut> JsonHandler for KindFn<K, F, Fut>
where
    K: crate::kind::TaskKind,
    F: Fn(K, super::Context) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = std::result::Result<(), HandlerError>> + Send + 'static,
{
    type Payload = K;

    async fn handle(&self, payload: K, task: &Task) -> std::result::Result<(), HandlerError> {
        let cx = super::Context::current().ok_or_else(|| {
            HandlerError::fail(format!(
                "task {}: a kind handler runs inside an engine's attempt",
                task.id
            ))
        })?;
        (self.0)(payload, cx).await
    }
}

/// How one event type runs. Start from `Default` and use the setters (see
/// [`EngineConfig`](crate::EngineConfig) for the style every options type follows).
///
/// ```
/// use std::time::Duration;
/// use backstop_core::{HandlerOptions, RetryPolicy};
///
/// let options = HandlerOptions::default()
///     .concurrency(8)
///     .retry(RetryPolicy::fixed(3, Duration::from_secs(30)));
/// assert_eq!(options.queue_capacity, 64); // the default
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct HandlerOptions {
    /// The retry policy of tasks made with [`Engine::task`](crate::Engine::task) (and so
    /// [`Engine::enqueue`](crate::Engine::enqueue) of such tasks). A task's row keeps the
    /// policy it was enqueued with; that stored policy is what its retries follow.
    pub retry: RetryPolicy,
    /// How many tasks of this type run at once (default 4).
    pub concurrency: usize,
    /// How many more may wait for a free runner (default 64). When runners and queue are
    /// full, new tasks are not taken: a run-ahead is rejected (the task stays pending for
    /// the poller) and the poller claims only up to the free capacity.
    pub queue_capacity: usize,
    /// How long one attempt may run before it is abandoned and retried (default 60 s).
    pub timeout: Duration,
    /// How many snoozes ([`HandlerError::snooze`]) give their attempt back over a task's
    /// life (default 100, at most 1 000 000); the ones past it spend an attempt.
    pub max_snoozes: u32,
}

impl Default for HandlerOptions {
    fn default() -> Self {
        Self {
            retry: RetryPolicy::default(),
            concurrency: 4,
            queue_capacity: 64,
            timeout: Duration::from_secs(60),
            max_snoozes: 100,
        }
    }
}

impl HandlerOptions {
    crate::driver::setters! {
        /// See [`retry`](Self::retry).
        retry: RetryPolicy,
        /// See [`concurrency`](Self::concurrency).
        concurrency: usize,
        /// See [`queue_capacity`](Self::queue_capacity).
        queue_capacity: usize,
        /// See [`timeout`](Self::timeout).
        timeout: Duration,
        /// See [`max_snoozes`](Self::max_snoozes).
        max_snoozes: u32,
    }

    pub(crate) fn validate(&self, event_type: &str) -> Result<()> {
        const OP: &str = "register_handler";
        self.retry.validate(OP)?;
        if self.concurrency == 0 || self.concurrency > 10_000 {
            return Err(Error::config(
                OP,
                format!(
                    "{event_type}: concurrency must be 1 to 10000, got {}",
                    self.concurrency
                ),
            ));
        }
        if self.queue_capacity > 1_000_000 {
            return Err(Error::config(
                OP,
                format!(
                    "{event_type}: queue_capacity must be at most 1000000, got {}",
                    self.queue_capacity
                ),
            ));
        }
        if self.max_snoozes > 1_000_000 {
            return Err(Error::config(
                OP,
                format!(
                    "{event_type}: max_snoozes must be at most 1000000, got {}",
                    self.max_snoozes
                ),
            ));
        }
        if self.timeout.is_zero() {
            return Err(Error::config(
                OP,
                format!("{event_type}: timeout must be positive"),
            ));
        }
        Ok(())
    }
}
