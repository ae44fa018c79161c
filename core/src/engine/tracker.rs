//! The engine's in-flight bookkeeping, in one place: which tasks this instance holds and
//! where each attempt is (running, waiting for its mark, lease lost), how many claims and
//! attempts are in flight (what shutdown waits for), and how many finished attempts wait
//! for their marks (what bounds claiming while the store's writes stall or lag).
//!
//! The bound on waiting marks follows the store: about [`MARK_HORIZON`] of what the
//! flusher's writes lately achieved, at least [`MIN_UNMARKED`], at most
//! `EngineConfig::max_unmarked`. An engine whose handlers outrun its store claims no
//! further ahead of its writes than that, so an outcome waits about that long to be
//! written rather than for the whole `max_unmarked` (in the chaos suite's MariaDB outage
//! lane, 4 096 outcomes written 256 at a time, 1–4.5 s each, under a backlog: outcomes
//! waited up to 34 s, their leases heartbeated all the while), with the same throughput,
//! which the store sets.
//!
//! The life of one claimed task:
//!
//! 1. [`started`](Tracker::started): held and heartbeated, in flight;
//! 2. [`attempt_ended`](Tracker::attempt_ended): its mark is on its way; still held and
//!    heartbeated (a slow store must not let it look dead), now counted as unmarked;
//! 3. [`finished`](Tracker::finished): its mark was applied (or given up on): no longer
//!    held, unmarked, nor in flight.
//!
//! A heartbeat that finds a lease gone ([`lease_gone`](Tracker::lease_gone)) means the
//! task was recycled under a handler that still runs only while the attempt runs: once
//! the attempt has ended, its own mark says what happened (applied, or refused and counted
//! as a stale completion). A lost lease is reported once and no longer heartbeated.

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::Notify;

use crate::model::{Lease, TaskId};

/// Where a held task's attempt is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    /// The handler runs (or waits for a runner).
    Running,
    /// The attempt ended; its mark waits for its batch or is being applied.
    Marking,
    /// A heartbeat found the lease gone while the handler ran: reported, not heartbeated.
    Lost,
}

#[derive(Debug, Clone)]
struct Held {
    lease: Lease,
    phase: Phase,
    /// Raised when a heartbeat finds the lease gone (see [`crate::lease_lost`]).
    lost: Arc<LeaseSignal>,
}

/// Raised once, when an attempt's lease is found gone; the handler may wait for it.
#[derive(Debug, Default)]
pub(crate) struct LeaseSignal {
    raised: std::sync::atomic::AtomicBool,
    notify: Notify,
}

impl LeaseSignal {
    pub fn raise(&self) {
        self.raised.store(true, Ordering::SeqCst);
        self.notify.notify_waiters();
    }

    pub fn is_raised(&self) -> bool {
        self.raised.load(Ordering::SeqCst)
    }

    pub async fn raised(&self) {
        loop {
            let notified = self.notify.notified();
            if self.is_raised() {
                return;
            }
            notified.await;
        }
    }
}

/// How much of the store's lately measured write pace may wait unmarked (see the
/// [module docs](self)).
pub(crate) const MARK_HORIZON: Duration = Duration::from_secs(1);
/// The least the bound on unmarked attempts falls to (unless `max_unmarked` is lower):
/// two of the flusher's batches, so that one is written while the next fills.
pub(crate) const MIN_UNMARKED: usize = 2 * super::completer::MAX_BATCH;
/// The weight of each new measurement in the pace (an exponential moving average).
const PACE_WEIGHT: f64 = 0.25;

/// See the [module docs](self).
pub(crate) struct Tracker {
    /// `EngineConfig::max_unmarked`.
    max_unmarked: usize,
    /// How many ended attempts may wait for their marks now (see the module docs).
    bound: AtomicUsize,
    /// Marks a second the flusher's writes lately achieved (`None` before the first).
    pace: Mutex<Option<f64>>,
    held: Mutex<HashMap<TaskId, Held>>,
    /// Claims on their way to the database, plus attempts not yet finished.
    in_flight: AtomicUsize,
    /// Attempts that ended and whose marks are not applied yet.
    unmarked: AtomicUsize,
    /// Woken when `in_flight` reaches zero.
    idle: Notify,
    /// Woken when executor capacity frees up or marks drain below the bound.
    capacity_freed: Notify,
}

/// A claim in flight (see [`Tracker::claim`]): counted until dropped.
pub(crate) struct ClaimGuard<'a>(&'a Tracker);

impl Drop for ClaimGuard<'_> {
    fn drop(&mut self) {
        self.0.leave(1);
    }
}

impl Tracker {
    pub fn new(max_unmarked: usize) -> Tracker {
        Tracker {
            max_unmarked,
            bound: AtomicUsize::new(MIN_UNMARKED.min(max_unmarked)),
            pace: Mutex::new(None),
            held: Mutex::default(),
            in_flight: AtomicUsize::new(0),
            unmarked: AtomicUsize::new(0),
            idle: Notify::new(),
            capacity_freed: Notify::new(),
        }
    }

    fn held(&self) -> std::sync::MutexGuard<'_, HashMap<TaskId, Held>> {
        self.held.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Count a claim in flight until the guard is dropped (after its tasks are started).
    /// Taken before the caller reads the engine's state, so a shutdown that sees nothing
    /// in flight after it stopped claiming cannot miss a claim that saw it running.
    pub fn claim(&self) -> ClaimGuard<'_> {
        self.in_flight.fetch_add(1, Ordering::SeqCst);
        ClaimGuard(self)
    }

    /// A claimed task was handed to its executor. The signal is raised if a heartbeat
    /// finds the lease gone while the handler runs.
    pub fn started(&self, lease: Lease) -> Arc<LeaseSignal> {
        self.in_flight.fetch_add(1, Ordering::SeqCst);
        let lost = Arc::new(LeaseSignal::default());
        self.held().insert(
            lease.task_id,
            Held {
                lease,
                phase: Phase::Running,
                lost: Arc::clone(&lost),
            },
        );
        lost
    }

    /// The attempt under `lease` ended: its mark is on its way. The executor slot is
    /// free (the caller drops it); the task stays held until [`finished`](Self::finished).
    pub fn attempt_ended(&self, lease: Lease) {
        if let Some(h) = self.held().get_mut(&lease.task_id) {
            if h.lease == lease && h.phase == Phase::Running {
                h.phase = Phase::Marking;
            }
        }
        self.unmarked.fetch_add(1, Ordering::SeqCst);
        self.capacity_freed.notify_one();
    }

    /// The marks of these ended attempts were applied (or given up on): no longer held
    /// (a lease claimed again meanwhile is left alone), unmarked, nor in flight.
    pub fn finished(&self, leases: &[Lease]) {
        {
            let mut held = self.held();
            for l in leases {
                if held.get(&l.task_id).is_some_and(|h| h.lease == *l) {
                    held.remove(&l.task_id);
                }
            }
        }
        let n = leases.len();
        let before = self.unmarked.fetch_sub(n, Ordering::SeqCst);
        let bound = self.bound.load(Ordering::SeqCst);
        if before >= bound && before - n < bound {
            self.capacity_freed.notify_one();
        }
        self.leave(n);
    }

    /// The lease under which task `id` runs here, if its handler runs (not when its
    /// attempt ended, or its loss is known already).
    pub fn running_lease(&self, id: TaskId) -> Option<Lease> {
        self.held()
            .get(&id)
            .filter(|h| h.phase == Phase::Running)
            .map(|h| h.lease)
    }

    /// The leases to refresh: every held task but those whose lease is known lost.
    pub fn to_heartbeat(&self) -> Vec<Lease> {
        self.held()
            .values()
            .filter(|h| h.phase != Phase::Lost)
            .map(|h| h.lease)
            .collect()
    }

    /// A heartbeat found `lease` no longer current. `true` when this is news to report:
    /// the handler still runs under it (the task was recycled or reset meanwhile).
    /// `false` when the attempt has ended (its mark may have been applied just before
    /// the heartbeat: the mark's own answer decides), when the task is no longer held,
    /// or when the loss was reported already.
    pub fn lease_gone(&self, lease: Lease) -> bool {
        match self.held().get_mut(&lease.task_id) {
            Some(h) if h.lease == lease && h.phase == Phase::Running => {
                h.phase = Phase::Lost;
                h.lost.raise();
                true
            }
            _ => false,
        }
    }

    /// Whether so many ended attempts wait for their marks that claiming must pause (see
    /// the module docs and `EngineConfig::max_unmarked`).
    pub fn marks_backlogged(&self) -> bool {
        self.unmarked.load(Ordering::SeqCst) >= self.bound.load(Ordering::SeqCst)
    }

    /// The flusher wrote `n` marks in one call that took `took`: the pace, and with it
    /// the bound on unmarked attempts, follows (claims wait no longer once it rises).
    pub fn marks_written(&self, n: usize, took: Duration) {
        let sample = n as f64 / took.as_secs_f64().max(0.001);
        let pace = {
            let mut pace = self.pace.lock().unwrap_or_else(|p| p.into_inner());
            let p = pace.map_or(sample, |p| p + PACE_WEIGHT * (sample - p));
            *pace = Some(p);
            p
        };
        let bound = ((pace * MARK_HORIZON.as_secs_f64()) as usize)
            .max(MIN_UNMARKED)
            .min(self.max_unmarked);
        if self.bound.swap(bound, Ordering::SeqCst) < bound {
            self.capacity_freed.notify_one();
        }
    }

    /// Claims and attempts in flight.
    pub fn in_flight(&self) -> usize {
        self.in_flight.load(Ordering::SeqCst)
    }

    /// Woken when executor capacity frees up or marks drain below the bound.
    pub fn capacity_freed(&self) -> &Notify {
        &self.capacity_freed
    }

    /// Wake whoever waits for capacity (an executor slot was freed).
    pub fn slot_freed(&self) {
        self.capacity_freed.notify_one();
    }

    /// `n` fewer in flight; wakes `wait_idle` at zero.
    fn leave(&self, n: usize) {
        if self.in_flight.fetch_sub(n, Ordering::SeqCst) == n {
            self.idle.notify_waiters();
        }
    }

    /// Wait until nothing is in flight.
    pub async fn wait_idle(&self) {
        loop {
            let notified = self.idle.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            if self.in_flight() == 0 {
                return;
            }
            notified.await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lease(id: i64, token: i64) -> Lease {
        Lease { task_id: id, token }
    }

    #[test]
    fn a_lease_gone_after_the_attempt_ended_is_not_news() {
        let t = Tracker::new(4096);
        t.started(lease(1, 1));
        t.attempt_ended(lease(1, 1));
        // the mark committed before the heartbeat ran; its answer is still on its way
        assert_eq!(t.to_heartbeat(), vec![lease(1, 1)], "still heartbeated");
        assert!(!t.lease_gone(lease(1, 1)));
        t.finished(&[lease(1, 1)]);
        assert!(!t.lease_gone(lease(1, 1)), "no longer held");
        assert!(t.to_heartbeat().is_empty());
        assert_eq!(t.in_flight(), 0);
    }

    #[test]
    fn a_lost_lease_is_news_once_and_no_longer_heartbeated() {
        let t = Tracker::new(4096);
        t.started(lease(1, 1));
        t.started(lease(2, 1));
        assert!(t.lease_gone(lease(1, 1)));
        assert!(!t.lease_gone(lease(1, 1)), "reported once");
        assert_eq!(t.to_heartbeat(), vec![lease(2, 1)]);
        // its attempt still ends and is finished normally
        t.attempt_ended(lease(1, 1));
        assert!(!t.lease_gone(lease(1, 1)));
        t.finished(&[lease(1, 1)]);
        assert_eq!(t.in_flight(), 1);
    }

    #[test]
    fn a_lease_claimed_again_is_not_touched_by_the_old_one() {
        let t = Tracker::new(4096);
        t.started(lease(1, 1));
        t.attempt_ended(lease(1, 1));
        // recycled and claimed again by this engine before the old mark's answer
        t.started(lease(1, 2));
        assert!(!t.lease_gone(lease(1, 1)), "an old lease is not news");
        t.finished(&[lease(1, 1)]);
        assert_eq!(
            t.to_heartbeat(),
            vec![lease(1, 2)],
            "the new claim stays held"
        );
    }
}
