//! Running tasks ahead of the poller: a task just committed (`Engine::run_now`), and the
//! next steps a saga step's report claimed into places reserved for them.

use std::sync::Arc;

use async_trait::async_trait;

use super::executor;
use super::{context, Origin, Shared, State};
use crate::error::Result;
use crate::model::{Enqueued, Owner};
use crate::store::TaskStore;

/// What [`Engine::run_now`](super::Engine::run_now) did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum RunAhead {
    /// Claimed and handed to its executor.
    Started,
    /// The enqueue found an existing task: it is not run again.
    Duplicate,
    /// Not claimed: the task is not due yet (delayed), waits behind an earlier task of its
    /// order key, its event type is paused ([`TaskStore::set_queue`](crate::TaskStore::set_queue)),
    /// or another instance has it.
    NotClaimed,
    /// This engine has no handler for the event type; the task waits for an instance that
    /// has one.
    NoHandler,
    /// The event type's executor is full: the task was not taken (it stays pending with no
    /// attempt spent) and the poller will run it. Counted as rejected.
    Rejected,
    /// The engine is shutting down; the poller of a live instance will run the task.
    ShuttingDown,
    /// The claim failed (the database did not answer, say): the failure is logged and
    /// counted as a store error, and the task, committed and pending, waits for the
    /// poller. Never an error of the caller's request.
    Deferred,
}

impl<S: TaskStore + Clone> Shared<S> {
    /// [`Engine::run_now`].
    pub(super) async fn run_now(self: &Arc<Self>, enqueued: &Enqueued) -> RunAhead {
        let run = match self.run_here(enqueued).await {
            Ok(run) => run,
            Err(e) => {
                let shared = self;
                shared.counters.store_errors(&enqueued.event_type);
                tracing::warn!(owner = %shared.owner, task_id = enqueued.id,
                    event_type = %enqueued.event_type, error = %e,
                    "run-ahead claim failed: the task is committed and the poller will run it");
                RunAhead::Deferred
            }
        };
        if matches!(run, RunAhead::NoHandler | RunAhead::Rejected) {
            // Another process may run it now: tell it (best effort, after commit).
            self.announce_task(enqueued.id, &enqueued.event_type).await;
        }
        run
    }

    /// Announce through the notifier that tasks of `event_type` are ready; failures are
    /// logged and counted, never returned (the poller runs the task anyway).
    pub(super) async fn announce(&self, event_type: &str) {
        self.announce_one(event_type, None).await
    }

    /// As [`announce`](Self::announce) for task `id` alone, by id
    /// ([`Notifier::notify_task`](crate::Notifier::notify_task)).
    pub(super) async fn announce_task(&self, id: crate::model::TaskId, event_type: &str) {
        self.announce_one(event_type, Some(id)).await
    }

    async fn announce_one(&self, event_type: &str, id: Option<crate::model::TaskId>) {
        let shared = self;
        let Some(notifier) = &shared.notifier else {
            return;
        };
        let sent = match id {
            Some(id) => notifier.notify_task(id, event_type).await,
            None => notifier.notify(event_type).await,
        };
        match sent {
            Ok(()) => shared.counters.notified(event_type),
            Err(e) => {
                shared.counters.notifier_errors(event_type);
                tracing::warn!(owner = %shared.owner, %event_type, error = %e,
                    "notify failed: other instances will find the task at their next poll");
            }
        }
    }

    /// A wake-up named task `id` of `event_type`, a type this instance handles, drained
    /// and not limited, while no other claim by id was under way
    /// ([`Wake::Task`](crate::Wake::Task)): claim it by id into a free
    /// place of its executor, as a run-ahead claims. Without a free place, or when the
    /// claim finds nothing (another instance has it; it is not due; its type was paused
    /// or limited meanwhile) or fails, poll the type as a wake-up without an id does.
    pub(super) async fn claim_woken(self: Arc<Self>, id: crate::model::TaskId, event_type: String) {
        /// Clears `woken_claiming` however the claim ends (the next named wake-up may
        /// claim by id again).
        struct Claiming<'a>(&'a std::sync::atomic::AtomicBool);
        impl Drop for Claiming<'_> {
            fn drop(&mut self) {
                self.0.store(false, std::sync::atomic::Ordering::Release);
            }
        }
        let _claiming = Claiming(&self.woken_claiming);
        let shared = &self;
        // held until the claimed task is dispatched (or nothing was claimed)
        let Some(_claim) = shared.begin_claim() else {
            return;
        };
        let Some(exec) = shared.executors.get(&event_type) else {
            return;
        };
        let Ok(slot) = Arc::clone(&exec.slots).try_acquire_owned() else {
            shared.poll_type(event_type);
            return;
        };
        match shared.store.claim_by_id(id, &shared.owner).await {
            Ok(Some(task)) => {
                shared.counters.woken_claims(&exec.event_type);
                executor::dispatch(
                    Arc::clone(shared),
                    Arc::clone(exec),
                    task,
                    slot,
                    Origin::Poll,
                );
            }
            Ok(None) => shared.poll_type(event_type),
            Err(e) => {
                shared.counters.store_errors(&event_type);
                tracing::debug!(owner = %shared.owner, task_id = id, %event_type, error = %e,
                    "claim of a woken task failed: polling its type");
                shared.poll_type(event_type);
            }
        }
    }

    async fn run_here(self: &Arc<Self>, enqueued: &Enqueued) -> Result<RunAhead> {
        let shared = self;
        // held until the claimed task is dispatched (or nothing was claimed)
        let Some(_claim) = shared.begin_claim() else {
            return Ok(RunAhead::ShuttingDown);
        };
        if !enqueued.created {
            return Ok(RunAhead::Duplicate);
        }
        if enqueued.status == crate::model::Status::Waiting {
            // queued behind an earlier task of its order key: not claimable yet
            return Ok(RunAhead::NotClaimed);
        }
        let Some(exec) = shared.executors.get(&enqueued.event_type) else {
            return Ok(RunAhead::NoHandler);
        };
        let Ok(slot) = Arc::clone(&exec.slots).try_acquire_owned() else {
            shared.counters.rejected(&exec.event_type);
            tracing::debug!(task_id = enqueued.id, event_type = %exec.event_type,
                "executor full: run-ahead rejected, the poller will run the task");
            return Ok(RunAhead::Rejected);
        };
        match shared.store.claim_by_id(enqueued.id, &shared.owner).await? {
            None => {
                // a limited type is claimed by the poller alone: poll it now
                shared.slot_left(&exec.event_type);
                Ok(RunAhead::NotClaimed)
            }
            Some(task) => {
                shared.counters.run_ahead(&exec.event_type);
                executor::dispatch(
                    Arc::clone(shared),
                    Arc::clone(exec),
                    task,
                    slot,
                    Origin::RunAhead,
                );
                Ok(RunAhead::Started)
            }
        }
    }
}

/// An engine's run-ahead, for its attempts' contexts.
pub(super) struct EngineAhead<S>(pub(super) Arc<Shared<S>>);

#[async_trait]
impl<S: TaskStore + Clone> context::Ahead for EngineAhead<S> {
    async fn run_now(&self, enqueued: &Enqueued) {
        self.0.run_now(enqueued).await;
    }

    fn reserve(&self, event_type: &str, n: usize) -> Option<Reserved> {
        let shared = &self.0;
        if shared.state() != State::Running || n == 0 {
            return None;
        }
        let exec = shared.executors.get(event_type)?;
        let n = u32::try_from(n).ok()?;
        let slots = Arc::clone(&exec.slots).try_acquire_many_owned(n).ok()?;
        Some(Reserved {
            exec: Arc::clone(exec),
            slots,
            owner: shared.owner.clone(),
        })
    }

    async fn run_claimed(&self, task: crate::model::Task, reserved: &mut Reserved) {
        let shared = &self.0;
        let lease = task.lease();
        // held until the task is dispatched
        let claim = shared.begin_claim();
        let slot = claim.as_ref().and_then(|_| reserved.slots.split(1));
        let Some(slot) = slot else {
            // stopping (or, by a bug, out of places): give it back for a live instance;
            // if that fails too, the sweep does
            if let Err(e) = crate::store::TaskStoreExt::release(&shared.store, lease).await {
                shared.counters.store_errors(&task.event_type);
                tracing::warn!(owner = %shared.owner, task_id = task.id, error = %e,
                    "releasing a task claimed by a step's report failed: the sweep gives \
                     it back after dead_after");
            }
            return;
        };
        shared.counters.run_ahead(&reserved.exec.event_type);
        executor::dispatch(
            Arc::clone(shared),
            Arc::clone(&reserved.exec),
            task,
            slot,
            Origin::RunAhead,
        );
        drop(claim);
    }
}

/// Places reserved in an executor for tasks a write about to run claims (see
/// [`context::Ahead::reserve`]); dropped, the places left are free again.
pub(crate) struct Reserved {
    exec: Arc<executor::Executor>,
    slots: tokio::sync::OwnedSemaphorePermit,
    owner: Owner,
}

impl Reserved {
    /// Who the tasks are claimed by: the engine.
    pub(crate) fn owner(&self) -> &Owner {
        &self.owner
    }
}
