//! What an engine counts: kept as atomics for [`Engine::counters`](crate::Engine::counters)
//! and emitted through the `metrics` facade (labelled by event type).

use std::sync::atomic::{AtomicU64, Ordering};

use crate::model::{Queue, SagaCount, Stats, Status};

/// A snapshot of what one engine instance has done since it started.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct EngineCounters {
    /// Tasks created through [`Engine::enqueue`](crate::Engine::enqueue). (The
    /// `backstop_enqueued_total` metric counts every path, at the store.)
    pub enqueued: u64,
    /// Tasks claimed by a run-ahead.
    pub run_ahead: u64,
    /// Tasks claimed by the poller.
    pub polled: u64,
    /// Tasks claimed by id from a wake-up that named them ([`Wake::Task`](crate::Wake::Task)).
    pub woken_claims: u64,
    /// Attempts that succeeded (skips included).
    pub succeeded: u64,
    /// Attempts skipped because `pre_check_skip` said the business was done.
    pub skipped: u64,
    /// Failed attempts scheduled for a retry.
    pub retried: u64,
    /// Tasks parked as failed (permanent error or attempts exhausted).
    pub failed: u64,
    /// Run-aheads not taken because the executor was full.
    pub rejected: u64,
    /// Tasks given back without spending an attempt (shutdown).
    pub released: u64,
    /// Tasks their handler cancelled ([`HandlerError::cancel`](crate::HandlerError::cancel)).
    pub cancelled: u64,
    /// Attempts their handler snoozed ([`HandlerError::snooze`](crate::HandlerError::snooze)).
    pub snoozed: u64,
    /// Dead tasks recycled by this instance's dead-worker sweep (to pending or failed).
    pub recycled: u64,
    /// Completions refused because the lease was no longer current (the task had been
    /// recycled and claimed again): never applied.
    pub stale_completions: u64,
    /// Heartbeats that found the lease gone.
    pub leases_lost: u64,
    /// Attempts whose handler panicked.
    pub panics: u64,
    /// Attempts abandoned at the timeout.
    pub timeouts: u64,
    /// Store errors met by the engine (claims, marks, heartbeats…).
    pub store_errors: u64,
    /// Wake-ups received from the notifier for event types this engine handles (each
    /// starts a poll of its type unless one is already due, or a claim by id of the task
    /// it names: [`woken_claims`](Self::woken_claims)).
    pub wakeups: u64,
    /// Announcements this engine made through its notifier (tasks it enqueued but did
    /// not run itself).
    pub notified: u64,
    /// Notifier failures: announcements that failed, listener connections lost.
    pub notifier_errors: u64,
}

macro_rules! counters {
    ($($field:ident => $metric:literal: $help:literal),+ $(,)?) => {
        #[derive(Default)]
        pub(crate) struct Counters { $($field: AtomicU64,)+ }

        impl Counters {
            $(
                #[allow(dead_code)]
                pub(crate) fn $field(&self, event_type: &str) {
                    self.add(&self.$field, $metric, event_type, 1);
                }
            )+

            pub(crate) fn snapshot(&self) -> EngineCounters {
                EngineCounters { $($field: self.$field.load(Ordering::Relaxed),)+ }
            }
        }

        impl EngineCounters {
            /// What was counted since `earlier` (a snapshot of the same engine, taken
            /// before this one): each counter's difference.
            ///
            /// ```
            /// use backstop_core::EngineCounters;
            /// let (mut before, mut after) = (EngineCounters::default(), EngineCounters::default());
            /// before.succeeded = 3;
            /// after.succeeded = 10;
            /// assert_eq!(after.since(&before).succeeded, 7);
            /// ```
            pub fn since(&self, earlier: &EngineCounters) -> EngineCounters {
                EngineCounters { $($field: self.$field.saturating_sub(earlier.$field),)+ }
            }
        }

        /// The counters' names and help texts.
        const COUNTERS: &[(&str, &str)] = &[$(($metric, $help),)+];
    };
}

counters! {
    enqueued => "backstop_enqueued_total": "Tasks created, by any path (counted by the store; a rolled-back transaction's too).",
    run_ahead => "backstop_run_ahead_total": "Tasks claimed by a run-ahead after their commit.",
    polled => "backstop_polled_total": "Tasks claimed by the poller.",
    woken_claims => "backstop_woken_claims_total": "Tasks claimed by id from a wake-up that named them.",
    succeeded => "backstop_succeeded_total": "Attempts that succeeded (skips included).",
    skipped => "backstop_skipped_total": "Attempts skipped because pre_check_skip found the business done.",
    retried => "backstop_retried_total": "Failed attempts scheduled for a retry.",
    failed => "backstop_failed_total": "Tasks parked as failed (permanent error or attempts exhausted).",
    rejected => "backstop_rejected_total": "Run-aheads refused because the event type's executor was full (the poller runs them later).",
    released => "backstop_released_total": "Tasks given back without spending an attempt (shutdown).",
    cancelled => "backstop_cancelled_total": "Tasks their handler cancelled (HandlerError::cancel).",
    snoozed => "backstop_snoozed_total": "Attempts their handler snoozed (HandlerError::snooze).",
    recycled => "backstop_recycled_total": "Tasks of dead workers recycled by the sweep (event_type=\"*\").",
    stale_completions => "backstop_stale_completions_total": "Completions refused because the lease was no longer current.",
    leases_lost => "backstop_leases_lost_total": "Heartbeats that found the lease gone.",
    panics => "backstop_panics_total": "Attempts whose handler panicked.",
    timeouts => "backstop_timeouts_total": "Attempts abandoned at the handler timeout.",
    store_errors => "backstop_store_errors_total": "Store errors met by the engine (claims, marks, heartbeats, counts).",
    wakeups => "backstop_wakeups_total": "Wake-ups received from the notifier.",
    notified => "backstop_notified_total": "Announcements made through the notifier.",
    notifier_errors => "backstop_notifier_errors_total": "Notifier failures: announcements that failed, listener connections lost.",
}

/// The gauges and histograms the engine records, with their help texts (see
/// [`describe_metrics`]).
const OTHERS: &[(&str, &str, Kind)] = &[
    (
        "backstop_tasks",
        "Tasks per event type and status (every status but succeeded), from the backlog counts.",
        Kind::Gauge,
    ),
    (
        "backstop_tasks_total",
        "Tasks per status (every status but succeeded), from the backlog counts.",
        Kind::Gauge,
    ),
    (
        "backstop_oldest_due_pending_seconds",
        "How long the oldest due pending task has been waiting.",
        Kind::Gauge,
    ),
    (
        "backstop_unhandled_tasks",
        "Pending or waiting tasks per event type that no engine of the fleet has a handler for (a typo, a handler not deployed): they would wait forever.",
        Kind::Gauge,
    ),
    (
        "backstop_sagas",
        "Unfinished sagas per definition (saga) and status (running, compensating, parked), from the saga backlog. Parked ones wait for an operator.",
        Kind::Gauge,
    ),
    (
        "backstop_queue_paused",
        "Per event type an operator has set: 1 while its queue is paused (no claim takes its tasks), 0 once resumed.",
        Kind::Gauge,
    ),
    (
        "backstop_saga_unchanged_seconds",
        "Per definition (saga) and unfinished status: how long the least recently changed saga has been unchanged. A running or compensating one unchanged long past its stuck_after is not moving.",
        Kind::Gauge,
    ),
    (
        "backstop_saga_step_failures_total",
        "Technical failures of saga steps per definition (saga) and phase (action, compensate): each failed attempt, retried or not.",
        Kind::Counter,
    ),
    (
        "backstop_saga_findings_total",
        "What the saga reconcilers found per definition (saga) and finding: stuck (nudged) or late (past its deadline: parked).",
        Kind::Counter,
    ),
    (
        "backstop_reconcile_findings_total",
        "Findings a reconciler's scan enqueued for resolution, per reconciler (those with a resolution under way or an open operator item are not counted again).",
        Kind::Counter,
    ),
    (
        "backstop_reconcile_resolutions_total",
        "Findings resolved per reconciler and resolution: pushed_forward, compensated, settled, operator (an item parked to reconcile).",
        Kind::Counter,
    ),
    (
        "backstop_barrier_total",
        "Participant barrier verdicts by branch operation (op) and verdict: run, duplicate, empty_compensation, hanging. Many hanging calls mean forward calls arrive after their compensations: deadlines shorter than the calls' delivery.",
        Kind::Counter,
    ),
    (
        "backstop_purged_total",
        "Finished tasks purged after their retention period, by status (succeeded, failed, cancelled).",
        Kind::Counter,
    ),
    (
        "backstop_run_ahead_latency_seconds",
        "From a task's creation to its run-ahead start.",
        Kind::Histogram,
    ),
    (
        "backstop_start_delay_seconds",
        "From when a task was due to when its attempt started (run-ahead or poll).",
        Kind::Histogram,
    ),
    (
        "backstop_handler_duration_seconds",
        "How long handlers ran.",
        Kind::Histogram,
    ),
];

enum Kind {
    Counter,
    Gauge,
    Histogram,
}

/// The name of every metric the engine and the stores record (the ones
/// [`describe_metrics`] describes).
pub fn metric_names() -> Vec<&'static str> {
    COUNTERS
        .iter()
        .map(|(n, _)| *n)
        .chain(OTHERS.iter().map(|(n, _, _)| *n))
        .collect()
}

/// Describe every metric the engine and the stores record (help texts, and the unit of
/// the `_seconds` ones) to the installed `metrics` recorder. Call it once after
/// installing the recorder (`backstop-console`'s Prometheus setup does). Labels:
/// `event_type` on the counters and histograms (`"*"` where a count spans types),
/// `event_type` and `status` on `backstop_tasks`, `status` on `backstop_tasks_total`,
/// `op` and `verdict` on `backstop_barrier_total`; never task ids, business keys or
/// global transaction ids.
pub fn describe_metrics() {
    for (name, help) in COUNTERS {
        metrics::describe_counter!(*name, *help);
    }
    for (name, help, kind) in OTHERS {
        match kind {
            Kind::Counter => metrics::describe_counter!(*name, *help),
            Kind::Gauge if name.ends_with("_seconds") => {
                metrics::describe_gauge!(*name, metrics::Unit::Seconds, *help)
            }
            Kind::Gauge => metrics::describe_gauge!(*name, *help),
            Kind::Histogram => metrics::describe_histogram!(*name, metrics::Unit::Seconds, *help),
        }
    }
}

/// What [`BacklogGauges`] records, read from a store: the backlog, the fleet's handled
/// event types, the saga backlog and the queues' settings (four reads).
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct BacklogReading {
    /// [`TaskStore::backlog`](crate::TaskStore::backlog).
    pub stats: Stats,
    /// The event types of [`TaskStore::event_types`](crate::TaskStore::event_types) some
    /// engine registered within [`HANDLERS_GONE_AFTER`](crate::limits::HANDLERS_GONE_AFTER).
    pub handled: std::collections::BTreeSet<String>,
    /// [`TaskStore::saga_backlog`](crate::TaskStore::saga_backlog).
    pub sagas: Vec<SagaCount>,
    /// [`TaskStore::queues`](crate::TaskStore::queues).
    pub queues: Vec<Queue>,
}

impl BacklogReading {
    /// Read it from `store`.
    pub async fn read<S: crate::store::TaskStore + ?Sized>(
        store: &S,
    ) -> crate::error::Result<BacklogReading> {
        Ok(BacklogReading {
            stats: store.backlog().await?,
            handled: live_types(store.event_types().await?, chrono::Utc::now()),
            sagas: store.saga_backlog().await?,
            queues: store.queues().await?,
        })
    }
}

/// The event types some engine registered within
/// [`HANDLERS_GONE_AFTER`](crate::limits::HANDLERS_GONE_AFTER) of `now`: a type whose
/// engines are all gone for longer (decommissioned) counts as unhandled.
fn live_types(
    seen: Vec<crate::model::EventTypeSeen>,
    now: chrono::DateTime<chrono::Utc>,
) -> std::collections::BTreeSet<String> {
    let gone = chrono::Duration::from_std(crate::limits::HANDLERS_GONE_AFTER)
        .unwrap_or(chrono::Duration::MAX);
    seen.into_iter()
        .filter(|t| now - t.last_seen < gone)
        .map(|t| t.event_type)
        .collect()
}

/// Records a store's backlog counts ([`TaskStore::backlog`](crate::TaskStore::backlog))
/// as the gauges `backstop_tasks{event_type, status}`, `backstop_tasks_total{status}` and
/// `backstop_oldest_due_pending_seconds`. It remembers the label pairs it set, so a count
/// that drops out of the answer (the last failed task of a type reset) reads 0, not its
/// old value.
///
/// With the fleet's handled event types ([`refresh`](Self::refresh)), also
/// `backstop_unhandled_tasks{event_type}`: pending or waiting tasks of types no engine has
/// registered a handler for, or none for longer than
/// [`HANDLERS_GONE_AFTER`](crate::limits::HANDLERS_GONE_AFTER) (decommissioned).
#[derive(Debug, Default)]
pub struct BacklogGauges {
    seen: std::collections::BTreeSet<(String, Status)>,
    unhandled: std::collections::BTreeSet<String>,
    sagas: std::collections::BTreeSet<(String, &'static str)>,
}

impl BacklogGauges {
    /// Read the backlog and the fleet's handled event types from `store` and set the
    /// gauges. Returns the event types that just became unhandled (tasks wait, and no
    /// engine has a handler for them): log them. Refreshed by one engine per database
    /// ([`EngineConfig::backlog_gauges`](crate::EngineConfig::backlog_gauges)) or by the
    /// console's `/metrics`.
    pub async fn refresh<S: crate::store::TaskStore + ?Sized>(
        &mut self,
        store: &S,
    ) -> crate::error::Result<Vec<(String, u64)>> {
        let reading = BacklogReading::read(store).await?;
        Ok(self.apply(&reading))
    }

    /// Set every gauge from `reading` ([`refresh`](Self::refresh) in two halves, for a
    /// caller that reads without holding its gauges: the console's `/metrics`). Returns
    /// the event types that just became unhandled.
    pub fn apply(&mut self, reading: &BacklogReading) -> Vec<(String, u64)> {
        self.record(&reading.stats);
        self.record_sagas(&reading.sagas);
        Self::record_queues(&reading.queues);
        self.record_unhandled(&reading.stats, &reading.handled)
    }

    /// Set `backstop_unhandled_tasks` from `stats` and the fleet's `handled` event types;
    /// returns the types that just became unhandled, with their waiting counts.
    pub fn record_unhandled(
        &mut self,
        stats: &Stats,
        handled: &std::collections::BTreeSet<String>,
    ) -> Vec<(String, u64)> {
        let mut counts: std::collections::BTreeMap<String, u64> = Default::default();
        for c in &stats.counts {
            if matches!(c.status, Status::Pending | Status::Waiting)
                && !handled.contains(&c.event_type)
            {
                *counts.entry(c.event_type.clone()).or_default() += c.count;
            }
        }
        let mut new = Vec::new();
        for (event_type, n) in &counts {
            metrics::gauge!("backstop_unhandled_tasks", "event_type" => event_type.clone())
                .set(*n as f64);
            if !self.unhandled.contains(event_type) {
                new.push((event_type.clone(), *n));
            }
        }
        for gone in self.unhandled.iter().filter(|t| !counts.contains_key(*t)) {
            metrics::gauge!("backstop_unhandled_tasks", "event_type" => gone.clone()).set(0.0);
        }
        self.unhandled = counts.into_keys().collect();
        new
    }

    /// Set `backstop_sagas{saga, status}` and `backstop_saga_unchanged_seconds{saga,
    /// status}` from the saga backlog ([`TaskStore::saga_backlog`](crate::TaskStore::saga_backlog)); a pair that
    /// dropped out of it reads 0.
    pub fn record_sagas(&mut self, counts: &[SagaCount]) {
        let mut now = std::collections::BTreeSet::new();
        for c in counts {
            let labels = [
                ("saga", c.name.clone()),
                ("status", c.status.as_str().to_owned()),
            ];
            metrics::gauge!("backstop_sagas", &labels).set(c.count as f64);
            metrics::gauge!("backstop_saga_unchanged_seconds", &labels)
                .set(c.oldest_unchanged.as_secs_f64());
            now.insert((c.name.clone(), c.status.as_str()));
        }
        for (name, status) in self.sagas.difference(&now) {
            let labels = [("saga", name.clone()), ("status", (*status).to_owned())];
            metrics::gauge!("backstop_sagas", &labels).set(0.0);
            metrics::gauge!("backstop_saga_unchanged_seconds", &labels).set(0.0);
        }
        self.sagas = now;
    }

    /// Set `backstop_queue_paused{event_type}` of every queue with a setting: 1 paused,
    /// 0 running (a queue's row stays once set, so a resumed type reads 0).
    pub fn record_queues(queues: &[Queue]) {
        for q in queues {
            metrics::gauge!("backstop_queue_paused", "event_type" => q.event_type.clone())
                .set(if q.paused { 1.0 } else { 0.0 });
        }
    }

    /// Set the gauges from `stats`.
    pub fn record(&mut self, stats: &Stats) {
        let mut now = std::collections::BTreeSet::new();
        for c in &stats.counts {
            if c.status == Status::Succeeded {
                continue;
            }
            metrics::gauge!("backstop_tasks", "event_type" => c.event_type.clone(), "status" => c.status.to_string())
                .set(c.count as f64);
            now.insert((c.event_type.clone(), c.status));
        }
        for (event_type, status) in self.seen.difference(&now) {
            metrics::gauge!("backstop_tasks", "event_type" => event_type.clone(), "status" => status.to_string())
                .set(0.0);
        }
        self.seen = now;
        for s in Status::ALL.into_iter().filter(|s| *s != Status::Succeeded) {
            metrics::gauge!("backstop_tasks_total", "status" => s.to_string())
                .set(stats.count(s) as f64);
        }
        metrics::gauge!("backstop_oldest_due_pending_seconds").set(
            stats
                .oldest_due_pending
                .map(|d| d.as_secs_f64())
                .unwrap_or(0.0),
        );
    }
}

impl Counters {
    fn add(&self, cell: &AtomicU64, metric: &'static str, event_type: &str, n: u64) {
        cell.fetch_add(n, Ordering::Relaxed);
        metrics::counter!(metric, "event_type" => event_type.to_owned()).increment(n);
    }

    /// Count a task created through [`Engine::enqueue`](crate::Engine::enqueue) in this
    /// engine's counters only: the `backstop_enqueued_total` metric is counted by the
    /// store for every path.
    pub(crate) fn enqueued_here(&self) {
        self.enqueued.fetch_add(1, Ordering::Relaxed);
    }

    /// Count `n` recycled tasks (the sweep recycles across event types).
    pub(crate) fn recycled_n(&self, n: u64) {
        if n > 0 {
            self.add(&self.recycled, "backstop_recycled_total", "*", n);
        }
    }
}
