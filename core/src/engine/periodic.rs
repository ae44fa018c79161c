//! The periodic tasks an engine fires ([`Periodic`]): registered with the builder or
//! added and removed while it runs, and the clock that enqueues each tick's task.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use chrono::{DateTime, Utc};
use tokio::sync::Notify;

use super::loops::pause;
use super::{Engine, Shared, State};
use crate::error::{Error, ErrorKind, Result};
use crate::schedule::{Missed, Periodic};
use crate::store::TaskStore;

/// The periodic tasks an instance fires, each with the earliest tick it may fire next.
#[derive(Default)]
pub(crate) struct Periodics {
    entries: Mutex<Vec<Scheduled>>,
    /// Wakes the clock when an entry is added.
    changed: Notify,
}

struct Scheduled {
    periodic: Periodic,
    next: DateTime<Utc>,
}

impl Periodics {
    /// The builder's periodic tasks, their first ticks counted from `start`.
    pub fn new(periodic: Vec<Periodic>, start: DateTime<Utc>, retention: Option<Duration>) -> Self {
        let entries = periodic
            .into_iter()
            .map(|p| Scheduled {
                next: first_tick(&p, start, retention),
                periodic: p,
            })
            .collect();
        Periodics {
            entries: Mutex::new(entries),
            changed: Notify::new(),
        }
    }

    fn entries(&self) -> std::sync::MutexGuard<'_, Vec<Scheduled>> {
        self.entries.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// The earliest tick `p` may fire when it starts being fired at `start`: the next one,
/// or with [`Missed::CatchUpOne`] the latest past one while it is younger than
/// [`catch_up_bound`] (an older tick's row may have been purged: it would run again).
fn first_tick(p: &Periodic, start: DateTime<Utc>, retention: Option<Duration>) -> DateTime<Utc> {
    let last = p.schedule().at_or_before(start);
    let age = (start - last).to_std().unwrap_or_default();
    match (p.missed_policy(), catch_up_bound(retention)) {
        (Missed::CatchUpOne, Some(bound)) if age >= bound => p.schedule().after(start),
        (Missed::CatchUpOne, _) => last,
        _ => p.schedule().after(start),
    }
}

/// How old a missed tick may be for [`Missed::CatchUpOne`](crate::Missed::CatchUpOne)
/// to fire it: younger than the succeeded tasks' `retention`, less a margin for the
/// clocks of the application and the database (a tenth of it, at most a minute). A tick
/// as old as that may have had its row purged, and firing it would run it again.
/// `None` (no retention): any age.
fn catch_up_bound(retention: Option<Duration>) -> Option<Duration> {
    retention.map(|r| r.saturating_sub((r / 10).min(Duration::from_secs(60))))
}

/// The longest the clock sleeps (so a failed tick is retried, and a clock that jumps is
/// noticed, within it).
const SCHEDULER_MAX_SLEEP: Duration = Duration::from_secs(1);

/// The periodic tasks' clock: at each tick of each [`Periodic`], enqueue its task (keyed
/// by the tick, so of all the instances firing it one inserts), then sleep until the
/// next tick. A tick whose enqueue fails is tried again a second later, until the next
/// tick replaces it. When ticks were slept through (a pause), the latest one is fired
/// and the older ones skipped. Runs for the engine's life: periodic tasks come and go
/// ([`Engine::add_periodic`], [`Engine::remove_periodic`]).
pub(crate) async fn scheduler<S: TaskStore + Clone>(shared: Arc<Shared<S>>) {
    let mut state = shared.state.subscribe();
    loop {
        let now = Utc::now();
        // what is due, taken under the lock and enqueued without it
        let due: Vec<(String, DateTime<Utc>, crate::model::NewTask)> = shared
            .periodic
            .entries()
            .iter()
            .filter_map(|e| {
                let tick = e.periodic.schedule().at_or_before(now);
                (tick >= e.next)
                    .then(|| (e.periodic.name().to_owned(), tick, e.periodic.task_at(tick)))
            })
            .collect();
        let mut failed = false;
        for (name, tick, task) in due {
            let event_type = task.event_type().to_owned();
            match shared.store.enqueue(task).await {
                Ok(e) => {
                    if e.created {
                        tracing::debug!(periodic = %name, %tick, task_id = e.id,
                            "periodic task enqueued");
                        shared.wake_after(Duration::ZERO, &event_type);
                    }
                    // removed meanwhile: nothing to move on
                    if let Some(entry) = shared
                        .periodic
                        .entries()
                        .iter_mut()
                        .find(|x| x.periodic.name() == name)
                    {
                        entry.next = entry.periodic.schedule().after(tick);
                    }
                }
                Err(e) => {
                    failed = true;
                    shared.counters.store_errors(&event_type);
                    tracing::warn!(periodic = %name, %tick, error = %e,
                        "could not enqueue a periodic task; trying again");
                }
            }
        }
        let now = Utc::now();
        let wait = shared
            .periodic
            .entries()
            .iter()
            .map(|e| (e.next - now).to_std().unwrap_or(Duration::ZERO))
            .min()
            .unwrap_or(SCHEDULER_MAX_SLEEP)
            .clamp(Duration::from_millis(1), SCHEDULER_MAX_SLEEP);
        let wait = if failed { SCHEDULER_MAX_SLEEP } else { wait };
        tokio::select! {
            _ = shared.periodic.changed.notified() => {}
            running = pause(&shared, &mut state, wait) => if !running {
                return;
            },
        }
    }
}

impl<S: TaskStore + Clone> Engine<S> {
    /// Start firing `periodic` from this instance, as if it had been registered with
    /// [`EngineBuilder::periodic`](crate::EngineBuilder::periodic) now: its missed-ticks
    /// policy counts from now ([`Missed::CatchUpOne`] fires the latest past tick, within
    /// the retention), and each tick still fires once across every instance that fires
    /// it. Each instance fires what it was given: add it on every instance that should
    /// (any one is enough for the ticks to fire).
    ///
    /// `InvalidInput` for a bad name or template (as the builder checks them) or a name
    /// this instance fires already; `Conflict` once the engine is shutting down.
    ///
    /// ```no_run
    /// # async fn demo<S: backstop_core::TaskStore + Clone>(engine: backstop_core::Engine<S>) -> backstop_core::Result<()> {
    /// use backstop_core::{NewTask, Periodic, Schedule};
    /// let report = Periodic::new(
    ///     "tenant-42-report",
    ///     Schedule::cron("0 6 * * mon")?.in_zone("Europe/Paris")?,
    ///     NewTask::new("BUILD_REPORT", "-"),
    /// );
    /// engine.add_periodic(report)?;
    /// // … the tenant leaves
    /// assert!(engine.remove_periodic("tenant-42-report"));
    /// # Ok(()) }
    /// ```
    pub fn add_periodic(&self, periodic: Periodic) -> Result<()> {
        const OP: &str = "add_periodic";
        let shared = &self.inner.shared;
        periodic
            .validate(crate::limits::MAX_PAYLOAD_LIMIT)
            .map_err(|e| Error::invalid_input(OP, e.message().to_owned()))?;
        if shared.state() != State::Running {
            return Err(Error::new(
                ErrorKind::Conflict,
                OP,
                "the engine is shutting down: no periodic task is added",
            ));
        }
        let mut entries = shared.periodic.entries();
        if entries.iter().any(|e| e.periodic.name() == periodic.name()) {
            return Err(Error::invalid_input(
                OP,
                format!(
                    "this engine fires a periodic task named {:?} already (remove it first)",
                    periodic.name()
                ),
            ));
        }
        entries.push(Scheduled {
            next: first_tick(&periodic, Utc::now(), shared.config.retention),
            periodic,
        });
        drop(entries);
        shared.periodic.changed.notify_one();
        Ok(())
    }

    /// Stop firing the periodic task `name` from this instance; `false` when it fires
    /// none of that name. Its tick tasks already enqueued stay (cancel them as any
    /// task); other instances that fire it go on.
    pub fn remove_periodic(&self, name: &str) -> bool {
        let mut entries = self.inner.shared.periodic.entries();
        let before = entries.len();
        entries.retain(|e| e.periodic.name() != name);
        entries.len() < before
    }

    /// The names of the periodic tasks this instance fires, sorted.
    pub fn periodic_names(&self) -> Vec<String> {
        let mut names: Vec<String> = self
            .inner
            .shared
            .periodic
            .entries()
            .iter()
            .map(|e| e.periodic.name().to_owned())
            .collect();
        names.sort();
        names
    }
}
