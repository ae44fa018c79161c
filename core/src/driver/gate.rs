//! The room a limited type's claim has ([`Gate`]): what its queue's concurrency limit
//! leaves over its running tasks, and its rate limit over its starts in the window.

/// A limited type's queue row as its batch claim reads it (under the row's lock), and
/// the room it leaves a claim.
///
/// **For backend authors**: a type is *limited* when its queue row has `concurrency > 0`
/// or `rate_limit > 0` (and is not paused). Every claim but the batch claim passes it
/// by; the batch claim claims it in a transaction of its own:
///
/// 1. lock the queue's row (`SELECT concurrency, rate_limit, rate_window_ms … FOR
///    UPDATE`), so claims of the type, on every instance, take turns;
/// 2. count what the limits need: the type's running tasks when
///    [`counts_running`](Self::counts_running), the starts in the ledger
///    (`<table>_rate`: `SUM(starts)` of the rows of the type whose `at` is within the
///    last `rate_window_ms`, database time) when [`counts_starts`](Self::counts_starts);
/// 3. claim at most [`room`](Self::room);
/// 4. when it claimed `n > 0` tasks and the type has a rate limit, add the ledger row
///    `(type, now, n)` (at or after the count's now) and delete the type's rows the
///    window has passed ([`window`](Self::window)).
///
/// ```
/// use backstop_core::driver::Gate;
/// let gate = Gate { concurrency: 5, rate_limit: 10, rate_window_ms: 60_000 };
/// assert_eq!(gate.room(50, 3, 0), 2); // the concurrency limit's room
/// assert_eq!(gate.room(50, 0, 9), 1); // the rate's room
/// assert_eq!(gate.room(1, 0, 0), 1); // the claim's own limit
/// assert_eq!(Gate { concurrency: 0, rate_limit: 10, rate_window_ms: 1000 }.room(50, 40, 4), 6);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Gate {
    /// The concurrency limit (0: none).
    pub concurrency: i64,
    /// The most starts per window (0: no rate limit).
    pub rate_limit: i64,
    /// The rate's window, in milliseconds.
    pub rate_window_ms: i64,
}

impl Gate {
    /// Whether the concurrency limit needs the running tasks counted.
    pub fn counts_running(&self) -> bool {
        self.concurrency > 0
    }

    /// Whether the rate limit needs the window's starts counted (and each claim
    /// recorded).
    pub fn counts_starts(&self) -> bool {
        self.rate_limit > 0
    }

    /// The rate's window (zero without a rate limit).
    pub fn window(&self) -> std::time::Duration {
        std::time::Duration::from_millis(u64::try_from(self.rate_window_ms).unwrap_or(0))
    }

    /// How many tasks a claim of at most `limit` may take, with `running` tasks of the
    /// type running and `started` starts in the rate's window.
    pub fn room(&self, limit: usize, running: i64, started: i64) -> usize {
        let mut room = i64::try_from(limit).unwrap_or(i64::MAX);
        if self.counts_running() {
            room = room.min(self.concurrency - running);
        }
        if self.counts_starts() {
            room = room.min(self.rate_limit - started);
        }
        usize::try_from(room).unwrap_or(0)
    }
}
