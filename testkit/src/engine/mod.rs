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
pub mod flow;
pub mod kinds;
pub mod leases;
pub mod order;
pub mod periodic;
pub mod poller;
pub mod reconcile;
pub mod retention;
pub mod run_ahead;
pub mod saga;
pub mod saga_in_tx;
pub mod saga_reconciler;
pub mod shutdown;
pub mod tcc;
pub mod testing;
pub mod wakeups;

use std::collections::{HashMap, HashSet};
use std::future::Future;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use backstop_core::layers::{FaultLayer, FaultStore, Faults, Phase};
use backstop_core::{
    handler_fn, Archive, BoxError, Engine, EngineConfig, ErrorKind, Handler, HandlerError,
    HandlerOptions, Json, JsonHandler, NewTask, Op, Owner, Result, RetryPolicy, RunAhead, Status,
    StoreLayer, Task, TaskId, TaskStore, TaskStoreExt,
};
use tokio::sync::Semaphore;

use crate::{chrono_dur, Ctx, Harness, TimeColumn};

pub(crate) const HOUR: Duration = Duration::from_secs(3600);

/// How long a case waits for something the engine should do within milliseconds.
pub(crate) const PATIENCE: Duration = Duration::from_secs(20);

/// Settings for tests: a poller that polls every 20 ms, starting 300 ms after start (so a
/// case's first run-ahead is not raced by the first poll), no retention of any kind.
pub(crate) fn fast_config() -> EngineConfig {
    EngineConfig::default()
        .poll_interval(Duration::from_millis(20))
        .first_poll_delay(Duration::from_millis(300))
        .dead_after(Duration::from_secs(60))
        .heartbeat_interval(Duration::from_millis(200))
        .shutdown_grace(Duration::from_secs(10))
        .retention(None)
        // no retention job unless a case asks for one: its purges would race the case
        .cancelled_retention(None)
        .audit_retention(None)
        .registry_retention(None)
        .barrier_retention(None)
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

/// How long a case that drains a thousand tasks or more waits for them. Such a case checks
/// what ran (order, counts, overlaps), not how fast: its drain takes 8-10 s alone on a
/// 2-core machine and more beside the rest of the suite, so it gets a margin no loaded
/// machine reaches. Speed is the benchmarks' job.
pub(crate) const BULK_PATIENCE: Duration = Duration::from_secs(120);

/// Wait until `n` tasks of the store succeeded, within [`BULK_PATIENCE`]; on a timeout
/// the panic prints the counts by status, so the lost run says where the tasks stood.
pub(crate) async fn all_succeed<S: TaskStore>(store: &S, n: u64) {
    let deadline = Instant::now() + BULK_PATIENCE;
    loop {
        let stats = store.stats().await.unwrap();
        if stats.count(Status::Succeeded) == n {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "timed out after {BULK_PATIENCE:?} waiting for {n} tasks to succeed; counts by \
             status: {:?}",
            stats.counts
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
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
    /// `mark` alone (the flusher's batches, not a limited type's hand-over), before it
    /// reaches the store.
    PlainMark,
    /// `mark_and_claim` alone (a limited type's hand-over), before it reaches the store
    /// (waiting for the type's turn).
    HandOver,
    ClaimBatch,
    ClaimById,
    Recycle,
    /// `heartbeat`, before it reaches the store (the database stalls on it).
    Heartbeat,
    /// Nothing: the gate only counts.
    Nothing,
}

impl Gated {
    /// The hold of a [`FaultLayer`](backstop_core::layers::FaultLayer) it is.
    fn hold(self) -> Option<(&'static [Op], Phase)> {
        // marks go alone or with a limited type's next claim
        const MARKS: &[Op] = &[Op::Mark, Op::MarkAndClaim];
        Some(match self {
            Gated::Mark => (MARKS, Phase::Before),
            Gated::MarkAnswer => (MARKS, Phase::After),
            Gated::PlainMark => (&[Op::Mark], Phase::Before),
            Gated::HandOver => (&[Op::MarkAndClaim], Phase::Before),
            Gated::ClaimBatch => (&[Op::ClaimBatch], Phase::Before),
            Gated::ClaimById => (&[Op::ClaimById], Phase::Before),
            Gated::Recycle => (&[Op::RecycleDead], Phase::Before),
            Gated::Heartbeat => (&[Op::Heartbeat], Phase::Before),
            Gated::Nothing => return None,
        })
    }
}

/// The calls of the engine's loops (claims, sweeps, heartbeats, marks, key and type
/// bookkeeping), which fail during a [`Gate::outage`].
const LOOP_OPS: &[Op] = &[
    Op::ReleaseOrderKeys,
    Op::RegisterEventTypes,
    Op::OrderKeys,
    Op::ClaimById,
    Op::ClaimBatch,
    Op::RecycleDead,
    Op::Heartbeat,
    Op::Mark,
    Op::MarkAndClaim,
];

/// A store whose calls of one kind wait while the gate is shut (the database stalled on
/// them, or the answer is still on its way: a [`Faults`] hold), and that counts claims
/// and heartbeats; everything else goes straight through.
#[derive(Clone)]
pub(crate) struct Gate<S> {
    inner: FaultStore<S>,
    gated: Gated,
    faults: Faults,
    /// How many `claim_batch` calls have answered.
    claimed: Arc<tokio::sync::watch::Sender<usize>>,
    /// How many event types each answered `claim_batch` call named, in order.
    claim_widths: Arc<std::sync::Mutex<Vec<usize>>>,
    /// How many `heartbeat` calls have returned.
    heartbeats: Arc<tokio::sync::watch::Sender<usize>>,
    /// How many leases heartbeats have found gone.
    refused: Arc<tokio::sync::watch::Sender<usize>>,
}

impl<S: TaskStore> Gate<S> {
    fn shut(inner: S, gated: Gated) -> Self {
        let faults = Faults::new();
        if let Some((ops, phase)) = gated.hold() {
            faults.hold(ops, phase);
        }
        Gate {
            inner: inner.layer(FaultLayer::new(faults.clone())),
            gated,
            faults,
            claimed: Arc::new(tokio::sync::watch::Sender::new(0)),
            claim_widths: Arc::default(),
            heartbeats: Arc::new(tokio::sync::watch::Sender::new(0)),
            refused: Arc::new(tokio::sync::watch::Sender::new(0)),
        }
    }

    /// Start or end an outage: while it lasts, every call the engine's loops make
    /// (claims, sweeps, heartbeats, marks, key and type bookkeeping) fails as a lost
    /// connection does.
    fn outage(&self, on: bool) {
        match on {
            true => self.faults.fail(LOOP_OPS, ErrorKind::Unavailable),
            false => self.faults.heal(LOOP_OPS),
        }
    }

    /// Count an answered `claim_batch` of `width` event types.
    fn count_claim(&self, claimed: &Result<Vec<Task>>, width: usize) {
        if claimed.is_ok() {
            let mut widths = self.claim_widths.lock().unwrap_or_else(|e| e.into_inner());
            widths.push(width);
            self.claimed.send_modify(|c| *c += 1);
        }
    }

    /// Count a heartbeat, and the leases it found gone.
    fn count_heartbeat(&self, flags: &Result<Vec<bool>>) {
        if let Ok(flags) = flags {
            let gone = flags.iter().filter(|f| !**f).count();
            self.refused.send_modify(|r| *r += gone);
        }
        self.heartbeats.send_modify(|h| *h += 1);
    }

    /// Wait until `count` reaches `n`.
    async fn reach(count: &tokio::sync::watch::Sender<usize>, n: usize, what: &str) {
        let mut count = count.subscribe();
        tokio::time::timeout(PATIENCE, count.wait_for(|c| *c >= n))
            .await
            .unwrap_or_else(|_| panic!("timed out waiting for {n} {what}"))
            .unwrap();
    }

    /// Wait until `n` `claim_batch` calls have answered.
    async fn claimed(&self, n: usize) {
        Self::reach(&self.claimed, n, "claim_batch answers").await;
    }

    /// Wait until `n` `heartbeat` calls have returned.
    async fn heartbeats(&self, n: usize) {
        Self::reach(&self.heartbeats, n, "heartbeats").await;
    }

    /// Wait until heartbeats have found `n` leases gone.
    async fn refused(&self, n: usize) {
        Self::reach(&self.refused, n, "leases found gone by heartbeats").await;
    }

    /// How many event types each `claim_batch` call so far named.
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
        self.faults.release();
    }

    /// Shut the gate again after [`open`](Self::open): the gated calls from now on wait.
    fn shut_again(&self) {
        if let Some((ops, phase)) = self.gated.hold() {
            self.faults.hold(ops, phase);
        }
    }

    /// How many gated calls have reached the gate so far (passing it while open too).
    fn arrived_so_far(&self) -> usize {
        self.faults.held_so_far()
    }

    /// Wait until `n` gated calls have reached the gate.
    async fn arrived(&self, n: usize) {
        tokio::time::timeout(PATIENCE, self.faults.held(n))
            .await
            .unwrap_or_else(|_| {
                panic!(
                    "timed out waiting for {n} {:?} calls at the gate",
                    self.gated
                )
            });
    }
}

/// Claims and heartbeats are counted; every call goes through the gate's faults.
#[backstop_core::async_trait]
impl<S: TaskStore> StoreLayer for Gate<S> {
    type Inner = FaultStore<S>;
    fn inner(&self) -> &FaultStore<S> {
        &self.inner
    }
    async fn on_claim_batch(&self, owner: &Owner, types: &[String], n: usize) -> Result<Vec<Task>> {
        let claimed = self.inner.claim_batch(owner, types, n).await;
        self.count_claim(&claimed, types.len());
        claimed
    }
    async fn on_heartbeat(&self, leases: &[backstop_core::Lease]) -> Result<Vec<bool>> {
        let flags = self.inner.heartbeat(leases).await;
        self.count_heartbeat(&flags);
        flags
    }
}
