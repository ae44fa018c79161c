//! What an engine counts: kept as atomics for [`Engine::counters`](crate::Engine::counters)
//! and emitted through the `metrics` facade (labelled by event type).

use std::sync::atomic::{AtomicU64, Ordering};

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
    /// starts a poll of its type unless one is already due).
    pub wakeups: u64,
    /// Announcements this engine made through its notifier (tasks it enqueued but did
    /// not run itself).
    pub notified: u64,
    /// Notifier failures: announcements that failed, listener connections lost.
    pub notifier_errors: u64,
}

macro_rules! counters {
    ($($field:ident => $metric:literal),+ $(,)?) => {
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
    };
}

counters! {
    enqueued => "backstop_enqueued_total",
    run_ahead => "backstop_run_ahead_total",
    polled => "backstop_polled_total",
    succeeded => "backstop_succeeded_total",
    skipped => "backstop_skipped_total",
    retried => "backstop_retried_total",
    failed => "backstop_failed_total",
    rejected => "backstop_rejected_total",
    released => "backstop_released_total",
    recycled => "backstop_recycled_total",
    stale_completions => "backstop_stale_completions_total",
    leases_lost => "backstop_leases_lost_total",
    panics => "backstop_panics_total",
    timeouts => "backstop_timeouts_total",
    store_errors => "backstop_store_errors_total",
    wakeups => "backstop_wakeups_total",
    notified => "backstop_notified_total",
    notifier_errors => "backstop_notifier_errors_total",
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
