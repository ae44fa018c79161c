//! How long the store has lately taken to answer this instance's lease refreshes and
//! sweeps: the sweep widens `dead_after` by it.
//!
//! A live instance refreshes its leases every heartbeat interval, one refresh after the
//! other, and each writes the time its statement ran. When the store takes `L` to
//! answer (an overloaded server: group commits queued behind a backlog, row locks,
//! a pool waiting for a connection), a live lease is as old as an interval plus `L`
//! just before its next refresh lands, and past `dead_after` once `L` nears it. A sweep
//! that took such a lease for dead ran a live task a second time. The chaos suite's
//! MariaDB outage lane (durable, `dead_after` 2 s) measured refreshes of 1 to 2.9 s in
//! the catch-up after its outages, and 671 tasks run twice with no fault to explain
//! them.
//!
//! The sweeping instance cannot see the others' refresh times, but it shares their store:
//! its own refreshes and sweeps wait on the same server. So the sweep takes a lease as
//! dead only after `dead_after` plus the longest of its own refreshes and sweeps over the
//! last two `dead_after` (at most another `dead_after`): under a slow store a dead
//! instance's tasks come back that much later, and a live one's stay with it. A store
//! that answers in milliseconds adds milliseconds.

use std::collections::VecDeque;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// Samples kept at most (the longest ones are what matters; a sample under the floor is
/// not kept).
const MAX_SAMPLES: usize = 64;

/// The store's recent answering times, as this instance measured them.
#[derive(Debug)]
pub(crate) struct StoreLag {
    /// How far back a sample counts: two `dead_after`, so a sweep covers the time since
    /// any lease it judges was last refreshed.
    window: Duration,
    /// A sample shorter than this is not kept: it would widen `dead_after` by less than a
    /// twentieth.
    floor: Duration,
    /// The most a sweep's `dead_after` is widened by.
    cap: Duration,
    samples: Mutex<VecDeque<(Instant, Duration)>>,
}

impl StoreLag {
    /// For an engine whose leases are dead after `dead_after`.
    pub(crate) fn new(dead_after: Duration) -> Self {
        StoreLag {
            window: dead_after * 2,
            floor: dead_after / 20,
            cap: dead_after,
            samples: Mutex::new(VecDeque::new()),
        }
    }

    /// A refresh or a sweep took `took` to answer.
    pub(crate) fn record(&self, took: Duration) {
        if took < self.floor {
            return;
        }
        let mut samples = self.samples.lock().unwrap_or_else(|p| p.into_inner());
        if samples.len() >= MAX_SAMPLES {
            samples.pop_front();
        }
        samples.push_back((Instant::now(), took));
    }

    /// The longest answer within the window, at most `dead_after`.
    pub(crate) fn recent(&self) -> Duration {
        let mut samples = self.samples.lock().unwrap_or_else(|p| p.into_inner());
        while samples
            .front()
            .is_some_and(|(at, _)| at.elapsed() > self.window)
        {
            samples.pop_front();
        }
        samples
            .iter()
            .map(|(_, took)| *took)
            .max()
            .unwrap_or_default()
            .min(self.cap)
    }

    /// How old a lease must be for the sweep to take it as dead: `dead_after` and the
    /// store's recent lag.
    pub(crate) fn dead_after(&self, dead_after: Duration) -> Duration {
        dead_after + self.recent()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn widens_by_the_longest_recent_answer_up_to_dead_after() {
        let lag = StoreLag::new(Duration::from_secs(2));
        assert_eq!(
            lag.dead_after(Duration::from_secs(2)),
            Duration::from_secs(2)
        );
        lag.record(Duration::from_millis(50)); // under the floor (100 ms): not kept
        assert_eq!(lag.recent(), Duration::ZERO);
        lag.record(Duration::from_millis(1900));
        lag.record(Duration::from_millis(700));
        assert_eq!(lag.recent(), Duration::from_millis(1900));
        assert_eq!(
            lag.dead_after(Duration::from_secs(2)),
            Duration::from_millis(3900)
        );
        lag.record(Duration::from_secs(30));
        assert_eq!(lag.recent(), Duration::from_secs(2), "at most dead_after");
    }

    #[test]
    fn forgets_what_is_older_than_two_dead_after() {
        let lag = StoreLag::new(Duration::from_millis(20));
        lag.record(Duration::from_millis(15));
        assert_eq!(lag.recent(), Duration::from_millis(15));
        std::thread::sleep(Duration::from_millis(60));
        assert_eq!(lag.recent(), Duration::ZERO);
    }

    #[test]
    fn keeps_a_bounded_number_of_samples() {
        let lag = StoreLag::new(Duration::from_secs(60));
        lag.record(Duration::from_secs(10));
        for _ in 0..MAX_SAMPLES {
            lag.record(Duration::from_secs(4));
        }
        assert_eq!(lag.samples.lock().unwrap().len(), MAX_SAMPLES);
        assert_eq!(
            lag.recent(),
            Duration::from_secs(4),
            "the oldest went first"
        );
    }
}
