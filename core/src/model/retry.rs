//! How a failed task is tried again: the backoff and the retry policy.

use std::time::Duration;

use crate::error::{Error, Result};
use crate::limits;

/// How long to wait before the next attempt after a failed one. Made with
/// [`Backoff::fixed`] or [`Backoff::exponential`] (or through [`RetryPolicy`]); strategies
/// and their settings may grow in minor versions.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Backoff {
    /// Every retry waits `interval`.
    #[non_exhaustive]
    Fixed {
        /// The wait before every retry.
        interval: Duration,
    },
    /// The retry after the n-th attempt waits `initial · 2^(n−1)`, never more than `max`.
    #[non_exhaustive]
    Exponential {
        /// The wait after the first attempt.
        initial: Duration,
        /// The cap on any wait (default 24 h).
        max: Duration,
    },
    /// Best-effort notification's schedule (the source articles' §3.5): the retries
    /// wait 1, 5, 10, 30 and 60 `unit`s, then 60 each (with a unit of a minute: 1 m,
    /// 5 m, 10 m, 30 m, 60 m). See [`RetryPolicy::best_effort`].
    #[non_exhaustive]
    Notify {
        /// The schedule's unit: a minute for the articles' schedule.
        unit: Duration,
    },
}

impl Backoff {
    /// Every retry waits `interval`.
    pub fn fixed(interval: Duration) -> Backoff {
        Backoff::Fixed { interval }
    }

    /// The retry after the n-th attempt waits `initial · 2^(n−1)`, never more than `max`.
    pub fn exponential(initial: Duration, max: Duration) -> Backoff {
        Backoff::Exponential { initial, max }
    }

    /// The notification schedule in `unit`s: 1, 5, 10, 30, 60, then 60 each.
    pub const NOTIFY_SCHEDULE: [u32; 5] = [1, 5, 10, 30, 60];

    /// Best-effort notification's schedule in `unit`s (see [`Backoff::Notify`]).
    pub fn notify(unit: Duration) -> Backoff {
        Backoff::Notify { unit }
    }

    /// The strategy name stored in the database: `FIXED`, `EXPONENTIAL` or `NOTIFY`.
    pub fn strategy(&self) -> &'static str {
        match self {
            Backoff::Fixed { .. } => "FIXED",
            Backoff::Exponential { .. } => "EXPONENTIAL",
            Backoff::Notify { .. } => "NOTIFY",
        }
    }

    /// The base interval (`interval`, `initial` or `unit`).
    pub fn interval(&self) -> Duration {
        match *self {
            Backoff::Fixed { interval } => interval,
            Backoff::Exponential { initial, .. } => initial,
            Backoff::Notify { unit } => unit,
        }
    }

    /// The largest wait this backoff ever yields.
    pub fn max_interval(&self) -> Duration {
        match *self {
            Backoff::Fixed { interval } => interval,
            Backoff::Exponential { max, .. } => max,
            Backoff::Notify { unit } => unit.saturating_mul(60),
        }
    }

    /// Rebuild a backoff from its stored columns.
    pub fn from_parts(strategy: &str, interval: Duration, max: Duration) -> Result<Backoff> {
        match strategy {
            "FIXED" => Ok(Backoff::Fixed { interval }),
            "EXPONENTIAL" => Ok(Backoff::Exponential {
                initial: interval,
                max,
            }),
            "NOTIFY" => Ok(Backoff::Notify { unit: interval }),
            other => Err(Error::new(
                crate::error::ErrorKind::Unexpected,
                "decode_task",
                format!("unknown retry_strategy {other:?} in the task table"),
            )),
        }
    }

    /// The wait before the next attempt after `attempt` attempts have been made
    /// (`attempt` ≥ 1; 0 is treated as 1).
    ///
    /// ```
    /// use std::time::Duration;
    /// use backstop_core::Backoff;
    ///
    /// let b = Backoff::exponential(Duration::from_secs(10), Duration::from_secs(60));
    /// assert_eq!(b.delay_after(1), Duration::from_secs(10));
    /// assert_eq!(b.delay_after(3), Duration::from_secs(40));
    /// assert_eq!(b.delay_after(4), Duration::from_secs(60)); // capped
    /// ```
    pub fn delay_after(&self, attempt: u32) -> Duration {
        match *self {
            Backoff::Fixed { interval } => interval,
            Backoff::Exponential { initial, max } => {
                let exp = attempt.saturating_sub(1).min(62);
                let factor = 1u32.checked_shl(exp).unwrap_or(u32::MAX);
                initial.checked_mul(factor).unwrap_or(max).min(max)
            }
            Backoff::Notify { unit } => {
                let at = usize::try_from(attempt.saturating_sub(1)).unwrap_or(usize::MAX);
                let steps = Backoff::NOTIFY_SCHEDULE;
                unit.saturating_mul(steps.get(at).copied().unwrap_or(steps[steps.len() - 1]))
            }
        }
    }
}

/// How often and how patiently a task is retried.
///
/// `max_attempts` counts every start, the first included:
/// a task with `max_attempts = 3` runs at most three times, then parks as failed.
///
/// ```
/// use std::time::Duration;
/// use backstop_core::RetryPolicy;
///
/// let p = RetryPolicy::exponential(5, Duration::from_secs(1)).with_max_interval(Duration::from_secs(8));
/// assert_eq!(p.delay_after(1), Duration::from_secs(1));
/// assert_eq!(p.delay_after(5), Duration::from_secs(8));
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub struct RetryPolicy {
    /// Total starts allowed, the first included (≥ 1).
    pub max_attempts: u32,
    /// The wait between attempts. A task's row keeps its waits in whole milliseconds:
    /// a finer part is dropped at enqueue (as are those of a delay and a timeout).
    pub backoff: Backoff,
    /// How much of each wait is random, in percent (0 to 100): the wait after a failure
    /// is drawn uniformly from `[w · (1 − jitter/100), w]`, where `w` is the backoff's
    /// wait ([`delay_after`](Self::delay_after)). So a retry never waits longer than the
    /// backoff says, and tasks that failed together (a downstream outage) come back
    /// spread out instead of as one herd. Default: [`DEFAULT_JITTER_PCT`](Self::DEFAULT_JITTER_PCT)
    /// for exponential backoff, 0 for fixed. A handler's explicit retry-after is never
    /// jittered.
    pub jitter_pct: u8,
}

impl RetryPolicy {
    /// The default cap on exponential backoff: 24 hours.
    pub const DEFAULT_MAX_INTERVAL: Duration = Duration::from_secs(24 * 3600);

    /// The default jitter of exponential backoff: each wait is drawn from 75 % to 100 %
    /// of the backoff's.
    pub const DEFAULT_JITTER_PCT: u8 = 25;

    /// Retry every `interval` (no jitter), at most `max_attempts` starts in all.
    pub fn fixed(max_attempts: u32, interval: Duration) -> Self {
        Self {
            max_attempts,
            backoff: Backoff::Fixed { interval },
            jitter_pct: 0,
        }
    }

    /// Retry after `initial`, `2·initial`, `4·initial`… capped at 24 h, with
    /// [`DEFAULT_JITTER_PCT`](Self::DEFAULT_JITTER_PCT) jitter; at most `max_attempts`
    /// starts in all.
    pub fn exponential(max_attempts: u32, initial: Duration) -> Self {
        Self {
            max_attempts,
            backoff: Backoff::Exponential {
                initial,
                max: Self::DEFAULT_MAX_INTERVAL,
            },
            jitter_pct: Self::DEFAULT_JITTER_PCT,
        }
    }

    /// Best-effort notification (the source articles' §3.5): 6 attempts, the retries
    /// waiting 1 m, 5 m, 10 m, 30 m and 60 m (no jitter: the schedule is the contract).
    /// When the schedule is used up, the task parks as failed with a last error that
    /// begins `to reconcile:` ([`TO_RECONCILE`](Self::TO_RECONCILE)): an item for the
    /// reconciliation inbox (`backstop tasks list --status failed`), never dropped.
    ///
    /// ```
    /// use std::time::Duration;
    /// use backstop_core::RetryPolicy;
    /// let p = RetryPolicy::best_effort();
    /// let waits: Vec<u64> = (1..6).map(|n| p.delay_after(n).as_secs() / 60).collect();
    /// assert_eq!((p.max_attempts, waits), (6, vec![1, 5, 10, 30, 60]));
    /// ```
    pub fn best_effort() -> Self {
        Self::best_effort_in(Duration::from_secs(60))
    }

    /// [`best_effort`](Self::best_effort) with the schedule in `unit`s instead of
    /// minutes (1, 5, 10, 30, 60 `unit`s).
    pub fn best_effort_in(unit: Duration) -> Self {
        Self {
            max_attempts: 6,
            backoff: Backoff::Notify { unit },
            jitter_pct: 0,
        }
    }

    /// How the last error of a task whose notification schedule
    /// ([`best_effort`](Self::best_effort)) is used up begins.
    pub const TO_RECONCILE: &'static str = "to reconcile:";

    /// Set the jitter: `pct` percent of each wait is random (0 turns it off; at most
    /// 100). See [`jitter_pct`](Self::jitter_pct).
    ///
    /// ```
    /// use std::time::Duration;
    /// use backstop_core::RetryPolicy;
    /// let p = RetryPolicy::exponential(5, Duration::from_secs(10)).jitter(50);
    /// for _ in 0..100 {
    ///     let wait = p.retry_delay(2); // the backoff says 20 s
    ///     assert!(wait >= Duration::from_secs(10) && wait <= Duration::from_secs(20));
    /// }
    /// assert_eq!(p.jitter(0).retry_delay(2), Duration::from_secs(20));
    /// ```
    pub fn jitter(mut self, pct: u8) -> Self {
        self.jitter_pct = pct;
        self
    }

    /// The wait before the next attempt after `attempt` attempts, jitter applied: drawn
    /// uniformly from `[w · (1 − jitter/100), w]` where `w` is
    /// [`delay_after(attempt)`](Self::delay_after).
    pub fn retry_delay(&self, attempt: u32) -> Duration {
        let wait = self.delay_after(attempt);
        if self.jitter_pct == 0 {
            return wait;
        }
        let span = wait.mul_f64(f64::from(self.jitter_pct.min(100)) / 100.0);
        wait.saturating_sub(span.mul_f64(random_unit()))
    }

    /// Change the cap of an exponential backoff (no effect on a fixed one).
    pub fn with_max_interval(mut self, max: Duration) -> Self {
        if let Backoff::Exponential { initial, .. } = self.backoff {
            self.backoff = Backoff::Exponential { initial, max };
        }
        self
    }

    /// See [`Backoff::delay_after`].
    pub fn delay_after(&self, attempt: u32) -> Duration {
        self.backoff.delay_after(attempt)
    }

    /// Check the policy is usable: 1 ≤ `max_attempts` ≤ [`limits::MAX_ATTEMPTS`], intervals
    /// at most [`limits::MAX_INTERVAL`], and an exponential cap not below its initial wait.
    pub fn validate(&self, operation: &'static str) -> Result<()> {
        if self.max_attempts == 0 || self.max_attempts > limits::MAX_ATTEMPTS {
            return Err(Error::invalid_input(
                operation,
                format!(
                    "max_attempts must be between 1 and {}, got {}",
                    limits::MAX_ATTEMPTS,
                    self.max_attempts
                ),
            ));
        }
        let (interval, max) = (self.backoff.interval(), self.backoff.max_interval());
        if interval > limits::MAX_INTERVAL || max > limits::MAX_INTERVAL {
            return Err(Error::invalid_input(
                operation,
                format!(
                    "retry intervals must be at most {:?}, got {:?} (cap {:?})",
                    limits::MAX_INTERVAL,
                    interval,
                    max
                ),
            ));
        }
        if max < interval {
            return Err(Error::invalid_input(
                operation,
                format!("retry cap {max:?} is below the initial interval {interval:?}"),
            ));
        }
        if self.jitter_pct > 100 {
            return Err(Error::invalid_input(
                operation,
                format!("jitter must be 0 to 100 percent, got {}", self.jitter_pct),
            ));
        }
        Ok(())
    }
}

/// A number uniformly distributed in `[0, 1)`, from the standard library's per-process
/// random hash keys (good enough to spread retries; not for anything secret).
fn random_unit() -> f64 {
    use std::collections::hash_map::RandomState;
    use std::hash::{BuildHasher, Hasher};
    use std::sync::atomic::{AtomicU64, Ordering};
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let mut h = RandomState::new().build_hasher();
    h.write_u64(COUNTER.fetch_add(1, Ordering::Relaxed));
    (h.finish() >> 11) as f64 / (1u64 << 53) as f64
}

impl Default for RetryPolicy {
    /// 5 attempts, exponential backoff from 10 s, capped at 24 h, 25 % jitter.
    fn default() -> Self {
        Self::exponential(5, Duration::from_secs(10))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_notification_schedule_is_kept_stored_and_checked() {
        let unit = Duration::from_millis(20);
        let p = RetryPolicy::best_effort_in(unit);
        let waits: Vec<Duration> = (0..8).map(|n| p.delay_after(n)).collect();
        let ms = |n: u64| Duration::from_millis(20 * n);
        // attempt 0 counts as 1; past the schedule every wait is its last
        assert_eq!(
            waits,
            [ms(1), ms(1), ms(5), ms(10), ms(30), ms(60), ms(60), ms(60)]
        );
        assert_eq!(
            (0..50).map(|_| p.retry_delay(3)).max(),
            Some(ms(10)),
            "no jitter"
        );
        let b = p.backoff;
        assert_eq!(b.strategy(), "NOTIFY");
        let back = Backoff::from_parts(b.strategy(), b.interval(), b.max_interval()).unwrap();
        assert_eq!(back, b);
        assert!(p.validate("t").is_ok());
        // the longest wait must fit the interval limit
        let too_long = RetryPolicy::best_effort_in(limits::MAX_INTERVAL / 59);
        assert!(too_long.validate("t").is_err());
    }
}
