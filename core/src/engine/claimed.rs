//! The opt-in claim inside the enqueue's transaction ([`Engine::claim_in`]): the task is
//! claimed by the same commit that writes it, and runs after it without another write.
//!
//! Commits per task run ahead: the enqueue's, the claim's and the mark's (three) become
//! the enqueue-and-claim's and the mark's (two; marks of concurrent tasks share a
//! commit). After the commit the engine reads the row back (a read, no commit) and
//! hands it to its executor.
//!
//! **The trade-off, written down**: from the commit until the handler ends, the task is
//! running under this engine. If the process dies in between — before
//! [`Engine::run_claimed`], or before the task was handed over — nothing runs it until
//! the sweep finds its lease dead (`dead_after` after the claim) and gives it back, with
//! the attempt counted. [`run_now`](Engine::run_now) after the commit has no such
//! window: a task it has not claimed yet is pending, and the poller of any instance
//! takes it at once. The claim is never committed asynchronously: it is part of the
//! caller's transaction, durable as its business rows.

use std::sync::Arc;

use tokio::sync::OwnedSemaphorePermit;

use super::executor::{self, Executor};
use super::{Engine, Origin, RunAhead, State};
use crate::error::Result;
use crate::model::Status;
use crate::model::{Enqueued, Lease, TaskId};
use crate::store::{TaskStore, TaskStoreExt};
use crate::tx::{BlockingTxConnection, Transactional, TxConnection};

/// A task [claimed on the caller's transaction](Engine::claim_in), to run after the
/// commit with [`Engine::run_claimed`] — or why it was not claimed (then it is pending
/// for the poller, or not this engine's to run).
///
/// Holds a place in the event type's executor from the claim until the run: drop it
/// (after a rollback, say) and the place is free again.
#[must_use = "run it with Engine::run_claimed after the commit: a claimed task left unrun \
              stays running until the sweep takes it as dead, after dead_after"]
pub struct Claimed {
    task_id: TaskId,
    event_type: String,
    state: ClaimState,
}

enum ClaimState {
    /// Claimed on the transaction: the lease, the executor and its place.
    Held {
        lease: Lease,
        exec: Arc<Executor>,
        slot: OwnedSemaphorePermit,
    },
    /// Not claimed, and why (what `run_claimed` answers).
    Not(RunAhead),
}

impl Claimed {
    /// The task's id.
    pub fn task_id(&self) -> TaskId {
        self.task_id
    }

    /// The claim's lease, when the task was claimed.
    pub fn lease(&self) -> Option<Lease> {
        match &self.state {
            ClaimState::Held { lease, .. } => Some(*lease),
            ClaimState::Not(_) => None,
        }
    }

    fn not(enqueued: &Enqueued, why: RunAhead) -> Claimed {
        Claimed {
            task_id: enqueued.id,
            event_type: enqueued.event_type.clone(),
            state: ClaimState::Not(why),
        }
    }
}

impl std::fmt::Debug for Claimed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mut d = f.debug_struct("Claimed");
        d.field("task_id", &self.task_id)
            .field("event_type", &self.event_type);
        match &self.state {
            ClaimState::Held { lease, .. } => d.field("lease", lease),
            ClaimState::Not(why) => d.field("not_claimed", why),
        };
        d.finish()
    }
}

impl<S: TaskStore + Transactional + Clone> Engine<S> {
    /// Claim a task just enqueued on the caller's transaction `conn`, on that same
    /// transaction: the claim commits with the task and the business rows (one commit
    /// fewer per task than [`run_now`](Self::run_now) after the commit). After the
    /// commit, pass the answer to [`run_claimed`](Self::run_claimed).
    ///
    /// Opt-in, for its trade-off: a process that dies between the commit and the run
    /// (before `run_claimed` hands the task to its executor) leaves the task running
    /// until the sweep takes it as dead, `dead_after` after the claim, and gives it back
    /// with the attempt counted. After `run_now`, a task not claimed yet is pending and
    /// any instance's poller takes it at once. The claim is never committed
    /// asynchronously: it is part of the caller's transaction, as durable as its rows.
    ///
    /// - Claims only what `run_now` would: a newly created, due task of an event type
    ///   this engine handles, when its executor has room (the place is reserved here,
    ///   before the statement runs). Anything else is answered without a statement, as
    ///   `run_now` answers it, and stays pending for the poller.
    /// - An error is the statement's: the caller's transaction should roll back
    ///   (PostgreSQL has aborted it). Nothing is retried.
    /// - A rolled-back claim is harmless: `run_claimed` finds no task and answers
    ///   [`RunAhead::NotClaimed`]; dropping the answer frees the executor's place too.
    ///
    /// ```no_run
    /// # async fn demo<S, C>(engine: backstop_core::Engine<S>, mut tx: C) -> backstop_core::Result<()>
    /// # where S: backstop_core::TaskStore + backstop_core::Transactional + Clone, C: backstop_core::TxConnection {
    /// use backstop_core::{NewTask, Transactional};
    /// // `tx`: the caller's transaction, where its business rows were written
    /// let enqueued = engine.store().enqueue_in(&mut tx, &NewTask::new("PAY", "order-42")).await?;
    /// let claimed = engine.claim_in(&mut tx, &enqueued).await?;
    /// // … commit `tx` …
    /// engine.run_claimed(claimed).await; // best effort, as run_now
    /// # Ok(()) }
    /// ```
    pub async fn claim_in<C>(&self, conn: &mut C, enqueued: &Enqueued) -> Result<Claimed>
    where
        C: TxConnection + ?Sized,
    {
        self.claim_in_with(&self.inner.shared.store, conn, enqueued)
            .await
    }

    /// [`claim_in`](Self::claim_in) on a blocking driver's connection (rusqlite in
    /// `SqliteStore::transaction`, through `SqliteTx::connection`).
    pub fn claim_blocking<C>(&self, conn: &mut C, enqueued: &Enqueued) -> Result<Claimed>
    where
        C: BlockingTxConnection + ?Sized,
    {
        self.claim_blocking_with(&self.inner.shared.store, conn, enqueued)
    }
}

impl<S: TaskStore + Clone> Engine<S> {
    /// [`claim_in`](Self::claim_in) with the claim's statement taken from `store`'s
    /// driver: for an engine over a store that is not [`Transactional`] itself, such as a
    /// wrapper that implements `TaskStore` around a backend's store (to record or count
    /// its calls). `store` must be that backend's store (the same database and table);
    /// the claim is this engine's.
    pub async fn claim_in_with<T, C>(
        &self,
        store: &T,
        conn: &mut C,
        enqueued: &Enqueued,
    ) -> Result<Claimed>
    where
        T: Transactional + ?Sized,
        C: TxConnection + ?Sized,
    {
        let (exec, slot) = match self.reserve(enqueued) {
            Ok(reserved) => reserved,
            Err(why) => return Ok(Claimed::not(enqueued, why)),
        };
        let owner = &self.inner.shared.owner;
        let lease = store.claim_in(conn, enqueued.id, owner).await;
        Self::claimed(enqueued, lease, exec, slot)
    }

    /// [`claim_in_with`](Self::claim_in_with) on a blocking driver's connection.
    pub fn claim_blocking_with<T, C>(
        &self,
        store: &T,
        conn: &mut C,
        enqueued: &Enqueued,
    ) -> Result<Claimed>
    where
        T: Transactional + ?Sized,
        C: BlockingTxConnection + ?Sized,
    {
        let (exec, slot) = match self.reserve(enqueued) {
            Ok(reserved) => reserved,
            Err(why) => return Ok(Claimed::not(enqueued, why)),
        };
        let owner = &self.inner.shared.owner;
        let lease = store.claim_blocking(conn, enqueued.id, owner);
        Self::claimed(enqueued, lease, exec, slot)
    }

    /// Run a task [claimed on the caller's transaction](Self::claim_in), after the
    /// commit: read its row back and hand it to its executor. Answers as
    /// [`run_now`](Self::run_now), and like it is **best effort, never an error**:
    ///
    /// - [`RunAhead::Started`]: handed to the executor.
    /// - What `claim_in` found, when it claimed nothing (with a notifier, a task this
    ///   engine does not take is announced, as by `run_now`).
    /// - [`RunAhead::NotClaimed`]: the claim is not in the database (the transaction
    ///   rolled back), or no longer this engine's (the sweep took it).
    /// - [`RunAhead::ShuttingDown`]: the engine is stopping; the task is given back
    ///   (pending, its attempt not counted) for a live instance.
    /// - [`RunAhead::Deferred`]: the row could not be read (logged, counted as a store
    ///   error). The task stays running until the sweep takes it as dead, after
    ///   `dead_after`, and runs then.
    pub async fn run_claimed(&self, claimed: Claimed) -> RunAhead {
        let Claimed {
            task_id,
            event_type,
            state,
        } = claimed;
        let (lease, exec, slot) = match state {
            ClaimState::Held { lease, exec, slot } => (lease, exec, slot),
            ClaimState::Not(why) => {
                if matches!(why, RunAhead::NoHandler | RunAhead::Rejected) {
                    self.inner.shared.announce_task(task_id, &event_type).await;
                }
                return why;
            }
        };
        let shared = &self.inner.shared;
        let Some(_claim) = shared.begin_claim() else {
            // Give it back for a live instance; if that fails too, the sweep does.
            if let Err(e) = shared.store.release(lease).await {
                shared.counters.store_errors(&event_type);
                tracing::warn!(owner = %shared.owner, task_id, %event_type, error = %e,
                    "releasing a task claimed in the caller's transaction failed at \
                     shutdown: the sweep gives it back after dead_after");
            }
            return RunAhead::ShuttingDown;
        };
        match shared.store.get(task_id).await {
            Ok(Some(task))
                if task.status == Status::Running
                    && task.lease() == lease
                    && task.owner.as_deref() == Some(shared.owner.as_str()) =>
            {
                shared.counters.run_ahead(&exec.event_type);
                executor::dispatch(Arc::clone(shared), exec, task, slot, Origin::RunAhead);
                RunAhead::Started
            }
            Ok(_) => RunAhead::NotClaimed,
            Err(e) => {
                shared.counters.store_errors(&event_type);
                tracing::warn!(owner = %shared.owner, task_id, %event_type, error = %e,
                    "reading a task claimed in the caller's transaction failed: it stays \
                     running until the sweep gives it back after dead_after");
                RunAhead::Deferred
            }
        }
    }

    /// The executor and a place in it for `enqueued`, or why `run_now` would not claim
    /// it (without a statement).
    fn reserve(
        &self,
        enqueued: &Enqueued,
    ) -> Result<(Arc<Executor>, OwnedSemaphorePermit), RunAhead> {
        let shared = &self.inner.shared;
        if shared.state() != State::Running {
            return Err(RunAhead::ShuttingDown);
        }
        if !enqueued.created {
            return Err(RunAhead::Duplicate);
        }
        if enqueued.status == Status::Waiting {
            return Err(RunAhead::NotClaimed);
        }
        let Some(exec) = shared.executors.get(&enqueued.event_type) else {
            return Err(RunAhead::NoHandler);
        };
        let Ok(slot) = Arc::clone(&exec.slots).try_acquire_owned() else {
            shared.counters.rejected(&exec.event_type);
            return Err(RunAhead::Rejected);
        };
        Ok((Arc::clone(exec), slot))
    }

    /// The answer of a claim statement that answered `lease` (an error drops the
    /// reserved place with it).
    fn claimed(
        enqueued: &Enqueued,
        lease: Result<Option<Lease>>,
        exec: Arc<Executor>,
        slot: OwnedSemaphorePermit,
    ) -> Result<Claimed> {
        Ok(match lease? {
            Some(lease) => Claimed {
                task_id: enqueued.id,
                event_type: enqueued.event_type.clone(),
                state: ClaimState::Held { lease, exec, slot },
            },
            // not due (delayed): pending for the poller; the place is freed here
            None => Claimed::not(enqueued, RunAhead::NotClaimed),
        })
    }
}
