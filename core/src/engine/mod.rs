//! The engine: run ahead after commit, a poller as the safety net, isolated executors.
//!
//! ```no_run
//! # async fn demo<S: backstop_core::TaskStore + Clone>(store: S) -> backstop_core::Result<()> {
//! use backstop_core::{handler_fn, Engine, HandlerError, HandlerOptions, NewTask, Task};
//!
//! let engine = Engine::builder(store)
//!     .handler(
//!         "SEND_EMAIL",
//!         handler_fn(|task: Task| async move {
//!             println!("sending mail for {}", task.biz_key);
//!             Ok::<_, HandlerError>(())
//!         }),
//!         HandlerOptions::default().concurrency(8),
//!     )
//!     .start()?;
//! // after the caller's commit (or with the convenience that enqueues first):
//! let (enqueued, run) = engine.enqueue(engine.task("SEND_EMAIL", "order-42")).await?;
//! // ...
//! engine.shutdown().await;
//! # Ok(()) }
//! ```

mod ahead;
mod attempt;
mod claimed;
mod completer;
mod config;
mod context;
mod counters;
mod drain;
mod executor;
mod handler;
mod keys;
mod lag;
mod loops;
mod periodic;
mod reconcile;
mod retention;
mod saga;
mod tracker;

use std::collections::{BTreeSet, HashMap};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use tokio::sync::{watch, Notify, Semaphore};
use tokio::task::JoinHandle;

use ahead::EngineAhead;
pub(crate) use ahead::Reserved;
pub use ahead::RunAhead;
pub use attempt::{is_lease_lost, lease_lost};
pub use claimed::Claimed;
pub use config::EngineConfig;
pub use context::{Cancelled, Context};
pub use counters::{describe_metrics, metric_names, BacklogGauges, BacklogReading, EngineCounters};
pub use handler::{
    handler_fn, kind_fn, ErrorAction, FnHandler, Handler, HandlerError, HandlerOptions, Json,
    JsonHandler, KindFn,
};
pub use reconcile::{Finding, Reconciler, Resolution};
pub use saga::{SagaSteps, StepContext, StepError};

use crate::error::{BoxError, Error, Result};
use crate::limits;
use crate::model::{Enqueued, NewTask, Owner, Task};
use crate::notify::{Notifier, Wake};
use crate::store::TaskStore;
use counters::Counters;
use executor::Executor;
use tracker::{ClaimGuard, Tracker};

/// Sees finished tasks (succeeded, failed, cancelled: those the engine's retention
/// purges) before the retention job deletes them (to copy them to cold storage, say).
/// When it fails, nothing is deleted and the job tries again next round.
#[async_trait]
pub trait Archive: Send + Sync + 'static {
    /// Keep these tasks somewhere; they are deleted after this returns `Ok`.
    async fn archive(&self, tasks: &[Task]) -> std::result::Result<(), BoxError>;
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum State {
    Running,
    Draining,
    Stopped,
}

/// Where a dispatched task came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Origin {
    RunAhead,
    Poll,
}

struct Shared<S> {
    store: S,
    config: EngineConfig,
    owner: Owner,
    executors: HashMap<String, Arc<Executor>>,
    /// Event types in a fixed order, for fair polling.
    event_types: Vec<String>,
    /// What this instance holds and has in flight.
    tracker: Tracker,
    counters: Counters,
    state: watch::Sender<State>,
    /// Wakes the poller before its next tick; what to poll then is in `hints`.
    wake: Notify,
    /// What the next poll round covers when it was woken early.
    hints: Mutex<Hints>,
    /// When tasks this instance knows of become due (its retries, the delayed tasks it
    /// enqueued), earliest first: the poller polls their event types then, rather than
    /// at its next tick. Bounded by `MAX_DUE`; the tick covers whatever is dropped.
    due: Mutex<BTreeSet<(tokio::time::Instant, String)>>,
    /// Wakes the poller to look at `due` again (an earlier entry came in).
    due_changed: Notify,
    /// The handled event types with a global concurrency or rate limit, as the last read of the
    /// queues' settings found them (see [`EngineConfig::queue_refresh`]).
    /// Each with its rate's window, if it has a rate limit.
    limited: Mutex<HashMap<String, Option<Duration>>>,
    /// The handled event types whose last claim came back short of its limit: nothing
    /// older was due then, so a wake-up that names a task of one claims it by id
    /// ([`Wake::Task`]). A claim that comes back full takes its types out.
    drained: Mutex<std::collections::HashSet<String>>,
    /// A claim by id of a woken task is under way: the wake-ups that come meanwhile poll
    /// their types instead (polls of a type coalesce), so a stream of announcements costs
    /// at most one claim by id at a time per engine, not one per announcement.
    woken_claiming: std::sync::atomic::AtomicBool,
    /// Carries wake-ups between processes (see [`EngineBuilder::notifier`]).
    notifier: Option<Arc<dyn Notifier>>,
    archive: Option<Arc<dyn Archive>>,
    /// The inbox's purge and its retention (see [`EngineBuilder::inbox_retention`]).
    inbox_purge: Option<(Duration, retention::InboxPurge)>,
    /// Marks on their way to the completion flushers.
    completions: completer::Queue,
    /// The limited types' hand-overs in flight, and the marks waiting for them.
    lanes: completer::Lanes,
    /// Set when a heartbeat failed (the store was unreachable), cleared when one of this
    /// instance's lease refreshes succeeds: until then its leases may be older than
    /// `dead_after`, and its own sweep must refresh them before it recycles anything.
    leases_unrefreshed: std::sync::atomic::AtomicBool,
    /// Set with `leases_unrefreshed`, cleared only by the sweep once it has given every
    /// instance a heartbeat interval to refresh: a heartbeat that succeeds first clears
    /// `leases_unrefreshed`, and the sweep must still wait (see `loops::recycler`).
    outage_seen: std::sync::atomic::AtomicBool,
    /// When the last heartbeat of this instance's leases that the store applied began:
    /// every lease held then was fresh at that time.
    last_refreshed: Mutex<Option<std::time::Instant>>,
    /// How long the store lately took to answer this instance's refreshes and sweeps:
    /// the sweep widens `dead_after` by it (see `lag`).
    lag: lag::StoreLag,
    /// One refresh of this instance's leases at a time: the heartbeat loop's and the
    /// sweep's (after an outage or a stall) would otherwise lock the same rows at once.
    refreshing: tokio::sync::Mutex<()>,
    /// The store, for the handlers' contexts.
    dyn_store: Arc<dyn TaskStore>,
    /// The application's shared values (see [`EngineBuilder::state`]).
    states: Arc<context::States>,
    /// The periodic tasks this instance fires.
    periodic: periodic::Periodics,
}

/// Event types the poller was asked to poll before its next tick.
#[derive(Debug, Default)]
struct Hints {
    /// Every event type (`poll_now`, recycled tasks, a listener's reconnect).
    all: bool,
    /// Only these (wake-ups from the notifier); handled types only.
    types: BTreeSet<String>,
}

/// Most due times an engine remembers (see `Shared::due`).
const MAX_DUE: usize = 1024;

/// How long after a remembered due time the poller polls for it.
const DUE_SLACK: Duration = Duration::from_millis(25);

/// How long [`Engine::shutdown`] waits for a background job (poller, sweeps, retention,
/// clock, listener) to end once stopped, before aborting it.
const JOB_STOP_WAIT: Duration = Duration::from_secs(5);

impl<S: TaskStore + Clone> Shared<S> {
    /// Act on a wake-up from the notifier: poll its event type now, if handled here;
    /// check the lease of a revoked task this instance runs.
    fn woken(self: &Arc<Self>, wake: Wake) {
        match wake {
            Wake::All => self.wake_all(),
            Wake::EventType(t) => {
                if !self.executors.contains_key(&t) {
                    return;
                }
                self.counters.wakeups(&t);
                self.poll_type(t);
            }
            Wake::Task { id, event_type: t } => {
                if !self.executors.contains_key(&t) {
                    return;
                }
                self.counters.wakeups(&t);
                let runtime = tokio::runtime::Handle::try_current();
                match runtime {
                    Ok(runtime)
                        if self.is_drained(&t)
                            && !self.is_limited(&t)
                            && !self
                                .woken_claiming
                                .swap(true, std::sync::atomic::Ordering::AcqRel) =>
                    {
                        runtime.spawn(Arc::clone(self).claim_woken(id, t));
                    }
                    _ => self.poll_type(t),
                }
            }
            Wake::Revoked(id) => {
                let Some(lease) = self.tracker.running_lease(id) else {
                    return; // not running here: nothing to tell
                };
                let Ok(runtime) = tokio::runtime::Handle::try_current() else {
                    return; // a notifier calling from outside any runtime: the heartbeat tells
                };
                runtime.spawn(loops::check_lease(Arc::clone(self), lease));
            }
        }
    }
}

impl<S> Shared<S> {
    fn state(&self) -> State {
        *self.state.borrow()
    }

    /// Poll `event_type` when `after` has passed: a task of it this instance knows of
    /// becomes due then. Only for types handled here, and only when sooner than the next
    /// tick could matter (the tick polls every type anyway).
    fn wake_after(&self, after: Duration, event_type: &str) {
        if after >= self.config.poll_interval || !self.executors.contains_key(event_type) {
            return;
        }
        // a little after: callers arm it once the mark (or insert) that set the due time
        // is applied; the slack covers the database's clock and rounding
        let at = tokio::time::Instant::now() + after + DUE_SLACK;
        let mut due = self.due.lock().unwrap_or_else(|p| p.into_inner());
        if due.len() >= MAX_DUE {
            match due.last() {
                Some((last, _)) if *last > at => {
                    due.pop_last();
                }
                _ => return,
            }
        }
        let earliest = due.first().is_none_or(|(first, _)| at < *first);
        due.insert((at, event_type.to_owned()));
        drop(due);
        if earliest {
            self.due_changed.notify_one();
        }
    }

    /// The earliest remembered due time.
    fn next_due(&self) -> Option<tokio::time::Instant> {
        let due = self.due.lock().unwrap_or_else(|p| p.into_inner());
        due.first().map(|(at, _)| *at)
    }

    /// The event types whose remembered due time has come; forgets them.
    fn take_due(&self) -> BTreeSet<String> {
        let now = tokio::time::Instant::now();
        let mut due = self.due.lock().unwrap_or_else(|p| p.into_inner());
        let mut types = BTreeSet::new();
        while due.first().is_some_and(|(at, _)| *at <= now) {
            if let Some((_, t)) = due.pop_first() {
                types.insert(t);
            }
        }
        types
    }

    /// Poll every event type now.
    fn wake_all(&self) {
        self.hints.lock().unwrap_or_else(|p| p.into_inner()).all = true;
        self.wake.notify_one();
    }

    /// Poll `event_type` (handled here) now, in an early round.
    fn poll_type(&self, event_type: String) {
        let mut hints = self.hints.lock().unwrap_or_else(|p| p.into_inner());
        if !hints.all {
            hints.types.insert(event_type);
        }
        drop(hints);
        self.wake.notify_one();
    }

    /// Whether the last claim of `event_type` came back short (see `drained`).
    fn is_drained(&self, event_type: &str) -> bool {
        let drained = self.drained.lock().unwrap_or_else(|p| p.into_inner());
        drained.contains(event_type)
    }

    /// A claim of `types` came back short of its limit (`drained`) or full.
    fn claimed_types(&self, types: &[String], drained: bool) {
        let mut set = self.drained.lock().unwrap_or_else(|p| p.into_inner());
        for t in types {
            if drained {
                if !set.contains(t) {
                    set.insert(t.clone());
                }
            } else {
                set.remove(t);
            }
        }
    }

    /// Whether `event_type` has a global concurrency limit, as far as this instance
    /// knows (see [`EngineConfig::queue_refresh`]).
    fn is_limited(&self, event_type: &str) -> bool {
        let limited = self.limited.lock().unwrap_or_else(|p| p.into_inner());
        !limited.is_empty() && limited.contains_key(event_type)
    }

    /// The window of `event_type`'s rate limit, as far as this instance knows.
    fn rate_window(&self, event_type: &str) -> Option<Duration> {
        let limited = self.limited.lock().unwrap_or_else(|p| p.into_inner());
        limited.get(event_type).copied().flatten()
    }

    /// A task of `event_type` ended here (its outcome applied, or never to be): if the
    /// type is limited, poll it again, for the room the task left (a type without a limit
    /// is polled when its executor has room, as always).
    fn slot_left(&self, event_type: &str) {
        if self.is_limited(event_type) {
            self.poll_type(event_type.to_owned());
        }
    }

    /// What an early poll round covers; clears the hints.
    fn take_hints(&self) -> Hints {
        std::mem::take(&mut *self.hints.lock().unwrap_or_else(|p| p.into_inner()))
    }

    /// Start a claim (a poll's `claim_batch`, a run-ahead's `claim_by_id`), or `None` when
    /// the engine is no longer running. The claim counts as in flight until the guard is
    /// dropped, after its tasks are dispatched, so `shutdown` waits for a claim that was
    /// on its way to the database when it began: what that claim returns is released
    /// through the flushers, which are still running, instead of staying running until
    /// `dead_after`.
    fn begin_claim(&self) -> Option<ClaimGuard<'_>> {
        // counted before the state is read (see `Tracker::claim`)
        let guard = self.tracker.claim();
        (self.state() == State::Running).then_some(guard)
    }
}

/// Builds an [`Engine`]: register one handler per event type, then [`start`](Self::start).
pub struct EngineBuilder<S> {
    store: S,
    config: EngineConfig,
    handlers: Vec<(String, Arc<dyn Handler>, HandlerOptions)>,
    archive: Option<Arc<dyn Archive>>,
    inbox_purge: Option<(Duration, retention::InboxPurge)>,
    notifier: Option<Arc<dyn Notifier>>,
    states: context::States,
    periodic: Vec<crate::schedule::Periodic>,
    /// The first registration refused (a saga whose code does not match its
    /// definition), reported by [`start`](Self::start).
    refused: Option<Error>,
}

impl<S: TaskStore + Clone> EngineBuilder<S> {
    /// Use these settings.
    pub fn config(mut self, config: EngineConfig) -> Self {
        self.config = config;
        self
    }

    /// Run tasks of `event_type` with `handler`, under `options`.
    pub fn handler(
        mut self,
        event_type: impl Into<String>,
        handler: impl Handler,
        options: HandlerOptions,
    ) -> Self {
        self.handlers
            .push((event_type.into(), Arc::new(handler), options));
        self
    }

    /// Register the handler of [kind](crate::TaskKind) `H::Payload`: its event type and
    /// retry policy come from the kind (`options.retry` is replaced by
    /// [`TaskKind::retry`](crate::TaskKind::retry), so the handler and the tasks cannot
    /// disagree), the payload is decoded as the kind (a payload that does not decode
    /// fails the task permanently), and the kind becomes known to the process (tasks of
    /// its event type built by name get its policy).
    ///
    /// ```
    /// use backstop_core::{kind_fn, Context, Engine, HandlerError, HandlerOptions, TaskKind};
    /// # #[derive(serde::Serialize, serde::Deserialize)]
    /// # struct Ship { order_id: u64 }
    /// # impl TaskKind for Ship {
    /// #     const EVENT_TYPE: &'static str = "SHIP";
    /// #     fn biz_key(&self) -> String { self.order_id.to_string() }
    /// # }
    /// # fn demo<S: backstop_core::TaskStore + Clone>(store: S) -> backstop_core::Result<()> {
    /// let engine = Engine::builder(store)
    ///     .kind(
    ///         kind_fn(|ship: Ship, _cx: Context| async move { Ok::<_, HandlerError>(()) }),
    ///         HandlerOptions::default().concurrency(8),
    ///     )
    ///     .start()?;
    /// # Ok(()) }
    /// ```
    pub fn kind<H>(self, handler: H, options: HandlerOptions) -> Self
    where
        H: JsonHandler,
        H::Payload: crate::kind::TaskKind,
    {
        use crate::kind::TaskKind;
        crate::register_kind::<H::Payload>();
        let options = options.retry(<H::Payload as TaskKind>::retry());
        self.handler(<H::Payload as TaskKind>::EVENT_TYPE, Json(handler), options)
    }

    /// Run the steps of the sagas of `def` with `steps` (an action per step, a
    /// compensation per compensated step), under `options` (concurrency, queue, the
    /// attempt timeout of steps without their own; the retries are each step's). The
    /// steps' tasks are of the event type [`SagaDef::event_type`](crate::SagaDef::event_type).
    ///
    /// Each step's task runs its code, then reports in one transaction
    /// ([`TaskStore::saga_step_many`]): its completion, its output and the next steps' tasks.
    /// A refusal ([`StepError::refuse`]) compensates the done steps in reverse order; a
    /// technical failure retries the step, and parks the saga when the attempts run out.
    /// [`start`](Self::start) refuses (`Config`) steps that do not match `def`.
    ///
    /// The saga's reconciler fires on every instance that registers it, once per tick
    /// (a periodic task, [`SagaDef::reconciler_name`](crate::SagaDef::reconciler_name),
    /// every [`stuck_after`](crate::SagaDef::stuck_after) or deadline, at most a minute):
    /// it parks the sagas past their [`deadline`](crate::SagaDef::deadline) for an
    /// operator, and nudges those whose row has not changed for `stuck_after`
    /// ([`TaskStore::nudge_saga`]): a lost or deleted step task comes back.
    ///
    /// ```
    /// use backstop_core::{Engine, HandlerOptions, SagaDef, SagaStep, SagaSteps, StepError};
    /// # fn demo<S: backstop_core::TaskStore + Clone>(store: S) -> backstop_core::Result<()> {
    /// let order = SagaDef::builder("order")
    ///     .step(SagaStep::new("stock").compensated())
    ///     .step(SagaStep::new("pay"))
    ///     .build()?;
    /// let steps = SagaSteps::new()
    ///     .action("stock", |_cx| async { Ok(7) })
    ///     .compensation("stock", |_cx| async { Ok(()) })
    ///     .action("pay", |cx| async move {
    ///         let reserved: u32 = cx.output("stock").await?;
    ///         if reserved > 5 {
    ///             return Err(StepError::refuse("over the card's limit"));
    ///         }
    ///         Ok(())
    ///     });
    /// let engine = Engine::builder(store)
    ///     .saga(order, steps, HandlerOptions::default())
    ///     .start()?;
    /// # Ok(()) }
    /// ```
    pub fn saga(mut self, def: crate::SagaDef, steps: SagaSteps, options: HandlerOptions) -> Self {
        if let Err(e) = steps.check(&def) {
            self.refused.get_or_insert(e);
            return self;
        }
        let reconciler = match saga::reconciler(&def) {
            Ok(periodic) => periodic,
            Err(e) => {
                self.refused.get_or_insert(e);
                return self;
            }
        };
        let event_type = def.event_type().to_owned();
        let runner = saga::SagaRunner::new(def, steps, options.timeout);
        self.periodic(reconciler)
            .handler(event_type, runner, options)
    }

    /// Run reconciler `name` (a saga's name rules) every `every`: its scan on each tick
    /// (once per tick whatever the number of instances), then the resolution of each
    /// finding as a task of the event type `reconcile:<name>`, under `options` (its
    /// retry policy, timeout, concurrency). See [`Reconciler`] for the findings'
    /// deduplication and the operator items. A bad name or interval refuses
    /// [`start`](Self::start).
    pub fn reconciler(
        mut self,
        name: &str,
        every: std::time::Duration,
        reconciler: impl Reconciler,
        options: HandlerOptions,
    ) -> Self {
        match reconcile::register(name, every, reconciler, options.retry) {
            Ok((runner, periodic)) => {
                let event_type = reconcile::event_type(name);
                self.periodic(periodic).handler(event_type, runner, options)
            }
            Err(e) => {
                self.refused.get_or_insert(e);
                self
            }
        }
    }

    /// Fire `periodic` on its schedule from this engine (see [`Periodic`](crate::Periodic)):
    /// register it on every instance that may fire it; each tick is enqueued once
    /// whatever the number of instances. Its event type needs a handler somewhere in the
    /// fleet, not necessarily here.
    pub fn periodic(mut self, periodic: crate::schedule::Periodic) -> Self {
        self.periodic.push(periodic);
        self
    }

    /// Share `value` with every handler: [`Context::state::<T>()`](Context::state) returns
    /// it (one value per type; a second of the same type replaces the first). For what a
    /// handler needs beside its payload: a client pool, settings, a mailer.
    ///
    /// ```
    /// # fn demo<S: backstop_core::TaskStore + Clone>(store: S) {
    /// struct Mailer { host: String }
    /// let builder = backstop_core::Engine::builder(store)
    ///     .state(Mailer { host: "smtp.example.com".into() });
    /// # let _ = builder;
    /// # }
    /// ```
    pub fn state<T: Send + Sync + 'static>(mut self, value: T) -> Self {
        self.states.insert(value);
        self
    }

    /// Listen to `notifier` for tasks committed by other processes (start them within
    /// milliseconds instead of at the next poll), and announce through it the tasks this
    /// engine enqueues but does not run itself (no handler here, executor full).
    ///
    /// The poller stays the safety net: a lost wake-up costs latency, never a task, and
    /// the engine polls every event type after the listener reconnects. See
    /// [`Notifier`] for the contract and the notifiers backstop ships.
    pub fn notifier(mut self, notifier: impl Notifier) -> Self {
        self.notifier = Some(Arc::new(notifier));
        self
    }

    /// Let `archive` see finished tasks before the retention job deletes them.
    pub fn archive(mut self, archive: impl Archive) -> Self {
        self.archive = Some(Arc::new(archive));
        self
    }

    /// Validate everything and start the poller, heartbeat and retention jobs on the
    /// current tokio runtime. Errors are `Config`: a bad setting, a duplicate or invalid
    /// event type, no handler at all.
    pub fn start(self) -> Result<Engine<S>> {
        const OP: &str = "start_engine";
        if let Some(e) = self.refused {
            return Err(e);
        }
        self.config.validate()?;
        if self.handlers.is_empty() {
            return Err(Error::config(OP, "register at least one handler"));
        }
        let mut executors = HashMap::new();
        for (event_type, handler, options) in self.handlers {
            limits::check_event_type(OP, &event_type)
                .map_err(|e| Error::config(OP, e.message()))?;
            options.validate(&event_type)?;
            if executors.contains_key(&event_type) {
                return Err(Error::config(
                    OP,
                    format!("two handlers for event type {event_type:?}"),
                ));
            }
            let exec = Executor {
                event_type: event_type.clone(),
                event_type_arc: Arc::from(event_type.as_str()),
                handler,
                slots: Arc::new(Semaphore::new(options.concurrency + options.queue_capacity)),
                runners: Arc::new(Semaphore::new(options.concurrency)),
                options,
            };
            executors.insert(event_type, Arc::new(exec));
        }
        let mut event_types: Vec<String> = executors.keys().cloned().collect();
        event_types.sort();
        let mut names = std::collections::HashSet::new();
        for p in &self.periodic {
            p.validate(limits::MAX_PAYLOAD_LIMIT)?;
            if !names.insert(p.name().to_owned()) {
                return Err(Error::config(
                    OP,
                    format!("two periodic tasks named {:?}", p.name()),
                ));
            }
        }
        if let Some((age, _)) = &self.inbox_purge {
            limits::check_duration(OP, "inbox_retention", *age)
                .map_err(|e| Error::config(OP, e.message()))?;
        }
        let runtime = tokio::runtime::Handle::try_current().map_err(|_| {
            Error::config(OP, "Engine::start must be called within a tokio runtime")
        })?;
        let owner = self.config.owner.clone().unwrap_or_else(Owner::generate);
        let (completions, completion_rx) = tokio::sync::mpsc::unbounded_channel();
        let max_unmarked = self.config.max_unmarked;
        let lag = lag::StoreLag::new(self.config.dead_after);
        let dyn_store: Arc<dyn TaskStore> = Arc::new(self.store.clone());
        let shared = Arc::new(Shared {
            dyn_store,
            states: Arc::new(self.states),
            periodic: periodic::Periodics::new(
                self.periodic,
                chrono::Utc::now(),
                self.config.retention,
            ),
            store: self.store,
            config: self.config,
            owner,
            executors,
            event_types,
            tracker: Tracker::new(max_unmarked),
            counters: Counters::default(),
            state: watch::Sender::new(State::Running),
            wake: Notify::new(),
            hints: Mutex::new(Hints::default()),
            drained: Mutex::default(),
            woken_claiming: std::sync::atomic::AtomicBool::new(false),
            due: Mutex::new(BTreeSet::new()),
            due_changed: Notify::new(),
            limited: Mutex::new(HashMap::new()),
            notifier: self.notifier,
            archive: self.archive,
            inbox_purge: self.inbox_purge,
            completions,
            lanes: completer::Lanes::default(),
            leases_unrefreshed: std::sync::atomic::AtomicBool::new(false),
            outage_seen: std::sync::atomic::AtomicBool::new(false),
            // vacuously true at the start; without it, an instance whose first
            // heartbeat stalled took its own first leases for dead (its sweep saw no
            // refresh to be late)
            last_refreshed: Mutex::new(Some(std::time::Instant::now())),
            lag,
            refreshing: tokio::sync::Mutex::new(()),
        });
        let flushers = completer::spawn(&runtime, &shared, completion_rx);
        let mut jobs = vec![
            runtime.spawn(loops::poller(Arc::clone(&shared))),
            runtime.spawn(loops::recycler(Arc::clone(&shared))),
            runtime.spawn(loops::heartbeats(Arc::clone(&shared))),
        ];
        if retention::needed(&shared.config, shared.inbox_purge.is_some()) {
            jobs.push(runtime.spawn(retention::retention(Arc::clone(&shared))));
        }
        jobs.push(runtime.spawn(periodic::scheduler(Arc::clone(&shared))));
        if shared.notifier.is_some() {
            jobs.push(runtime.spawn(loops::listener(Arc::clone(&shared))));
        }
        tracing::info!(
            owner = %shared.owner,
            event_types = ?shared.event_types,
            "backstop engine started"
        );
        Ok(Engine {
            inner: Arc::new(EngineInner {
                shared,
                jobs: Mutex::new(jobs),
                flushers: Mutex::new(flushers),
            }),
        })
    }
}

impl<S: TaskStore + Clone + crate::Inbox> EngineBuilder<S> {
    /// Purge the store's inbox ([`Inbox::purge_inbox`](crate::Inbox::purge_inbox)) of
    /// rows older than `age` with the engine's other retention (every
    /// [`purge_interval`](EngineConfig::purge_interval)): for an inbox used without a
    /// `StreamConsumer` (which purges its own), or beside one. Keep `age` longer than any
    /// message can be delivered again: a purged row no longer stops a duplicate. At most
    /// [`MAX_INTERVAL`](crate::limits::MAX_INTERVAL) (checked when the engine starts).
    pub fn inbox_retention(mut self, age: Duration) -> Self {
        let store = self.store.clone();
        let purge: retention::InboxPurge = Arc::new(move |age, limit| {
            let store = store.clone();
            Box::pin(async move { store.purge_inbox(age, limit).await })
        });
        self.inbox_purge = Some((age, purge));
        self
    }
}

/// Runs tasks: ahead of the poller right after commit, and from the poller for everything
/// else (retries, crashes, rejections). Generic over the store, so every backend gets the
/// same behaviour. Cheap to clone; call [`shutdown`](Self::shutdown) before exit.
pub struct Engine<S> {
    inner: Arc<EngineInner<S>>,
}

impl<S> Clone for Engine<S> {
    fn clone(&self) -> Self {
        Self {
            inner: Arc::clone(&self.inner),
        }
    }
}

struct EngineInner<S> {
    shared: Arc<Shared<S>>,
    jobs: Mutex<Vec<JoinHandle<()>>>,
    /// The completion flushers: they run until every in-flight task is done.
    flushers: Mutex<Vec<JoinHandle<()>>>,
}

impl<S> Drop for EngineInner<S> {
    fn drop(&mut self) {
        // Dropped without shutdown: stop the background jobs; held tasks are recycled
        // by a live instance after `dead_after`.
        self.shared.state.send_replace(State::Stopped);
        let jobs = std::mem::take(&mut *self.jobs.lock().unwrap_or_else(|p| p.into_inner()));
        let flushers =
            std::mem::take(&mut *self.flushers.lock().unwrap_or_else(|p| p.into_inner()));
        for j in jobs.into_iter().chain(flushers) {
            j.abort();
        }
    }
}

impl<S: TaskStore + Clone> Engine<S> {
    /// Start building an engine on `store`.
    pub fn builder(store: S) -> EngineBuilder<S> {
        EngineBuilder {
            store,
            config: EngineConfig::default(),
            handlers: Vec::new(),
            archive: None,
            inbox_purge: None,
            notifier: None,
            states: context::States::default(),
            periodic: Vec::new(),
            refused: None,
        }
    }

    /// The store.
    pub fn store(&self) -> &S {
        &self.inner.shared.store
    }

    /// This instance's owner name.
    pub fn owner(&self) -> &Owner {
        &self.inner.shared.owner
    }

    /// What this instance has done so far.
    pub fn counters(&self) -> EngineCounters {
        self.inner.shared.counters.snapshot()
    }

    /// A new task of `event_type` with the retry policy registered for it (the default
    /// policy when no handler is registered here).
    pub fn task(&self, event_type: &str, biz_key: impl Into<String>) -> NewTask {
        let task = NewTask::new(event_type, biz_key);
        match self.inner.shared.executors.get(event_type) {
            Some(e) => task.retry(e.options.retry),
            None => task,
        }
    }

    /// Run a task ahead of the poller, right after the caller's commit.
    ///
    /// Only a newly created task (`enqueued.created`) whose event type this instance
    /// handles is considered; it is claimed by id only if it is due (so retries and
    /// delayed tasks keep their schedule) and only when its executor has room — else it
    /// stays pending, no attempt spent, for the poller. The handler runs on the executor,
    /// never on the caller's task; this returns once the claim is made.
    ///
    /// With a [notifier](EngineBuilder::notifier), a task this instance does not take
    /// ([`RunAhead::NoHandler`], [`RunAhead::Rejected`]) is announced to the other
    /// processes, which start it within milliseconds; a failed announcement is logged and
    /// counted, never returned.
    ///
    /// **Best effort, never an error.** The task is committed: whatever happens here, the
    /// poller runs it. So a failed claim (a database blip right after the commit) is
    /// logged, counted (`backstop_store_errors_total`) and answered as
    /// [`RunAhead::Deferred`], and the caller's request, whose business rows committed,
    /// goes on. Call it after the commit and move on:
    ///
    /// ```ignore
    /// let enqueued = store.enqueue_tx(&tx, task).await?;
    /// tx.commit().await?;
    /// engine.run_now(&enqueued).await; // best effort: the poller is the safety net
    /// ```
    pub async fn run_now(&self, enqueued: &Enqueued) -> RunAhead {
        self.inner.shared.run_now(enqueued).await
    }

    /// Enqueue `task` in its own transaction, then [`run_now`](Self::run_now) — for callers
    /// without a transaction of their own. With business rows, enqueue on the backend's
    /// native transaction instead and call `run_now` after commit.
    ///
    /// A delayed task of an event type handled here is polled for when it becomes due,
    /// not at the next tick.
    pub async fn enqueue(&self, task: impl Into<NewTask>) -> Result<(Enqueued, RunAhead)> {
        let task = task.into();
        let delay = task.due_in();
        let enqueued = self.inner.shared.store.enqueue(task).await?;
        if enqueued.created {
            self.inner.shared.counters.enqueued_here();
            if !delay.is_zero() {
                self.inner.shared.wake_after(delay, &enqueued.event_type);
            }
        }
        let run = self.run_now(&enqueued).await;
        Ok((enqueued, run))
    }

    /// Enqueue `tasks` in one transaction of the store's own
    /// ([`TaskStore::enqueue_many`]: all or none, each answered as `enqueue` answers),
    /// then wake this engine's poller for the event types it handles among the new
    /// tasks due now, announce the others through the
    /// [notifier](EngineBuilder::notifier) (once per event type), and remember when the
    /// delayed ones fall due, as [`enqueue`](Self::enqueue) does.
    ///
    /// No run-ahead: a batch is what the poller's batch claims are for (one claim per
    /// [`EngineConfig::batch_size`](crate::EngineConfig::batch_size) tasks, not one per
    /// task), and the wake-up starts them at once.
    ///
    /// ```no_run
    /// # async fn demo<S: backstop_core::TaskStore + Clone>(engine: backstop_core::Engine<S>) -> backstop_core::Result<()> {
    /// use backstop_core::NewTask;
    /// let tasks: Vec<_> = (1..=1000).map(|i| NewTask::new("SEND_MAIL", format!("user-{i}"))).collect();
    /// let enqueued = engine.enqueue_many(&tasks).await?;
    /// assert_eq!(enqueued.len(), 1000);
    /// # Ok(()) }
    /// ```
    pub async fn enqueue_many(&self, tasks: &[NewTask]) -> Result<Vec<Enqueued>> {
        let shared = &self.inner.shared;
        let enqueued = shared.store.enqueue_many(tasks).await?;
        let mut due_now = BTreeSet::new();
        for (task, e) in tasks.iter().zip(&enqueued).filter(|(_, e)| e.created) {
            shared.counters.enqueued_here();
            match task.due_in() {
                d if d.is_zero() => {
                    due_now.insert(e.event_type.as_str());
                }
                d => shared.wake_after(d, &e.event_type),
            }
        }
        for event_type in due_now {
            match shared.executors.contains_key(event_type) {
                true => shared.poll_type(event_type.to_owned()),
                // another process may run them now: tell it, once per type (best
                // effort, after commit), as `enqueue` does for a task it does not run
                false => shared.announce(event_type).await,
            }
        }
        Ok(enqueued)
    }

    /// Start a saga in a transaction of the store's own ([`TaskStore::start_saga`]),
    /// then start its first group at once: this engine's poller is woken for the saga's
    /// event type when it runs the saga's steps, else the other processes are told
    /// through the [notifier](EngineBuilder::notifier). To start a saga with business
    /// writes, use [`Transactional::start_in`](crate::Transactional::start_in) and call
    /// [`poll_now`](Self::poll_now) after the commit.
    ///
    /// ```no_run
    /// # async fn demo<S: backstop_core::TaskStore + Clone>(engine: backstop_core::Engine<S>, def: backstop_core::SagaDef) -> backstop_core::Result<()> {
    /// let started = engine.start_saga(&def.start("order-42", &42)?).await?;
    /// assert!(started.created);
    /// # Ok(()) }
    /// ```
    pub async fn start_saga(&self, start: &crate::SagaStart) -> Result<crate::SagaStarted> {
        let shared = &self.inner.shared;
        let started = shared.store.start_saga(start).await?;
        if started.created {
            let event_type = format!("saga:{}", start.name());
            match shared.executors.contains_key(&event_type) {
                true => shared.poll_type(event_type),
                false => shared.announce(&event_type).await,
            }
        }
        Ok(started)
    }

    /// Ask the poller to poll now rather than at its next tick (after the first-poll delay).
    pub fn poll_now(&self) {
        self.inner.shared.wake_all();
    }

    /// Stop gracefully: stop claiming, let in-flight tasks finish within
    /// `shutdown_grace`, then interrupt the rest and release every task that did not
    /// finish (no attempt spent) so another instance runs it at once. Idempotent.
    ///
    /// Tasks not yet started (queued behind the executor's concurrency) are released at
    /// once. A claim already on its way to the database (a poll, a `run_now`) is waited
    /// for, and the tasks it returns are released the same way: nothing this instance
    /// claimed is left running for `dead_after` to recover.
    pub async fn shutdown(&self) {
        let shared = &self.inner.shared;
        shared.state.send_if_modified(|s| {
            if *s == State::Running {
                *s = State::Draining;
                true
            } else {
                false
            }
        });
        tracing::info!(owner = %shared.owner, "backstop engine draining");
        let drained =
            tokio::time::timeout(shared.config.shutdown_grace, shared.tracker.wait_idle())
                .await
                .is_ok();
        if !drained {
            tracing::warn!(
                owner = %shared.owner,
                in_flight = shared.tracker.in_flight(),
                "shutdown grace period over: interrupting and releasing in-flight tasks"
            );
        }
        shared.state.send_replace(State::Stopped);
        shared.tracker.wait_idle().await;
        // Every in-flight task has had its mark applied: the flushers have nothing left.
        let flushers = std::mem::take(
            &mut *self
                .inner
                .flushers
                .lock()
                .unwrap_or_else(|p| p.into_inner()),
        );
        for f in flushers {
            f.abort();
        }
        // The background jobs end at their next await on the state; one inside a store
        // call (a purge waiting on a lock) is given a bound, then aborted: nothing it
        // does needs finishing (a purge, a sweep, a registration is done again later).
        let jobs = std::mem::take(&mut *self.inner.jobs.lock().unwrap_or_else(|p| p.into_inner()));
        for mut j in jobs {
            if tokio::time::timeout(JOB_STOP_WAIT, &mut j).await.is_err() {
                tracing::warn!(owner = %shared.owner, "a background job did not stop within {JOB_STOP_WAIT:?}: aborted");
                j.abort();
            }
        }
        tracing::info!(owner = %shared.owner, "backstop engine stopped");
    }
}
