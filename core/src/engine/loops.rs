//! The engine's background jobs: the poller and the recycler (the safety net),
//! heartbeats, retention.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::sync::watch;

use std::collections::{BTreeSet, HashMap};

use super::executor::dispatch;
use super::keys::release_keys;
use super::{Hints, Origin, Shared, State};
use crate::model::Lease;
use crate::notify::{Wake, Wakes};
use crate::store::TaskStore;

/// Sleep `d`, or until the engine leaves `Running` (returns false then).
pub(crate) async fn pause<S>(
    shared: &Shared<S>,
    state: &mut watch::Receiver<State>,
    d: Duration,
) -> bool {
    tokio::select! {
        _ = tokio::time::sleep(d) => {}
        _ = state.wait_for(|s| *s != State::Running) => return false,
    }
    shared.state() == State::Running
}

/// The dead-worker sweep, on its own clock: after the first-poll delay, then every poll
/// interval but no more often than every `dead_after / 8`, recycle running tasks whose
/// owner stopped heartbeating (a full batch sweeps again at once), and wake the poller
/// when some came back, so they are claimed now rather than at its next tick.
///
/// A task is taken as dead only after `dead_after` of silence, so a sweep every
/// `dead_after / 8` finds it at most an eighth later than a sweep on every poll would;
/// a short poll interval (milliseconds, to pick up new work fast) does not turn the
/// sweep into a statement per engine every few milliseconds.
///
/// It runs apart from the poller so that a draining poller's claims never wait behind
/// it (see `bench/NOTES.md`). Tasks it gives back are claimed by the next poll, which it
/// triggers.
///
/// After an outage (a failed sweep or heartbeat) the sweep refreshes this instance's own
/// leases first and waits one heartbeat interval, so that neither its own tasks nor those
/// of instances whose heartbeats failed the same way are taken as dead: without that, the
/// first sweep after the store comes back recycles every task that ran through the
/// outage, and each of them runs twice. A stall counts as an outage: a heartbeat or sweep
/// that waited on the store [`stall_after`] or longer, or a heartbeat still waiting that
/// long. A stalled store commits the heartbeats it held with the time they were sent, so
/// their leases look dead the moment they are visible (a Galera cluster waits out a node
/// that died or was cut off for about five seconds; the chaos suite's Galera lane ran
/// 147 tasks twice after 8 node faults before this, see the guide's Proof under fire).
///
/// A sweep that recycled something, or passed over a dead task whose row another
/// transaction held at that moment (`SKIP LOCKED`: a mark, a claim reading one row past
/// the end of its range on MySQL; counted in [`Recycled::passed_over`]), sweeps again
/// [`RESWEEP`] later, not a whole interval later: dead tasks come in bursts (an instance
/// died), and one passed over is picked up once its row is free, however long the
/// interval (an hour, with a long poll interval).
///
/// [`Recycled::passed_over`]: crate::Recycled::passed_over
pub(crate) async fn recycler<S: TaskStore + Clone>(shared: Arc<Shared<S>>) {
    let mut state = shared.state.subscribe();
    let cfg = &shared.config;
    let every = cfg.poll_interval.max(cfg.dead_after / 8);
    if !pause(&shared, &mut state, cfg.first_poll_delay).await {
        return;
    }
    let mut key_cursor: Option<String> = None;
    let mut registered: Option<std::time::Instant> = None;
    // the last sweep failed: the store may have been away (see below)
    let mut troubled = false;
    loop {
        let mut found = false;
        if registered.is_none_or(|at| at.elapsed() >= REGISTER_EVERY) {
            // the fleet's handled types: this instance's, now and then again
            match shared.store.register_event_types(&shared.event_types).await {
                Ok(()) => registered = Some(std::time::Instant::now()),
                Err(e) => {
                    shared.counters.store_errors("*");
                    tracing::warn!(owner = %shared.owner, error = %e,
                        "could not register this engine's event types; trying again");
                }
            }
        }
        sweep_keys(&shared, &mut key_cursor).await;
        // `outage_seen`, not only `leases_unrefreshed`: when this instance's heartbeat
        // loop is the first to get through, it clears `leases_unrefreshed`, and a sweep
        // right then recycled the leases of instances whose refreshes were still on
        // their way (the chaos suite's outage lane: a sweep 234 ms after the store came
        // back, during another worker's refresh of 228 leases, ran 80 tasks twice)
        if troubled
            || shared.outage_seen.load(Ordering::SeqCst)
            || shared.leases_unrefreshed.load(Ordering::SeqCst)
            || leases_stale(&shared)
        {
            // Back from an outage: this instance's own leases went unrefreshed while the
            // store was away, and may look dead to a sweep. Refresh them first (which
            // also shows the store answers again; holding none, registering this
            // instance's types shows it), and give the other instances one heartbeat
            // interval from then to refresh theirs (their heartbeats retry sooner after
            // a failure) before recycling anything.
            let back = if shared.tracker.to_heartbeat().is_empty() {
                shared
                    .store
                    .register_event_types(&shared.event_types)
                    .await
                    .is_ok()
            } else {
                refresh_leases(&shared).await.is_ok()
            };
            if !back {
                if !pause(&shared, &mut state, every).await {
                    return;
                }
                continue;
            }
            troubled = false;
            shared.outage_seen.store(false, Ordering::SeqCst);
            if !pause(&shared, &mut state, cfg.heartbeat_interval).await {
                return;
            }
            // a failure or stall seen meanwhile leaves `outage_seen` set for the next
            // sweep to wait out: waiting it out before this one could starve the sweep
            // under heartbeats that keep taking `stall_after` (an overloaded server)
            if refresh_leases(&shared).await.is_err() {
                troubled = true;
                continue;
            }
        }
        let began = std::time::Instant::now();
        // widened by how long the store lately took to answer (see `lag`)
        let dead_after = shared.lag.dead_after(cfg.dead_after);
        let swept = shared
            .store
            .recycle_dead(dead_after, cfg.recycle_batch)
            .await;
        // a sweep that waited on a stalled store: the others' heartbeats waited too, and
        // the next sweep first gives them time to refresh (as after an outage)
        let took = began.elapsed();
        troubled |= took >= stall_after(cfg);
        if swept.is_ok() {
            shared.lag.record(took);
        }
        let full = match swept {
            Ok(r) => {
                found = r.passed_over > 0;
                if r.total() > 0 {
                    found = true;
                    shared.counters.recycled_n(r.total());
                    tracing::warn!(
                        to_pending = r.to_pending,
                        to_failed = r.to_failed,
                        "recycled tasks whose owner stopped heartbeating"
                    );
                    if r.to_pending > 0 {
                        shared.wake_all();
                    }
                }
                r.total() >= cfg.recycle_batch as u64
            }
            Err(e) => {
                shared.counters.store_errors("*");
                tracing::warn!(error = %e, "recycle_dead failed");
                troubled = true;
                false
            }
        };
        if full {
            if shared.state() != State::Running {
                return;
            }
            tokio::task::yield_now().await;
            continue;
        }
        let next = if found { every.min(RESWEEP) } else { every };
        if !pause(&shared, &mut state, next).await {
            return;
        }
    }
}

/// One page of the key sweep: release up to [`KEY_SWEEP_PAGE`] order keys after
/// `cursor`, and move the cursor (back to the start after the last page). A task whose
/// key was not moved along (its engine died between recording the outcome and releasing
/// the key, or the dead-worker sweep parked it) is found within one pass over the keys.
async fn sweep_keys<S: TaskStore + Clone>(shared: &Shared<S>, cursor: &mut Option<String>) {
    match shared
        .store
        .order_keys(cursor.as_deref(), KEY_SWEEP_PAGE)
        .await
    {
        Ok(page) => {
            *cursor = if page.len() < KEY_SWEEP_PAGE {
                None
            } else {
                page.last().cloned()
            };
            if !page.is_empty() {
                release_keys(shared, &page).await;
            }
        }
        Err(e) => {
            shared.counters.store_errors("*");
            tracing::warn!(error = %e, "order_keys failed");
        }
    }
}

/// How often an engine registers its event types again (their `last_seen`).
const REGISTER_EVERY: Duration = Duration::from_secs(3600);

/// Keys per page of the key sweep.
const KEY_SWEEP_PAGE: usize = 100;

/// How soon a sweep that recycled something sweeps again (see [`recycler`]).
const RESWEEP: std::time::Duration = std::time::Duration::from_secs(1);

/// What one poll round covers.
pub(crate) enum Round {
    /// Every event type (a tick of the poll interval, `poll_now`, recycled tasks, a
    /// listener's reconnect, capacity freed after a full executor).
    All,
    /// Only these event types (wake-ups from the notifier).
    Types(BTreeSet<String>),
}

impl Round {
    fn covers(&self, event_type: &str) -> bool {
        match self {
            Round::All => true,
            Round::Types(t) => t.contains(event_type),
        }
    }

    /// Add what was asked for since the round was decided.
    fn merge(self, hints: Hints) -> Round {
        match self {
            Round::All => Round::All,
            _ if hints.all => Round::All,
            Round::Types(mut t) => {
                t.extend(hints.types);
                Round::Types(t)
            }
        }
    }
}

/// The poller: a round over every event type at each tick (the first one after the
/// first-poll delay, then every poll interval), and in between, rounds over the event
/// types a wake-up names. A round claims due tasks per event type up to each executor's
/// free capacity, and dispatches them. A batch that came back full polls again at once
/// (drain) when capacity is free, or as soon as enough frees up.
///
/// A round over several event types starts with one claim for all of them (see
/// [`probe`]): an idle engine costs the database one statement per tick, whatever the
/// number of types it handles.
///
/// Between ticks it also polls an event type when a task this instance knows of
/// becomes due (a retry it scheduled, a delayed task it enqueued).
///
/// Wake-ups never postpone the tick: a steady stream of them for one event type still
/// lets every other type be polled each interval.
pub(crate) async fn poller<S: TaskStore + Clone>(shared: Arc<Shared<S>>) {
    let mut state = shared.state.subscribe();
    let cfg = &shared.config;
    let mut next_tick = tokio::time::Instant::now() + cfg.first_poll_delay;
    // The first gauge refresh waits one `gauge_interval` after the first poll: instances
    // that start together (a deploy) would all count at once the backlog they are about
    // to drain.
    let mut last_gauges: Option<Instant> = None;
    let mut gauges = super::BacklogGauges::default();
    let mut last_queues: Option<Instant> = None;
    loop {
        let mut round = loop {
            let due = shared.next_due().filter(|d| *d < next_tick);
            tokio::select! {
                _ = tokio::time::sleep_until(due.unwrap_or(next_tick)) => {
                    if due.is_none() {
                        break Round::All;
                    }
                    let types = shared.take_due();
                    if !types.is_empty() {
                        break Round::Types(types);
                    }
                }
                _ = shared.wake.notified() => break Round::Types(BTreeSet::new()),
                _ = shared.due_changed.notified() => {} // look at the earliest again
                _ = state.wait_for(|s| *s != State::Running) => return,
            }
        };
        // the first round after a tick or a wake-up probes; the drain's rounds do not
        let mut probing = true;
        loop {
            if shared.state() != State::Running {
                return;
            }
            round = round.merge(shared.take_hints());
            if matches!(round, Round::All) {
                next_tick = tokio::time::Instant::now() + cfg.poll_interval;
            }
            if last_queues.is_none_or(|t| t.elapsed() >= cfg.queue_refresh) {
                last_queues = Some(Instant::now());
                refresh_limits(&shared).await;
            }
            let polled = poll_round(&shared, &round, std::mem::take(&mut probing)).await;
            let (poll_again, wait_for_capacity) = match polled {
                Some(r) => r,
                None => return,
            };
            let gauges_due = last_gauges.get_or_insert_with(Instant::now);
            if cfg.backlog_gauges && gauges_due.elapsed() >= cfg.gauge_interval {
                last_gauges = Some(Instant::now());
                update_gauges(&shared, &mut gauges).await;
            }
            if poll_again {
                tokio::task::yield_now().await;
                continue;
            }
            if !wait_for_capacity {
                break;
            }
            // A full executor: poll again once a useful share of it is free, or at the
            // next tick, whichever comes first.
            let deadline = tokio::time::Instant::now() + cfg.poll_interval;
            loop {
                tokio::select! {
                    _ = shared.tracker.capacity_freed().notified() => {}
                    _ = tokio::time::sleep_until(deadline) => break,
                    _ = shared.wake.notified() => break,
                    _ = state.wait_for(|s| *s != State::Running) => return,
                }
                let ready = !shared.tracker.marks_backlogged()
                    && shared.executors.values().any(|e| {
                        let total = e.options.concurrency + e.options.queue_capacity;
                        let want = cfg.batch_size.min(total.div_ceil(2)).max(1);
                        e.slots.available_permits() >= want
                    });
                if ready {
                    break;
                }
            }
            round = Round::All;
        }
    }
}

/// Read which handled event types have a global concurrency or rate limit, and each
/// rate's window (see
/// [`EngineConfig::queue_refresh`](crate::EngineConfig::queue_refresh)). A failed read
/// keeps what the last one found.
async fn refresh_limits<S: TaskStore + Clone>(shared: &Shared<S>) {
    match shared.store.queues().await {
        Ok(queues) => {
            let limited: HashMap<String, Option<Duration>> = queues
                .into_iter()
                .filter(|q| {
                    (q.concurrency.is_some() || q.rate.is_some())
                        && shared.executors.contains_key(&q.event_type)
                })
                .map(|q| (q.event_type, q.rate.map(|r| r.per)))
                .collect();
            *shared.limited.lock().unwrap_or_else(|p| p.into_inner()) = limited;
        }
        Err(e) => {
            shared.counters.store_errors("*");
            tracing::warn!(error = %e, "reading the queues' settings failed: keeping the last ones read");
        }
    }
}

/// How soon a poll of an event type that failed is tried again (when the tick is later).
const CLAIM_RETRY: Duration = Duration::from_secs(1);

/// One poll round: claim and dispatch per event type the round covers (after a
/// [`probe`] when `probing`). Returns whether to poll again at once (a full batch with
/// capacity left) and whether to wait for capacity (a full executor), or `None` when
/// the engine stopped running.
pub(crate) async fn poll_round<S: TaskStore + Clone>(
    shared: &Arc<Shared<S>>,
    round: &Round,
    probing: bool,
) -> Option<(bool, bool)> {
    let cfg = &shared.config;
    let mut poll_again = false;
    let mut wait_for_capacity = false;
    // after a probe that drained its types, only the limited types (which it left out)
    let mut only_limited = false;
    if probing {
        match probe(shared, round).await? {
            Probe::Drained { full_executors } => {
                wait_for_capacity = full_executors;
                only_limited = true;
            }
            Probe::More => {}
        }
    }
    let types = shared
        .event_types
        .iter()
        .filter(|t| round.covers(t) && (!only_limited || shared.is_limited(t)));
    for event_type in types {
        // held until this batch is dispatched
        let _claim = shared.begin_claim()?;
        let Some(exec) = shared.executors.get(event_type) else {
            continue;
        };
        let n = cfg.batch_size.min(exec.slots.available_permits());
        if n == 0 || shared.tracker.marks_backlogged() {
            wait_for_capacity = true;
            continue;
        }
        let Ok(mut permits) = Arc::clone(&exec.slots).try_acquire_many_owned(n as u32) else {
            continue;
        };
        let types = std::slice::from_ref(event_type);
        match shared.store.claim_batch(&shared.owner, types, n).await {
            Ok(tasks) => {
                let full = tasks.len() == n;
                shared.claimed_types(types, !full);
                if let (false, Some(window)) = (tasks.is_empty(), shared.rate_window(event_type)) {
                    // these starts leave the rate's window then, and their room comes
                    // back: poll the type again at that time, not at the next tick
                    shared.wake_after(window, event_type);
                }
                for task in tasks {
                    let Some(slot) = permits.split(1) else {
                        // cannot happen: n permits for at most n tasks
                        break;
                    };
                    polled(shared, exec, task, slot);
                }
                drop(permits);
                if full {
                    if exec.slots.available_permits() > 0 {
                        poll_again = true;
                    } else {
                        wait_for_capacity = true;
                    }
                }
            }
            Err(e) => {
                shared.counters.store_errors(event_type);
                tracing::warn!(error = %e, %event_type, "claim_batch failed: polling this type again in 1 s");
                // a wake-up's poll that failed is not left for the next tick (which may
                // be far away): this type is polled again shortly
                shared.wake_after(CLAIM_RETRY, event_type);
            }
        }
    }
    Some((poll_again, wait_for_capacity))
}

/// Count a task a poll claimed and hand it to its executor, in the slot reserved for it.
pub(crate) fn polled<S: TaskStore + Clone>(
    shared: &Arc<Shared<S>>,
    exec: &Arc<super::executor::Executor>,
    task: crate::model::Task,
    slot: tokio::sync::OwnedSemaphorePermit,
) {
    shared.counters.polled(&task.event_type);
    dispatch(
        Arc::clone(shared),
        Arc::clone(exec),
        task,
        slot,
        Origin::Poll,
    );
}

/// What a [`probe`] found.
enum Probe {
    /// Every type it claimed for has nothing more due (its claims came back short):
    /// the round is over. `full_executors`: some types were left out, their executors
    /// full.
    Drained { full_executors: bool },
    /// More may be due (a claim came back full, or the probe did not apply): the round
    /// goes on with a claim per type.
    More,
}

/// The first claim of a round over several event types: one `claim_batch` for all the
/// types with free capacity (in chunks of `MAX_EVENT_TYPES`), each claim as large as
/// the smallest free capacity among them, so that every task it returns has a slot
/// waiting in its executor. A claim that comes back short has claimed everything due of
/// its types: an idle engine polls with one statement per tick, not one per type. One
/// that comes back full leaves the rest of the round to the claims per type. A round
/// over one type does not probe (its own claim is the probe).
async fn probe<S: TaskStore + Clone>(shared: &Arc<Shared<S>>, round: &Round) -> Option<Probe> {
    let cfg = &shared.config;
    if shared.tracker.marks_backlogged() {
        return Some(Probe::More);
    }
    let mut full_executors = false;
    let mut ready = Vec::new();
    // a limited type is claimed on its own: a claim capped by its room would come back
    // short and end the round with more of it due
    let types = shared
        .event_types
        .iter()
        .filter(|t| round.covers(t) && !shared.is_limited(t));
    for event_type in types {
        let Some(exec) = shared.executors.get(event_type) else {
            continue;
        };
        match cfg.batch_size.min(exec.slots.available_permits()) {
            0 => full_executors = true,
            n => ready.push((event_type, exec, n)),
        }
    }
    if ready.len() < 2 {
        return Some(Probe::More);
    }
    let n = ready.iter().map(|r| r.2).min().unwrap_or(1);
    let mut more = false;
    for chunk in ready.chunks(crate::limits::MAX_EVENT_TYPES) {
        // held until this batch is dispatched
        let _claim = shared.begin_claim()?;
        let mut permits = HashMap::new();
        for (event_type, exec, _) in chunk {
            match Arc::clone(&exec.slots).try_acquire_many_owned(n as u32) {
                Ok(p) => {
                    permits.insert(event_type.as_str(), (Arc::clone(exec), p));
                }
                // taken meanwhile (a run-ahead): the claims per type will see to it
                Err(_) => return Some(Probe::More),
            }
        }
        let types: Vec<String> = chunk.iter().map(|r| r.0.clone()).collect();
        match shared.store.claim_batch(&shared.owner, &types, n).await {
            Ok(tasks) => {
                more |= tasks.len() == n;
                shared.claimed_types(&types, tasks.len() < n);
                for task in tasks {
                    let Some((exec, slots)) = permits.get_mut(task.event_type.as_str()) else {
                        // cannot happen: the claim names these types only
                        continue;
                    };
                    let Some(slot) = slots.split(1) else {
                        // cannot happen: n permits per type for at most n tasks
                        continue;
                    };
                    polled(shared, exec, task, slot);
                }
            }
            Err(e) => {
                tracing::warn!(error = %e, types = types.len(),
                    "claim_batch failed: polling these types again in 1 s");
                for event_type in &types {
                    shared.counters.store_errors(event_type);
                    shared.wake_after(CLAIM_RETRY, event_type);
                }
            }
        }
    }
    Some(if more {
        Probe::More
    } else {
        Probe::Drained { full_executors }
    })
}

/// Listen to the engine's notifier while the engine runs: reconnect after a backoff
/// (100 ms doubling to 5 s, back to 100 ms after a connection that lasted 10 s) when the
/// connection is lost. The first subscription's [`Wake::All`] is ignored when it comes
/// before the first poll (which covers every type anyway, after the first-poll delay
/// that keeps a restart from stampeding); after a reconnect it polls every type at once.
pub(crate) async fn listener<S: TaskStore + Clone>(shared: Arc<Shared<S>>) {
    const MIN: Duration = Duration::from_millis(100);
    const MAX: Duration = Duration::from_secs(5);
    let Some(notifier) = shared.notifier.clone() else {
        return;
    };
    let mut state = shared.state.subscribe();
    let started = Instant::now();
    let mut backoff = MIN;
    let mut first_session = true;
    loop {
        let target = Arc::clone(&shared);
        let wakes = Wakes::new(move |w| {
            // The first subscription's "poll everything" before the first poll: that
            // poll, still to come, covers every type. After a reconnect it always counts.
            if w == Wake::All && first_session && started.elapsed() < target.config.first_poll_delay
            {
                return;
            }
            target.woken(w)
        });
        first_session = false;
        let since = Instant::now();
        let result = tokio::select! {
            r = notifier.listen(&wakes) => r,
            _ = state.wait_for(|s| *s != State::Running) => return,
        };
        shared.counters.notifier_errors("*");
        match result {
            Ok(()) => {
                tracing::warn!(owner = %shared.owner, "notifier listener ended: listening again")
            }
            Err(e) => tracing::warn!(owner = %shared.owner, error = %e,
                "notifier listener lost its connection: reconnecting (the poller covers the gap)"),
        }
        if since.elapsed() >= Duration::from_secs(10) {
            backoff = MIN;
        }
        if !pause(&shared, &mut state, backoff).await {
            return;
        }
        backoff = (backoff * 2).min(MAX);
    }
}

/// Backlog gauges from the store's backlog counts (every status but succeeded: their
/// cost follows the backlog, not the succeeded rows retained).
async fn update_gauges<S: TaskStore + Clone>(
    shared: &Shared<S>,
    gauges: &mut super::BacklogGauges,
) {
    match gauges.refresh(&shared.store).await {
        Ok(unhandled) => {
            for (event_type, waiting) in unhandled {
                tracing::warn!(owner = %shared.owner, %event_type, waiting,
                    "tasks wait for an event type no engine has a handler for (a typo? a \
                     handler not deployed?): they will not run until one does");
            }
        }
        Err(e) => {
            shared.counters.store_errors("*");
            tracing::debug!(error = %e, "backlog counts failed");
        }
    }
}

/// Refresh the leases of every held task, so none is recycled while this instance lives.
/// Runs until the engine has stopped (in-flight tasks keep their heartbeats while
/// shutdown drains them). After a failed heartbeat the next one comes a quarter interval
/// later: once the store is back, this instance's leases are refreshed before the other
/// instances' sweeps (which wait a whole interval after an outage) can take them.
pub(crate) async fn heartbeats<S: TaskStore + Clone>(shared: Arc<Shared<S>>) {
    let mut state = shared.state.subscribe();
    loop {
        let next = if shared.leases_unrefreshed.load(Ordering::SeqCst) {
            shared.config.heartbeat_interval / 4
        } else {
            shared.config.heartbeat_interval
        };
        tokio::select! {
            _ = tokio::time::sleep(next) => {}
            _ = state.wait_for(|s| *s == State::Stopped) => return,
        }
        let _ = refresh_leases(&shared).await;
    }
}

/// How long a lease refresh may wait on the store before the leases it wrote count as
/// old: its statement took the time when it ran, and a store that stalled (a Galera
/// cluster waiting out a node that died or was cut off, a network that delivered late)
/// commits it seconds later, so the lease may look dead to a sweep the moment it is
/// visible. The larger of one heartbeat interval and `dead_after` less two intervals.
fn stall_after(cfg: &super::EngineConfig) -> Duration {
    cfg.dead_after
        .saturating_sub(cfg.heartbeat_interval * 2)
        .max(cfg.heartbeat_interval)
}

/// Whether this instance's leases may look dead to a sweep: it holds some, and the last
/// refresh the store applied began [`stall_after`] ago or longer (one is still waiting
/// on the store, or came back that late). Its sweep then refreshes them and waits a
/// heartbeat interval before recycling, as after an outage: the other instances'
/// refreshes waited on the same store and are sent again at once.
fn leases_stale<S>(shared: &Shared<S>) -> bool {
    let refreshed = *shared
        .last_refreshed
        .lock()
        .unwrap_or_else(|p| p.into_inner());
    refreshed.is_some_and(|at| at.elapsed() >= stall_after(&shared.config))
        && !shared.tracker.to_heartbeat().is_empty()
}

/// One heartbeat of every held task's lease (nothing to do when none is held); a failure
/// is counted, logged and remembered in `leases_unrefreshed` until a refresh succeeds.
/// A refresh that waited on the store [`stall_after`] or longer counts as failed too
/// (without counting a store error): the next one is sent a quarter interval later.
/// One refresh at a time: a caller waits for the one in flight, then sends its own.
async fn refresh_leases<S: TaskStore + Clone>(shared: &Shared<S>) -> Result<(), ()> {
    // after the one in flight, if any: a second at once would wait on its row locks
    let _one = shared.refreshing.lock().await;
    let leases = shared.tracker.to_heartbeat();
    let began = std::time::Instant::now();
    let refreshed = |at| {
        *shared
            .last_refreshed
            .lock()
            .unwrap_or_else(|p| p.into_inner()) = Some(at);
    };
    if leases.is_empty() {
        // nothing held, nothing that could look dead
        shared.leases_unrefreshed.store(false, Ordering::SeqCst);
        refreshed(began);
        return Ok(());
    }
    match shared.store.heartbeat(&leases).await {
        Ok(flags) => {
            refreshed(began);
            for (lease, ok) in leases.iter().zip(flags) {
                if !ok {
                    lease_gone(shared, *lease);
                }
            }
            let took = began.elapsed();
            shared.lag.record(took);
            if took >= stall_after(&shared.config) {
                shared.leases_unrefreshed.store(true, Ordering::SeqCst);
                shared.outage_seen.store(true, Ordering::SeqCst);
                tracing::warn!(
                    took_ms = took.as_millis() as u64,
                    "a heartbeat waited on the store so long that the leases it wrote may \
                     already look dead: refreshing again at once, and sweeping only after"
                );
                return Err(());
            }
            shared.leases_unrefreshed.store(false, Ordering::SeqCst);
            Ok(())
        }
        Err(e) => {
            shared.leases_unrefreshed.store(true, Ordering::SeqCst);
            shared.outage_seen.store(true, Ordering::SeqCst);
            shared.counters.store_errors("*");
            tracing::warn!(error = %e, "heartbeat failed");
            Err(())
        }
    }
}

/// A heartbeat found `lease` gone: tell its handler, if it still runs under it (once the
/// attempt ended, its mark, which may have been applied just before, decides).
fn lease_gone<S>(shared: &Shared<S>, lease: Lease) {
    if shared.tracker.lease_gone(lease) {
        shared.counters.leases_lost("*");
        tracing::warn!(
            owner = %shared.owner,
            task_id = lease.task_id,
            lease = lease.token,
            "heartbeat found the lease gone while the handler runs: the task was recycled, reset or cancelled; its result will be refused"
        );
    }
}

/// An operator revoked the lease of a task this instance runs ([`Wake::Revoked`]): a
/// heartbeat of that one lease, now, tells whether it is gone (a stale or stray
/// announcement finds it current, and refreshes it). A failure leaves the news to the
/// next heartbeat.
pub(crate) async fn check_lease<S: TaskStore + Clone>(shared: Arc<Shared<S>>, lease: Lease) {
    match shared.store.heartbeat(std::slice::from_ref(&lease)).await {
        Ok(flags) => {
            if flags.first() == Some(&false) {
                lease_gone(&shared, lease);
            }
        }
        Err(e) => {
            shared.counters.store_errors("*");
            tracing::debug!(error = %e, task_id = lease.task_id,
                "checking a revoked lease failed: the next heartbeat will tell");
        }
    }
}
