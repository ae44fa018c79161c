//! The engine's conformance cases: the same engine on every backend, with real
//! concurrency, short intervals and backdating instead of fixed sleeps.
//!
//! The cases live in one module per area. Every `pub async fn name<H: Harness>(ctx:
//! &Ctx<H>)` in an area module is a case: the build script (`build.rs`) registers it, so a
//! new case reaches every backend without a list to update. Helpers are private, or
//! `pub(crate)` in this module; an area file must be declared below.

pub mod attempts;
pub mod config;
pub mod context;
pub mod kinds;
pub mod leases;
pub mod order;
pub mod periodic;
pub mod poller;
pub mod retention;
pub mod run_ahead;
pub mod shutdown;
pub mod wakeups;

use std::collections::{HashMap, HashSet};
use std::future::Future;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use backstop_core::{
    handler_fn, Archive, BoxError, Engine, EngineConfig, ErrorKind, Handler, HandlerError,
    HandlerOptions, Json, JsonHandler, NewTask, Owner, RetryPolicy, RunAhead, Status, Task, TaskId,
    TaskStore,
};
use tokio::sync::Semaphore;

use crate::{chrono_dur, Ctx, Harness, TimeColumn};

pub(crate) const HOUR: Duration = Duration::from_secs(3600);

/// How long a case waits for something the engine should do within milliseconds.
pub(crate) const PATIENCE: Duration = Duration::from_secs(20);

/// Settings for tests: a poller that polls every 20 ms, starting 300 ms after start (so a
/// case's first run-ahead is not raced by the first poll), no retention.
pub(crate) fn fast_config() -> EngineConfig {
    EngineConfig::default()
        .poll_interval(Duration::from_millis(20))
        .first_poll_delay(Duration::from_millis(300))
        .dead_after(Duration::from_secs(60))
        .heartbeat_interval(Duration::from_millis(200))
        .shutdown_grace(Duration::from_secs(10))
        .retention(None)
}

/// The same, but with a poller that does not poll within a test's lifetime: whatever runs
/// ran ahead.
pub(crate) fn no_poll_config() -> EngineConfig {
    fast_config().first_poll_delay(HOUR)
}

/// Wait until `cond` holds, checking every 10 ms; panic after `PATIENCE`.
pub(crate) async fn eventually<F, Fut>(what: &str, mut cond: F)
where
    F: FnMut() -> Fut,
    Fut: Future<Output = bool>,
{
    let deadline = Instant::now() + PATIENCE;
    loop {
        if cond().await {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "timed out after {PATIENCE:?} waiting for: {what}"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

pub(crate) async fn wait_status<S: TaskStore>(store: &S, id: TaskId, status: Status) -> Task {
    let deadline = Instant::now() + PATIENCE;
    loop {
        let t = store.get(id).await.unwrap().unwrap();
        if t.status == status {
            return t;
        }
        assert!(
            Instant::now() < deadline,
            "timed out after {PATIENCE:?} waiting for task {id} to be {status}; it is {t:?}"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// Calls of a handler, per business key, with when they started.
#[derive(Clone, Default)]
pub(crate) struct Calls(Arc<Mutex<HashMap<String, Vec<Instant>>>>);

impl Calls {
    fn record(&self, key: &str) -> usize {
        let mut m = self.0.lock().unwrap();
        let v = m.entry(key.to_owned()).or_default();
        v.push(Instant::now());
        v.len()
    }
    fn count(&self, key: &str) -> usize {
        self.0.lock().unwrap().get(key).map_or(0, Vec::len)
    }
    fn times(&self, key: &str) -> Vec<Instant> {
        self.0.lock().unwrap().get(key).cloned().unwrap_or_default()
    }
}

/// A handler that records each call in `calls`, then runs `then(call number for this
/// business key, task)`.
pub(crate) fn recording<F, Fut>(calls: Calls, then: F) -> impl Handler
where
    F: Fn(usize, Task) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Result<(), HandlerError>> + Send + 'static,
{
    let then = Arc::new(then);
    handler_fn(move |task: Task| {
        let calls = calls.clone();
        let then = Arc::clone(&then);
        async move {
            let n = calls.record(&task.biz_key);
            then(n, task).await
        }
    })
}

/// A handler that fails its first `failures` calls per key, then succeeds.
pub(crate) fn flaky(calls: Calls, failures: usize) -> impl Handler {
    recording(calls, move |n, _task| async move {
        if n <= failures {
            Err(HandlerError::retry(format!("downstream down (call {n})")))
        } else {
            Ok(())
        }
    })
}

/// A handler that waits for a permit of `gate` on every call.
pub(crate) fn gated(calls: Calls, gate: &Arc<Semaphore>) -> impl Handler {
    let gate = Arc::clone(gate);
    recording(calls, move |_, _task| {
        let gate = Arc::clone(&gate);
        async move {
            gate.acquire().await.unwrap().forget();
            Ok(())
        }
    })
}

/// A handler that records each call in `calls` and succeeds.
pub(crate) fn succeeding(calls: &Calls) -> impl Handler {
    recording(calls.clone(), |_, _| async { Ok(()) })
}

/// A handler that takes `d` on every call.
pub(crate) fn sleepy(calls: Calls, d: Duration) -> impl Handler {
    recording(calls, move |_, _task| async move {
        tokio::time::sleep(d).await;
        Ok(())
    })
}

pub(crate) fn opts() -> HandlerOptions {
    HandlerOptions::default()
}

/// The store call a [`Gate`] holds back.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) enum Gated {
    /// `mark`, before it reaches the store (the database stalls on it).
    Mark,
    /// The answer of `mark`, after the store applied and committed it (the reply is slow).
    MarkAnswer,
    GrabBatch,
    GrabById,
    Recycle,
    /// Nothing: the gate only counts.
    Nothing,
}

/// A store whose calls of one kind wait while the gate is shut (the database stalled on
/// them, or the call is still on its way); everything else goes straight through.
#[derive(Clone)]
pub(crate) struct Gate<S> {
    inner: S,
    gated: Gated,
    open: Arc<tokio::sync::watch::Sender<bool>>,
    /// How many gated calls have reached the gate.
    arrived: Arc<tokio::sync::watch::Sender<usize>>,
    /// How many `grab_batch` calls have returned.
    grabbed: Arc<tokio::sync::watch::Sender<usize>>,
    /// How many event types each `grab_batch` call named, in order.
    claim_widths: Arc<std::sync::Mutex<Vec<usize>>>,
    /// How many `heartbeat` calls have returned.
    heartbeats: Arc<tokio::sync::watch::Sender<usize>>,
    /// How many leases heartbeats have found gone.
    refused: Arc<tokio::sync::watch::Sender<usize>>,
    /// The database is unreachable: the engine's calls fail (see [`Gate::outage`]).
    down: Arc<std::sync::atomic::AtomicBool>,
}

impl<S> Gate<S> {
    fn shut(inner: S, gated: Gated) -> Self {
        Gate {
            inner,
            gated,
            open: Arc::new(tokio::sync::watch::Sender::new(false)),
            arrived: Arc::new(tokio::sync::watch::Sender::new(0)),
            grabbed: Arc::new(tokio::sync::watch::Sender::new(0)),
            claim_widths: Arc::default(),
            heartbeats: Arc::new(tokio::sync::watch::Sender::new(0)),
            refused: Arc::new(tokio::sync::watch::Sender::new(0)),
            down: Arc::default(),
        }
    }

    /// Start or end an outage: while it lasts, every call the engine's loops make
    /// (claims, sweeps, heartbeats, marks, key and type bookkeeping) fails as a lost
    /// connection does.
    fn outage(&self, on: bool) {
        self.down.store(on, std::sync::atomic::Ordering::SeqCst);
    }

    fn reachable(&self, operation: &'static str) -> backstop_core::Result<()> {
        if self.down.load(std::sync::atomic::Ordering::SeqCst) {
            return Err(backstop_core::Error::new(
                backstop_core::ErrorKind::Unavailable,
                operation,
                "the test's outage: the database is unreachable",
            ));
        }
        Ok(())
    }

    /// Wait until `count` reaches `n`.
    async fn reach(count: &tokio::sync::watch::Sender<usize>, n: usize, what: &str) {
        let mut count = count.subscribe();
        tokio::time::timeout(PATIENCE, count.wait_for(|c| *c >= n))
            .await
            .unwrap_or_else(|_| panic!("timed out waiting for {n} {what}"))
            .unwrap();
    }

    /// Wait until `n` `grab_batch` calls have returned.
    async fn grabbed(&self, n: usize) {
        Self::reach(&self.grabbed, n, "grab_batch answers").await;
    }

    /// Wait until `n` `heartbeat` calls have returned.
    async fn heartbeats(&self, n: usize) {
        Self::reach(&self.heartbeats, n, "heartbeats").await;
    }

    /// Wait until heartbeats have found `n` leases gone.
    async fn refused(&self, n: usize) {
        Self::reach(&self.refused, n, "leases found gone by heartbeats").await;
    }

    /// How many event types each `grab_batch` call so far named.
    fn claim_widths(&self) -> Vec<usize> {
        self.claim_widths
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    fn heartbeats_so_far(&self) -> usize {
        *self.heartbeats.borrow()
    }

    fn open(&self) {
        self.open.send_replace(true);
    }

    /// Wait until `n` gated calls have reached the gate.
    async fn arrived(&self, n: usize) {
        Self::reach(
            &self.arrived,
            n,
            &format!("{:?} calls at the gate", self.gated),
        )
        .await;
    }

    /// Let a `call` through: at once unless it is the gated kind and the gate is shut.
    async fn pass(&self, call: Gated) {
        if call != self.gated {
            return;
        }
        self.arrived.send_modify(|a| *a += 1);
        let mut open = self.open.subscribe();
        // the sender lives as long as the gate: a closed channel cannot happen here
        let _ = open.wait_for(|o| *o).await;
    }
}

#[backstop_core::async_trait]
impl<S: TaskStore> TaskStore for Gate<S> {
    async fn migrate(&self) -> backstop_core::Result<()> {
        self.inner.migrate().await
    }
    async fn migrate_to(&self, version: u32) -> backstop_core::Result<()> {
        self.inner.migrate_to(version).await
    }
    async fn release_order_keys(&self, keys: &[String]) -> backstop_core::Result<Vec<TaskId>> {
        self.reachable("release_order_keys")?;
        self.inner.release_order_keys(keys).await
    }
    async fn register_event_types(&self, event_types: &[String]) -> backstop_core::Result<()> {
        self.reachable("register_event_types")?;
        self.inner.register_event_types(event_types).await
    }
    async fn event_types(&self) -> backstop_core::Result<Vec<backstop_core::EventTypeSeen>> {
        self.inner.event_types().await
    }
    async fn order_keys(
        &self,
        after: Option<&str>,
        limit: usize,
    ) -> backstop_core::Result<Vec<String>> {
        self.reachable("order_keys")?;
        self.inner.order_keys(after, limit).await
    }
    async fn enqueue(&self, task: NewTask) -> backstop_core::Result<backstop_core::Enqueued> {
        self.inner.enqueue(task).await
    }
    async fn enqueue_many(
        &self,
        tasks: &[NewTask],
    ) -> backstop_core::Result<Vec<backstop_core::Enqueued>> {
        self.inner.enqueue_many(tasks).await
    }
    async fn grab_by_id(&self, id: TaskId, owner: &Owner) -> backstop_core::Result<Option<Task>> {
        self.pass(Gated::GrabById).await;
        self.reachable("grab_by_id")?;
        self.inner.grab_by_id(id, owner).await
    }
    async fn grab_batch(
        &self,
        owner: &Owner,
        event_types: &[String],
        limit: usize,
    ) -> backstop_core::Result<Vec<Task>> {
        self.pass(Gated::GrabBatch).await;
        self.reachable("grab_batch")?;
        self.claim_widths
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(event_types.len());
        let grabbed = self.inner.grab_batch(owner, event_types, limit).await;
        self.grabbed.send_modify(|g| *g += 1);
        grabbed
    }
    async fn recycle_dead(
        &self,
        older_than: Duration,
        limit: usize,
    ) -> backstop_core::Result<backstop_core::Recycled> {
        self.pass(Gated::Recycle).await;
        self.reachable("recycle_dead")?;
        self.inner.recycle_dead(older_than, limit).await
    }
    async fn heartbeat(&self, leases: &[backstop_core::Lease]) -> backstop_core::Result<Vec<bool>> {
        let flags = match self.reachable("heartbeat") {
            Ok(()) => self.inner.heartbeat(leases).await,
            Err(e) => Err(e),
        };
        if let Ok(flags) = &flags {
            let gone = flags.iter().filter(|f| !**f).count();
            self.refused.send_modify(|r| *r += gone);
        }
        self.heartbeats.send_modify(|h| *h += 1);
        flags
    }
    async fn mark(&self, marks: &[backstop_core::Mark]) -> backstop_core::Result<Vec<bool>> {
        self.pass(Gated::Mark).await;
        self.reachable("mark")?;
        let flags = self.inner.mark(marks).await;
        self.pass(Gated::MarkAnswer).await;
        flags
    }
    async fn manual_reset(&self, id: TaskId, stuck_after: Duration) -> backstop_core::Result<Task> {
        self.inner.manual_reset(id, stuck_after).await
    }
    async fn cancel(
        &self,
        id: TaskId,
        audit: &backstop_core::Audit,
    ) -> backstop_core::Result<Task> {
        self.inner.cancel(id, audit).await
    }
    async fn delete(
        &self,
        id: TaskId,
        audit: &backstop_core::Audit,
    ) -> backstop_core::Result<Task> {
        self.inner.delete(id, audit).await
    }
    async fn audit_log(&self, id: TaskId) -> backstop_core::Result<Vec<backstop_core::AuditEntry>> {
        self.inner.audit_log(id).await
    }
    async fn reset(&self, id: TaskId, audit: &backstop_core::Audit) -> backstop_core::Result<Task> {
        self.inner.reset(id, audit).await
    }
    async fn reset_matching(
        &self,
        filter: &backstop_core::TaskFilter,
        audit: &backstop_core::Audit,
    ) -> backstop_core::Result<Vec<Task>> {
        self.inner.reset_matching(filter, audit).await
    }
    async fn get(&self, id: TaskId) -> backstop_core::Result<Option<Task>> {
        self.inner.get(id).await
    }
    async fn list(&self, filter: &backstop_core::TaskFilter) -> backstop_core::Result<Vec<Task>> {
        self.inner.list(filter).await
    }
    async fn stats(&self) -> backstop_core::Result<backstop_core::Stats> {
        self.inner.stats().await
    }
    async fn backlog(&self) -> backstop_core::Result<backstop_core::Stats> {
        self.inner.backlog().await
    }
    async fn throughput(
        &self,
        window: Duration,
        bucket: Duration,
    ) -> backstop_core::Result<Vec<backstop_core::Throughput>> {
        self.inner.throughput(window, bucket).await
    }
    async fn purge_succeeded(
        &self,
        older_than: Duration,
        limit: usize,
    ) -> backstop_core::Result<u64> {
        self.inner.purge_succeeded(older_than, limit).await
    }
    async fn delete_succeeded(&self, ids: &[TaskId]) -> backstop_core::Result<u64> {
        self.inner.delete_succeeded(ids).await
    }
}
