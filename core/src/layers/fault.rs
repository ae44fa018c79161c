//! [`FaultLayer`]: latency, errors and held answers, injected into chosen operations.

use std::collections::BTreeMap;
use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures_util::future::BoxFuture;
use tokio::sync::watch;

use crate::error::{Error, ErrorKind, Result};
use crate::store::{Call, Layer, Op, StoreLayer, TaskStore};

/// When an injected delay or hold applies to a call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Phase {
    /// Before the call reaches the store: the database is slow to take it, or stalled on
    /// it. Nothing has been applied while it waits.
    Before,
    /// After the store answered: the call was applied (and committed, where the
    /// operation commits), and its answer is on its way back.
    After,
}

/// What is injected into one operation.
#[derive(Debug, Clone, Copy, Default)]
struct Rule {
    delay_before: Duration,
    delay_after: Duration,
    fail: Option<ErrorKind>,
    hold: Option<Phase>,
}

#[derive(Debug)]
struct State {
    rules: Mutex<BTreeMap<Op, Rule>>,
    /// Whether holds let their calls through.
    open: watch::Sender<bool>,
    /// How many calls have reached a hold.
    held: watch::Sender<usize>,
}

/// The faults a [`FaultLayer`] injects: shared, so a test changes them while the store
/// is in use (clone it before handing the layer over). Nothing is injected until asked.
///
/// # Behavior
///
/// For each call of an operation, in this order:
///
/// 1. a [`delay`](Self::delay) set with [`Phase::Before`] is slept;
/// 2. a [`hold`](Self::hold) with `Phase::Before` waits until [`release`](Self::release)
///    (counted in [`held`](Self::held) as it arrives);
/// 3. a [`fail`](Self::fail) answers its error without calling the store: nothing is
///    written;
/// 4. the store's call runs;
/// 5. a hold with [`Phase::After`] waits until `release`, then a delay with
///    `Phase::After` is slept: the call was applied, its answer comes late;
/// 6. the store's answer is returned.
///
/// ```
/// # async fn demo(store: impl backstop_core::TaskStore) {
/// use backstop_core::layers::{FaultLayer, Faults, Phase};
/// use backstop_core::{ErrorKind, Op, TaskStoreExt};
/// use std::time::Duration;
///
/// let faults = Faults::new();
/// let store = store.layer(FaultLayer::new(faults.clone()));
/// faults.delay(&[Op::Mark], Phase::After, Duration::from_millis(200)); // slow answers
/// faults.fail(&[Op::ClaimBatch, Op::Heartbeat], ErrorKind::Unavailable); // an outage
/// faults.clear(Op::ALL); // over
/// # }
/// ```
#[derive(Debug, Clone)]
pub struct Faults {
    state: Arc<State>,
}

impl Default for Faults {
    fn default() -> Self {
        Faults {
            state: Arc::new(State {
                rules: Mutex::default(),
                open: watch::Sender::new(true),
                held: watch::Sender::new(0),
            }),
        }
    }
}

impl Faults {
    /// No faults yet.
    pub fn new() -> Self {
        Faults::default()
    }

    fn change(&self, ops: &[Op], f: impl Fn(&mut Rule)) {
        let mut rules = self.state.rules.lock().unwrap_or_else(|e| e.into_inner());
        for op in ops {
            f(rules.entry(*op).or_default());
        }
    }

    fn rule(&self, op: Op) -> Rule {
        let rules = self.state.rules.lock().unwrap_or_else(|e| e.into_inner());
        rules.get(&op).copied().unwrap_or_default()
    }

    /// Calls of `ops` take `delay` longer, in `phase` (zero: no delay).
    pub fn delay(&self, ops: &[Op], phase: Phase, delay: Duration) {
        self.change(ops, |r| match phase {
            Phase::Before => r.delay_before = delay,
            Phase::After => r.delay_after = delay,
        });
    }

    /// Calls of `ops` fail with an error of `kind` (temporary as the kind is by default)
    /// naming the operation, before they reach the store.
    pub fn fail(&self, ops: &[Op], kind: ErrorKind) {
        self.change(ops, |r| r.fail = Some(kind));
    }

    /// Calls of `ops` wait in `phase` until [`release`](Self::release); until then
    /// they are counted by [`held`](Self::held) as they arrive. Shuts the holds.
    pub fn hold(&self, ops: &[Op], phase: Phase) {
        self.change(ops, |r| r.hold = Some(phase));
        self.state.open.send_replace(false);
    }

    /// Let every held call go on; later calls pass the holds without waiting (still
    /// counted) until the next [`hold`](Self::hold).
    pub fn release(&self) {
        self.state.open.send_replace(true);
    }

    /// Calls of `ops` no longer fail (their delays and holds stay).
    pub fn heal(&self, ops: &[Op]) {
        self.change(ops, |r| r.fail = None);
    }

    /// Take every fault off `ops` (`Op::ALL`: off everything). Calls already held stay
    /// held until [`release`](Self::release).
    pub fn clear(&self, ops: &[Op]) {
        let mut rules = self.state.rules.lock().unwrap_or_else(|e| e.into_inner());
        for op in ops {
            rules.remove(op);
        }
    }

    /// How many calls have reached a hold so far.
    pub fn held_so_far(&self) -> usize {
        *self.state.held.borrow()
    }

    /// Wait until `n` calls have reached a hold (wrap it in a timeout).
    pub async fn held(&self, n: usize) {
        let mut held = self.state.held.subscribe();
        // the sender lives as long as `self`: the channel cannot close here
        let _ = held.wait_for(|h| *h >= n).await;
    }

    async fn wait_open(&self) {
        self.state.held.send_modify(|h| *h += 1);
        let mut open = self.state.open.subscribe();
        let _ = open.wait_for(|o| *o).await;
    }

    /// Run `call`, a call of `op`, with the faults set for `op` (see [`Behavior`](Self)).
    /// For a wrapper of its own that injects faults beside what else it does.
    pub async fn run<T>(&self, op: Op, call: impl Future<Output = Result<T>>) -> Result<T> {
        let rule = self.rule(op);
        if !rule.delay_before.is_zero() {
            tokio::time::sleep(rule.delay_before).await;
        }
        if rule.hold == Some(Phase::Before) {
            self.wait_open().await;
        }
        if let Some(kind) = rule.fail {
            return Err(Error::new(
                kind,
                op.name(),
                format!("a fault injected by FaultLayer ({kind:?})"),
            ));
        }
        let answer = call.await;
        if rule.hold == Some(Phase::After) {
            self.wait_open().await;
        }
        if !rule.delay_after.is_zero() {
            tokio::time::sleep(rule.delay_after).await;
        }
        answer
    }
}

/// A layer that injects the [`Faults`] it is given into every operation of the store it
/// wraps (see [`Faults`] for what and when).
#[derive(Debug, Clone)]
pub struct FaultLayer {
    faults: Faults,
}

impl FaultLayer {
    /// A layer injecting `faults` (keep a clone to change them).
    pub fn new(faults: Faults) -> Self {
        FaultLayer { faults }
    }
}

impl<S: TaskStore> Layer<S> for FaultLayer {
    type Store = FaultStore<S>;
    fn layer(&self, inner: S) -> FaultStore<S> {
        FaultStore {
            inner,
            faults: self.faults.clone(),
        }
    }
}

/// A store with injected faults (made by [`FaultLayer`]).
#[derive(Debug, Clone)]
pub struct FaultStore<S> {
    inner: S,
    faults: Faults,
}

impl<S> FaultStore<S> {
    /// The faults it injects.
    pub fn faults(&self) -> &Faults {
        &self.faults
    }

    /// The wrapped store.
    pub fn get_ref(&self) -> &S {
        &self.inner
    }
}

impl<S: TaskStore> StoreLayer for FaultStore<S> {
    type Inner = S;

    fn inner(&self) -> &S {
        &self.inner
    }

    fn around<'a, T: Send + 'a>(
        &'a self,
        call: Call<'a>,
        op: BoxFuture<'a, Result<T>>,
    ) -> BoxFuture<'a, Result<T>> {
        Box::pin(self.faults.run(call.op, op))
    }
}
