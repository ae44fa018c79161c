//! The engine's settings ([`EngineConfig`]).

use std::time::Duration;

use crate::error::{Error, Result};
use crate::limits;
use crate::model::Owner;

/// Settings of an [`Engine`](crate::Engine).
///
/// Like every options type of backstop (this one, [`HandlerOptions`](crate::HandlerOptions),
/// [`StoreConfig`](crate::StoreConfig) and each backend's options): start from
/// `Default`, change what you need with the setter named after the field, and read any
/// field directly. New settings may be added in minor versions, so the struct cannot be
/// built with a literal.
///
/// ```
/// use std::time::Duration;
/// use backstop_core::EngineConfig;
///
/// let config = EngineConfig::default()
///     .poll_interval(Duration::from_secs(2))
///     .retention(None);
/// assert_eq!(config.poll_interval, Duration::from_secs(2));
/// assert_eq!(config.dead_after, Duration::from_secs(180)); // the default
/// ```
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct EngineConfig {
    /// This instance's identity in the `owner` column (default: generated, unique per
    /// process start).
    pub owner: Option<Owner>,
    /// Fixed delay between polls when there is nothing more to drain (default 10 s).
    pub poll_interval: Duration,
    /// Delay before the first poll after start (default 30 s), so a restart does not
    /// stampede.
    pub first_poll_delay: Duration,
    /// A running task whose `updated_at` is older than this is taken as dead and recycled
    /// (default 3 min). Must be at least twice the heartbeat interval. A sweep adds the
    /// longest its own instance's lease refreshes and sweeps took to answer over the last
    /// two `dead_after` (at most another `dead_after`): a store slow enough to delay live
    /// instances' heartbeats delays the sweep by as much.
    pub dead_after: Duration,
    /// How often running tasks' leases are refreshed (default 30 s).
    pub heartbeat_interval: Duration,
    /// Most tasks one poll claims per event type (default 50; also capped by the
    /// executor's free capacity).
    pub batch_size: usize,
    /// Most dead tasks one sweep recycles (default 100). The sweep runs beside the poller
    /// (not in its claim rounds) every `poll_interval`, but no more often than every
    /// `dead_after / 8`, and again at once while it comes back full.
    pub recycle_batch: usize,
    /// How long shutdown waits for in-flight tasks before interrupting them (default 30 s).
    pub shutdown_grace: Duration,
    /// Succeeded tasks older than this are purged (default 7 days; `None` keeps them).
    /// The age is the task's `updated_at`: when it finished. Each finished state has an
    /// age of its own, and an archive set with
    /// [`EngineBuilder::archive`](crate::EngineBuilder::archive) sees every task purged.
    pub retention: Option<Duration>,
    /// Failed tasks older than this are purged (default `None`: kept until an operator
    /// resets or deletes them, as a failure is there to be looked at). A purged failed
    /// task that held its order key's line lets the next task of the key go.
    pub failed_retention: Option<Duration>,
    /// Cancelled tasks older than this are purged (default 7 days).
    pub cancelled_retention: Option<Duration>,
    /// Entries of the operators' logs (tasks' audit entries, the queues' log) older than
    /// this are purged (default 365 days; `None` keeps them). A task's entries outlive
    /// the task until then.
    pub audit_retention: Option<Duration>,
    /// Event types of the registry that no engine has registered for longer than this
    /// are removed (default 30 days; `None` keeps them): decommissioned types. Live
    /// engines register theirs every hour; a type with tasks waiting and no engine seen
    /// for a day is reported unhandled whatever this says. At least a day.
    pub registry_retention: Option<Duration>,
    /// Records of the participant barrier older than this are purged by the same job
    /// (default 30 days; `None` keeps them): see
    /// [`TaskStore::purge_barrier`](crate::TaskStore::purge_barrier) for what a purged
    /// record no longer refuses. Keep it longer than any global transaction's calls can
    /// be delivered.
    pub barrier_retention: Option<Duration>,
    /// How often the retention job runs (default 1 h).
    pub purge_interval: Duration,
    /// Rows one purge statement deletes (default 500).
    pub purge_batch: usize,
    /// How often the poller refreshes the backlog gauges from
    /// [`backlog()`](crate::TaskStore::backlog) (default 15 s), the first time one
    /// interval after the first poll. The counts follow the backlog (not the succeeded
    /// rows retained); the interval keeps them well apart from a short poll interval, and
    /// instances started together do not all count the backlog they are about to drain.
    pub gauge_interval: Duration,
    /// Whether this instance refreshes the backlog gauges (default true). The counts are
    /// the database's, not the instance's, so one refresher per database is enough: turn
    /// them off on every instance but one, or on all of them when the console's
    /// `/metrics` exports them (it refreshes them itself, at most every 15 s).
    pub backlog_gauges: bool,
    /// Most finished attempts whose outcomes (marks) may wait to be written at once
    /// (default 4096). Past it the poller claims no more until marks are applied, so an
    /// engine whose store writes stall stops taking work instead of piling up outcomes:
    /// it holds fewer than this plus its executors' capacity (`concurrency +
    /// queue_capacity`) claimed tasks. A waiting mark holds no task row: only its lease
    /// and outcome. Below this cap the engine keeps about a second of its store's
    /// lately measured write pace waiting (at least 512, two batches of marks), so an
    /// outcome waits about a second to be written when handlers outrun the store.
    pub max_unmarked: usize,
    /// How often the poller reads the queues' settings ([`queues`](crate::TaskStore::queues);
    /// default 30 s, the first time at the first poll): which of its types have a global
    /// concurrency or rate limit, so it claims each of them on its own and polls it again
    /// as its tasks end, and, for a rate, when its claims leave the rate's window. The claims enforce a limit whether or not the engine knows of it; until
    /// the next read, a newly limited type only drains more slowly.
    pub queue_refresh: Duration,
}

impl Default for EngineConfig {
    fn default() -> Self {
        Self {
            owner: None,
            poll_interval: Duration::from_secs(10),
            first_poll_delay: Duration::from_secs(30),
            dead_after: Duration::from_secs(180),
            heartbeat_interval: Duration::from_secs(30),
            batch_size: 50,
            recycle_batch: 100,
            shutdown_grace: Duration::from_secs(30),
            retention: Some(Duration::from_secs(7 * 24 * 3600)),
            failed_retention: None,
            cancelled_retention: Some(Duration::from_secs(7 * 24 * 3600)),
            audit_retention: Some(Duration::from_secs(365 * 24 * 3600)),
            registry_retention: Some(Duration::from_secs(30 * 24 * 3600)),
            barrier_retention: Some(Duration::from_secs(30 * 24 * 3600)),
            purge_interval: Duration::from_secs(3600),
            purge_batch: 500,
            gauge_interval: Duration::from_secs(15),
            backlog_gauges: true,
            max_unmarked: 4096,
            queue_refresh: Duration::from_secs(30),
        }
    }
}

impl EngineConfig {
    crate::driver::setters! {
        /// See [`owner`](Self::owner).
        owner: Option<Owner>,
        /// See [`poll_interval`](Self::poll_interval).
        poll_interval: Duration,
        /// See [`first_poll_delay`](Self::first_poll_delay).
        first_poll_delay: Duration,
        /// See [`dead_after`](Self::dead_after).
        dead_after: Duration,
        /// See [`heartbeat_interval`](Self::heartbeat_interval).
        heartbeat_interval: Duration,
        /// See [`batch_size`](Self::batch_size).
        batch_size: usize,
        /// See [`recycle_batch`](Self::recycle_batch).
        recycle_batch: usize,
        /// See [`shutdown_grace`](Self::shutdown_grace).
        shutdown_grace: Duration,
        /// See [`retention`](Self::retention).
        retention: Option<Duration>,
        /// See [`failed_retention`](Self::failed_retention).
        failed_retention: Option<Duration>,
        /// See [`cancelled_retention`](Self::cancelled_retention).
        cancelled_retention: Option<Duration>,
        /// See [`audit_retention`](Self::audit_retention).
        audit_retention: Option<Duration>,
        /// See [`registry_retention`](Self::registry_retention).
        registry_retention: Option<Duration>,
        /// See [`barrier_retention`](Self::barrier_retention).
        barrier_retention: Option<Duration>,
        /// See [`purge_interval`](Self::purge_interval).
        purge_interval: Duration,
        /// See [`purge_batch`](Self::purge_batch).
        purge_batch: usize,
        /// See [`gauge_interval`](Self::gauge_interval).
        gauge_interval: Duration,
        /// See [`backlog_gauges`](Self::backlog_gauges).
        backlog_gauges: bool,
        /// See [`max_unmarked`](Self::max_unmarked).
        max_unmarked: usize,
        /// See [`queue_refresh`](Self::queue_refresh).
        queue_refresh: Duration,
    }

    pub(crate) fn validate(&self) -> Result<()> {
        const OP: &str = "start_engine";
        let positive = [
            ("poll_interval", self.poll_interval),
            ("dead_after", self.dead_after),
            ("heartbeat_interval", self.heartbeat_interval),
            ("purge_interval", self.purge_interval),
            ("gauge_interval", self.gauge_interval),
            ("queue_refresh", self.queue_refresh),
        ];
        for (name, d) in positive {
            if d.is_zero() {
                return Err(Error::config(OP, format!("{name} must be positive")));
            }
            limits::check_duration(OP, name, d).map_err(|e| Error::config(OP, e.message()))?;
        }
        for (name, age) in [
            ("retention", self.retention),
            ("failed_retention", self.failed_retention),
            ("cancelled_retention", self.cancelled_retention),
            ("audit_retention", self.audit_retention),
            ("registry_retention", self.registry_retention),
            ("barrier_retention", self.barrier_retention),
        ] {
            if let Some(age) = age {
                limits::check_duration(OP, name, age)
                    .map_err(|e| Error::config(OP, e.message()))?;
            }
        }
        if self
            .registry_retention
            .is_some_and(|d| d < limits::HANDLERS_GONE_AFTER)
        {
            return Err(Error::config(
                OP,
                format!(
                    "registry_retention must be at least {:?}: a live engine's types must not \
                     be removed between its registrations",
                    limits::HANDLERS_GONE_AFTER
                ),
            ));
        }
        if self.heartbeat_interval.saturating_mul(2) > self.dead_after {
            return Err(Error::config(
                OP,
                format!(
                    "heartbeat_interval ({:?}) must be at most half of dead_after ({:?}), or live tasks would be recycled",
                    self.heartbeat_interval, self.dead_after
                ),
            ));
        }
        if self.max_unmarked == 0 {
            return Err(Error::config(OP, "max_unmarked must be at least 1"));
        }
        for (name, n) in [
            ("batch_size", self.batch_size),
            ("recycle_batch", self.recycle_batch),
            ("purge_batch", self.purge_batch),
        ] {
            if n == 0 || n > limits::MAX_BATCH {
                return Err(Error::config(
                    OP,
                    format!("{name} must be 1 to {}, got {n}", limits::MAX_BATCH),
                ));
            }
        }
        Ok(())
    }
}
