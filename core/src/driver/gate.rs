//! The room a limited type's claim has ([`Gate`]): what its queue's concurrency limit
//! leaves over its running tasks, and its rate limit over its starts in the window; of
//! a partitioned queue, per partition ([`Partitions`]), taken in turns
//! ([`round_robin`]).

use std::collections::HashMap;

use super::RawTask;

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
/// A **partitioned** queue's limits hold per partition key (the task column
/// `partition_key`, `''` for none). Its claim, under the same lock:
///
/// 1. counts the running tasks and the window's starts per key ([`Partitions`]; the
///    ledger rows carry the key of the tasks they counted);
/// 2. lists the keys with a due task: `''`, then the others in key order, one index
///    dive each (`… WHERE partition_key > ? ORDER BY partition_key LIMIT 1` on the
///    index `(event_type, partition_key, priority, next_run_at, id)` of pending rows),
///    at most [`KEYS_PER_CLAIM`](super::KEYS_PER_CLAIM) of them, from where the last
///    claim stopped ([`KeyWalk`](super::KeyWalk) says which key to list and walk next);
/// 3. walks each key's due tasks in claim order, at most its
///    [`room`](Partitions::room) and the claim's limit;
/// 4. claims the first `limit` of them in turns ([`round_robin`]);
/// 5. adds one ledger row per key it claimed tasks of.
///
/// A **hand-over** ([`Driver::mark_and_claim`](super::Driver::mark_and_claim)) of a
/// type whose only limit is its concurrency
/// ([`hands_over_unlocked`](Self::hands_over_unlocked)) reads the row without locking
/// it, applies the marks, and claims at most [`handover_room`](Self::handover_room): no
/// more than its applied marks of the type took out of running, so it never raises the
/// running count and needs no turn on the row (a claim that raises the count takes the
/// lock, and counts the hand-over's marked tasks as running until it commits). Any
/// other limited type's hand-over locks the row before its marks and claims as above.
///
/// ```
/// use backstop_core::driver::Gate;
/// let gate = Gate { concurrency: 5, rate_limit: 10, rate_window_ms: 60_000, partitioned: false };
/// assert_eq!(gate.room(50, 3, 0), 2); // the concurrency limit's room
/// assert_eq!(gate.room(50, 0, 9), 1); // the rate's room
/// assert_eq!(gate.room(1, 0, 0), 1); // the claim's own limit
/// let rate_only = Gate { concurrency: 0, rate_limit: 10, rate_window_ms: 1000, partitioned: false };
/// assert_eq!(rate_only.room(50, 40, 4), 6);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Gate {
    /// The concurrency limit (0: none).
    pub concurrency: i64,
    /// The most starts per window (0: no rate limit).
    pub rate_limit: i64,
    /// The rate's window, in milliseconds.
    pub rate_window_ms: i64,
    /// Whether the limits hold per partition key.
    pub partitioned: bool,
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

    /// Whether a hand-over of the type claims without the row's lock: its only limit
    /// is its concurrency (no rate, not partitioned).
    ///
    /// ```
    /// use backstop_core::driver::Gate;
    /// let gate = Gate { concurrency: 5, rate_limit: 0, rate_window_ms: 0, partitioned: false };
    /// assert!(gate.hands_over_unlocked());
    /// assert!(!Gate { rate_limit: 10, ..gate }.hands_over_unlocked());
    /// assert!(!Gate { partitioned: true, ..gate }.hands_over_unlocked());
    /// ```
    pub fn hands_over_unlocked(&self) -> bool {
        self.concurrency > 0 && self.rate_limit == 0 && !self.partitioned
    }

    /// The most an unlocked hand-over may claim, at most `limit`: what its applied
    /// marks of the type `freed` (took out of running), and the room its own count of
    /// `running` tasks (after its marks) leaves, so a limit lowered below the running
    /// count hands nothing on.
    ///
    /// ```
    /// use backstop_core::driver::Gate;
    /// let gate = Gate { concurrency: 5, rate_limit: 0, rate_window_ms: 0, partitioned: false };
    /// assert_eq!(gate.handover_room(50, 2, 1), 2); // what the marks freed, not 4
    /// assert_eq!(gate.handover_room(50, 3, 4), 1); // the room
    /// assert_eq!(gate.handover_room(50, 3, 6), 0); // lowered below the running count
    /// assert_eq!(gate.handover_room(1, 3, 0), 1); // the claim's own limit
    /// ```
    pub fn handover_room(&self, limit: usize, freed: usize, running: i64) -> usize {
        self.room(limit, running, 0).min(freed)
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

/// A partitioned queue's use of its limits, per partition key: the running tasks (when
/// the gate [counts them](Gate::counts_running)) and the starts in the rate's window
/// (when it [counts those](Gate::counts_starts)).
///
/// ```
/// use backstop_core::driver::{Gate, Partitions};
/// let gate = Gate { concurrency: 2, rate_limit: 0, rate_window_ms: 0, partitioned: true };
/// let mut used = Partitions::new(gate);
/// used.running("tenant-a", 2);
/// used.running("tenant-b", 1);
/// assert_eq!(used.room("tenant-a", 50), 0);
/// assert_eq!(used.room("tenant-b", 50), 1);
/// assert_eq!(used.room("tenant-c", 50), 2);
/// assert_eq!(used.room("tenant-c", 1), 1);
/// ```
#[derive(Debug, Clone)]
pub struct Partitions {
    gate: Gate,
    /// key → (running, started)
    used: HashMap<String, (i64, i64)>,
}

impl Partitions {
    /// No use counted yet.
    pub fn new(gate: Gate) -> Self {
        Partitions {
            gate,
            used: HashMap::new(),
        }
    }

    /// Count `n` running tasks of `key`.
    pub fn running(&mut self, key: &str, n: i64) {
        self.used.entry(key.to_owned()).or_default().0 += n;
    }

    /// Count `n` starts of `key` in the window.
    pub fn started(&mut self, key: &str, n: i64) {
        self.used.entry(key.to_owned()).or_default().1 += n;
    }

    /// How many tasks of `key` a claim of at most `limit` may take.
    pub fn room(&self, key: &str, limit: usize) -> usize {
        let (running, started) = self.used.get(key).copied().unwrap_or_default();
        self.gate.room(limit, running, started)
    }
}

/// A claim's ledger rows (step 4 of [`Gate`]'s): how many of the claimed `tasks` each
/// partition key started, by key. One row for a claim of an unpartitioned type whose
/// tasks have no key; rows per key otherwise, so the window's starts per key are there
/// when the queue is partitioned later.
///
/// ```
/// # use backstop_core::driver::starts_per_key;
/// assert!(starts_per_key(&[]).is_empty());
/// ```
pub fn starts_per_key(tasks: &[RawTask]) -> Vec<(&str, i64)> {
    let mut keys: Vec<(&str, i64)> = Vec::new();
    for t in tasks {
        match keys.iter_mut().find(|(k, _)| *k == t.partition_key) {
            Some((_, n)) => *n += 1,
            None => keys.push((&t.partition_key, 1)),
        }
    }
    keys
}

/// The tasks a partitioned claim takes: of each partition's walked tasks (each walk in
/// claim order, at most the partition's room), the first `limit` in turns — every
/// partition's first task, then every partition's second, … — each round in claim
/// order `(priority, next_run_at, id)`. So the partition whose head waited longest goes
/// first, and one with a backlog takes one place per round, not the whole claim.
///
/// ```
/// use backstop_core::driver::{round_robin, RawTask};
/// # fn task(id: i64, next_run_secs: i64) -> RawTask {
/// #     let at = chrono::DateTime::from_timestamp(next_run_secs, 0).unwrap();
/// #     RawTask { id, event_type: "T".into(), biz_key: id.to_string(), payload: "{}".into(),
/// #         status: 0, attempts: 0, max_attempts: 3, retry_strategy: "fixed".into(),
/// #         retry_interval_ms: 0, retry_max_interval_ms: 0, next_run_at: at, owner: None,
/// #         lease: 0, last_error: None, created_at: at, updated_at: at, priority: 0,
/// #         retry_jitter_pct: 0, order_key: None, order_block: 0, timeout_ms: None,
/// #         snoozes: 0, tags: None, metadata: None, output: None, traceparent: None,
/// #         partition_key: String::new() }
/// # }
/// // a busy partition (tasks 1–4, the oldest) and a quiet one (task 9)
/// let busy = vec![task(1, 10), task(2, 11), task(3, 12), task(4, 13)];
/// let quiet = vec![task(9, 50)];
/// let ids: Vec<i64> = round_robin(vec![busy, quiet], 3).iter().map(|t| t.id).collect();
/// assert_eq!(ids, [1, 9, 2]);
/// ```
pub fn round_robin(walks: Vec<Vec<RawTask>>, limit: usize) -> Vec<RawTask> {
    let mut ranked: Vec<(usize, RawTask)> = walks
        .into_iter()
        .flat_map(|walk| walk.into_iter().enumerate())
        .collect();
    ranked.sort_unstable_by_key(|(rank, t)| (*rank, t.priority, t.next_run_at, t.id));
    ranked.truncate(limit);
    ranked.into_iter().map(|(_, t)| t).collect()
}
