//! The context of a running attempt: its task, its cancellation signal, the application's
//! shared state, its lease, and its completion inside the handler's own transaction.

use std::any::{Any, TypeId};
use std::collections::HashMap;
use std::fmt;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use tokio::sync::watch;

use super::handler::HandlerError;
use super::tracker::LeaseSignal;
use super::State;
use crate::model::{Lease, Task};
use crate::store::TaskStore;

/// Values the application shares with its handlers, one per type (see
/// [`EngineBuilder::state`](crate::EngineBuilder::state)).
#[derive(Default, Clone)]
pub(crate) struct States(HashMap<TypeId, Arc<dyn Any + Send + Sync>>);

impl States {
    pub fn insert<T: Send + Sync + 'static>(&mut self, value: T) {
        self.0.insert(TypeId::of::<T>(), Arc::new(value));
    }
}

/// What an attempt can ask of its engine: run tasks it enqueued ahead of the poller,
/// after their commit (a saga step's next steps).
#[async_trait::async_trait]
pub(crate) trait Ahead: Send + Sync {
    /// [`Engine::run_now`](crate::Engine::run_now) of `enqueued`: best effort.
    async fn run_now(&self, enqueued: &crate::model::Enqueued);

    /// `n` places in the executor of `event_type`, for tasks to be claimed by a write
    /// about to run (a step's report claiming the next steps); `None` when the engine
    /// is stopping, does not run the type, or has not that much room.
    fn reserve(&self, event_type: &str, n: usize) -> Option<super::Reserved>;

    /// Run `task`, claimed by this engine in a write that committed, in one of the
    /// places `reserved` holds; at shutdown, give it back instead.
    async fn run_claimed(&self, task: crate::model::Task, reserved: &mut super::Reserved);
}

/// Why an attempt is asked to stop (see [`Context::cancelled`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Cancelled {
    /// The attempt's lease is gone: an operator cancelled or reset the task, or it was
    /// recycled as dead and claimed again. Its outcome will be refused whatever the
    /// handler returns.
    LeaseLost,
    /// The engine is shutting down: finish or stop within
    /// [`shutdown_grace`](crate::EngineConfig::shutdown_grace), after which the attempt
    /// is interrupted and the task released for another instance.
    Shutdown,
}

impl fmt::Display for Cancelled {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Cancelled::LeaseLost => "the lease is gone (cancelled, reset or recycled)",
            Cancelled::Shutdown => "the engine is shutting down",
        })
    }
}

/// What a running attempt knows and can do. [`kind_fn`](crate::kind_fn) handlers get it
/// as an argument; any handler can reach it with [`Context::current`]. Cheap to clone.
///
/// - [`task`](Self::task): the task as claimed (attempt, lease, payload…).
/// - [`cancelled`](Self::cancelled) / [`is_cancelled`](Self::is_cancelled): a signal to
///   stop early — the lease is gone (operator cancel, reset, recycle) or the engine is
///   shutting down.
/// - [`state`](Self::state): the application's shared values (a client pool, settings),
///   registered with [`EngineBuilder::state`](crate::EngineBuilder::state).
/// - [`heartbeat`](Self::heartbeat): extend the lease now, for a long step (the engine
///   also heartbeats every [`heartbeat_interval`](crate::EngineConfig::heartbeat_interval)).
/// - Completion in the handler's own transaction: a backend's `complete_tx` records the
///   success with the handler's business writes and follow-up tasks, all or nothing (see
///   [`driver::complete_on`](crate::driver::complete_on)).
///
/// ```
/// use backstop_core::{kind_fn, Context, HandlerError, TaskKind};
/// # #[derive(serde::Serialize, serde::Deserialize)]
/// # struct Export { account: u64 }
/// # impl TaskKind for Export {
/// #     const EVENT_TYPE: &'static str = "EXPORT";
/// #     fn biz_key(&self) -> String { self.account.to_string() }
/// # }
/// struct Settings { page_size: usize }
///
/// let handler = kind_fn(|export: Export, cx: Context| async move {
///     let settings = cx.state::<Settings>()?;
///     for page in 0..10 {
///         if let Some(why) = cx.cancel_reason() {
///             return Err(HandlerError::retry(format!("stopped at page {page}: {why}")));
///         }
///         // … export one page of `settings.page_size` rows of `export.account` …
///         cx.heartbeat().await?; // a long step: keep the lease
///     }
///     Ok(())
/// });
/// # let _ = handler;
/// ```
#[derive(Clone)]
pub struct Context {
    inner: Arc<Inner>,
}

struct Inner {
    task: Arc<Task>,
    lost: Arc<LeaseSignal>,
    engine: watch::Receiver<State>,
    store: Arc<dyn TaskStore>,
    states: Arc<States>,
    ahead: Arc<dyn Ahead>,
    completed: AtomicBool,
    failed: AtomicBool,
}

impl fmt::Debug for Context {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Context")
            .field("task_id", &self.inner.task.id)
            .field("lease", &self.inner.task.lease)
            .field("cancelled", &self.cancel_reason())
            .finish()
    }
}

tokio::task_local! {
    static CURRENT: Context;
}

impl Context {
    pub(super) fn new(
        task: Arc<Task>,
        lost: Arc<LeaseSignal>,
        engine: watch::Receiver<State>,
        store: Arc<dyn TaskStore>,
        states: Arc<States>,
        ahead: Arc<dyn Ahead>,
    ) -> Context {
        Context {
            inner: Arc::new(Inner {
                task,
                lost,
                engine,
                store,
                states,
                ahead,
                completed: AtomicBool::new(false),
                failed: AtomicBool::new(false),
            }),
        }
    }

    /// Run `f` (an attempt) with this context in reach of [`Context::current`].
    pub(crate) fn scope<F: std::future::Future>(
        self,
        f: F,
    ) -> impl std::future::Future<Output = F::Output> {
        CURRENT.scope(self, f)
    }

    /// The context of the attempt this code runs in, inside a handler (not on a task the
    /// handler spawned); `None` elsewhere.
    pub fn current() -> Option<Context> {
        CURRENT.try_with(Context::clone).ok()
    }

    /// The task as claimed for this attempt.
    pub fn task(&self) -> &Task {
        &self.inner.task
    }

    /// The lease this attempt holds.
    pub fn lease(&self) -> Lease {
        self.inner.task.lease()
    }

    /// Why this attempt is asked to stop, if it is: the lease is gone (it wins: the
    /// outcome will be refused), or the engine is shutting down.
    pub fn cancel_reason(&self) -> Option<Cancelled> {
        if self.inner.lost.is_raised() {
            Some(Cancelled::LeaseLost)
        } else if *self.inner.engine.borrow() != State::Running {
            Some(Cancelled::Shutdown)
        } else {
            None
        }
    }

    /// Whether this attempt is asked to stop (see [`cancelled`](Self::cancelled)).
    pub fn is_cancelled(&self) -> bool {
        self.cancel_reason().is_some()
    }

    /// Completes when this attempt is asked to stop, with why: its lease was found gone
    /// (within a round trip of an operator's cancel announced to the engine's notifier
    /// ([`Wake::Revoked`](crate::Wake::Revoked)), else at the engine's next heartbeat or
    /// at a [`heartbeat`](Self::heartbeat) of the handler's own), or the engine began
    /// shutting down. Race long work against it.
    /// The handler is never interrupted for it before the shutdown grace runs out. A
    /// handler that stops for the shutdown returns an error: any error but a permanent
    /// one ([`HandlerError::fail`](crate::HandlerError::fail)) returned while the engine
    /// shuts down gives the task back without spending an attempt, to run again at once
    /// elsewhere.
    pub async fn cancelled(&self) -> Cancelled {
        let mut engine = self.inner.engine.clone();
        tokio::select! {
            _ = self.inner.lost.raised() => Cancelled::LeaseLost,
            _ = engine.wait_for(|s| *s != State::Running) => {
                if self.inner.lost.is_raised() {
                    Cancelled::LeaseLost
                } else {
                    Cancelled::Shutdown
                }
            }
        }
    }

    /// A value the application shared with its handlers
    /// ([`EngineBuilder::state`](crate::EngineBuilder::state)); a permanent
    /// [`HandlerError`] naming the type when none was registered (a wiring bug, which a
    /// retry cannot fix).
    pub fn state<T: Send + Sync + 'static>(&self) -> Result<&T, HandlerError> {
        self.inner
            .states
            .0
            .get(&TypeId::of::<T>())
            .and_then(|v| v.downcast_ref::<T>())
            .ok_or_else(|| {
                HandlerError::fail(format!(
                    "no shared state of type {} was registered (EngineBuilder::state)",
                    std::any::type_name::<T>()
                ))
            })
    }

    /// Extend this attempt's lease now (refresh its heartbeat), for a long step between
    /// the engine's own heartbeats. `Ok(())` while the lease holds; a retryable
    /// [`HandlerError`] when it is gone (the attempt's outcome would be refused: stop),
    /// or when the store could not be reached.
    pub async fn heartbeat(&self) -> Result<(), HandlerError> {
        let held = self
            .inner
            .store
            .heartbeat(&[self.lease()])
            .await
            .map_err(|e| HandlerError::retry(format!("heartbeat failed: {e}")))?;
        if held.first().copied().unwrap_or(false) {
            Ok(())
        } else {
            self.inner.lost.raise();
            Err(HandlerError::retry(format!("{}", Cancelled::LeaseLost)))
        }
    }

    /// Record `value` (serialized as JSON, at most
    /// [`MAX_OUTPUT_BYTES`](crate::limits::MAX_OUTPUT_BYTES)) as the task's output: stored
    /// with the task at once under this attempt's lease, shown by `backstop tasks show`
    /// and the console, read as [`Task::output`]. A later call (or a later attempt's)
    /// replaces it; a retry or a reset keeps it until then.
    ///
    /// A permanent [`HandlerError`] when the value does not serialize or is too large (a
    /// bug a retry cannot fix); a retryable one when the lease is gone (stop: the
    /// attempt's outcome would be refused) or the store could not be reached.
    ///
    /// ```
    /// # use backstop_core::{kind_fn, Context, HandlerError, TaskKind};
    /// # #[derive(serde::Serialize, serde::Deserialize)]
    /// # struct Mailing { id: u64 }
    /// # impl TaskKind for Mailing {
    /// #     const EVENT_TYPE: &'static str = "MAILING";
    /// #     fn biz_key(&self) -> String { self.id.to_string() }
    /// # }
    /// let handler = kind_fn(|mailing: Mailing, cx: Context| async move {
    ///     // … send mailing `mailing.id` …
    ///     cx.record_output(&serde_json::json!({"sent": 42, "bounced": 1})).await?;
    ///     Ok::<(), HandlerError>(())
    /// });
    /// # let _ = handler;
    /// ```
    pub async fn record_output<T: serde::Serialize + ?Sized>(
        &self,
        value: &T,
    ) -> Result<(), HandlerError> {
        let json = serde_json::to_string(value)
            .map_err(|e| HandlerError::fail(format!("the output does not serialize: {e}")))?;
        let held = self
            .inner
            .store
            .set_output(self.lease(), &json)
            .await
            .map_err(|e| {
                if e.kind() == crate::ErrorKind::InvalidInput {
                    HandlerError::fail(e.to_string())
                } else {
                    HandlerError::retry(format!("recording the output failed: {e}"))
                }
            })?;
        if held {
            Ok(())
        } else {
            self.inner.lost.raise();
            Err(HandlerError::retry(format!("{}", Cancelled::LeaseLost)))
        }
    }

    /// Whether the handler completed the task in its own transaction.
    pub(crate) fn is_completed(&self) -> bool {
        self.inner.completed.load(Ordering::SeqCst)
    }

    /// Record that the handler failed the task in its own transaction (a saga step out
    /// of attempts), so the engine does not mark it.
    pub(crate) fn set_failed_in_tx(&self) {
        self.inner.failed.store(true, Ordering::SeqCst);
    }

    /// Whether the handler failed the task in its own transaction.
    pub(crate) fn is_failed_in_tx(&self) -> bool {
        self.inner.failed.load(Ordering::SeqCst)
    }

    /// Run `enqueued` (committed) ahead of the poller, on this attempt's engine.
    pub(crate) async fn run_ahead(&self, enqueued: &crate::model::Enqueued) {
        self.inner.ahead.run_now(enqueued).await;
    }

    /// [`Ahead::reserve`] on this attempt's engine.
    pub(crate) fn reserve(&self, event_type: &str, n: usize) -> Option<super::Reserved> {
        self.inner.ahead.reserve(event_type, n)
    }

    /// [`Ahead::run_claimed`] on this attempt's engine.
    pub(crate) async fn run_claimed(
        &self,
        task: crate::model::Task,
        reserved: &mut super::Reserved,
    ) {
        self.inner.ahead.run_claimed(task, reserved).await;
    }

    /// The store the attempt's engine runs on.
    pub(crate) fn store(&self) -> &Arc<dyn TaskStore> {
        &self.inner.store
    }
}

/// A handler completes its attempt on its own transaction (a backend's `complete_tx`,
/// [`Transactional::complete_in`](crate::Transactional::complete_in)): the engine then
/// does not mark it again.
impl crate::driver::Attempt for Context {
    fn lease(&self) -> Lease {
        Context::lease(self)
    }

    fn set_completed(&self) {
        self.inner.completed.store(true, Ordering::SeqCst);
    }
}
