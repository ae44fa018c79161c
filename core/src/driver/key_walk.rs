//! A partitioned claim's walk over its partition keys ([`KeyWalk`]), without I/O: which
//! key to walk next and how far, when to stop, and where the next claim starts
//! ([`KeyCursors`]). The backends run the statements it asks for.

use std::collections::HashMap;
use std::sync::Mutex;

use super::{round_robin, Partitions, RawTask};

/// How many partition keys a claim lists before it may stop (`''`, the tasks without
/// a key, counts as one). Listing a key costs an index dive, and walking it one more: a
/// claim over thousands of keys with due tasks would spend its queue row's turn listing
/// them all. Once it has listed this many and walked as many tasks as it may claim, a
/// claim stops and takes those; the next claim of the type in this process lists on
/// from the key after the last one it listed (wrapping to `''`), so every key is listed
/// in turn. A claim that has not found its limit's worth lists on, round to where it
/// started: one that comes back short has seen every key, so short still means that
/// nothing more is due with room.
pub const KEYS_PER_CLAIM: usize = 32;

/// What a [`KeyWalk`] needs read next.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KeyStep<'a> {
    /// Walk `key`'s due tasks (of the tasks without a key when `key` is `''`) in claim
    /// order `(priority, next_run_at, id)`, at most `room` of them, locked as the claim
    /// locks; answer [`KeyWalk::walked`].
    Walk {
        /// The partition key.
        key: &'a str,
        /// At most this many.
        room: usize,
    },
    /// Find the first key in key order after `after` with a due task (`… WHERE
    /// partition_key > ? ORDER BY partition_key LIMIT 1` on the index of pending keyed
    /// rows; every key is after `''`); answer [`KeyWalk::next_key`].
    NextKey {
        /// The key to list after.
        after: &'a str,
    },
    /// The walk is over: take its tasks with [`KeyWalk::finish`].
    Done,
}

/// A partitioned claim's walk over its keys: starting where the last claim of the type
/// left off (or at `''`), each key with a due task in key order, walked up to its
/// [room](Partitions::room), wrapping past the last key to `''`, until every key was
/// listed once, or [`KEYS_PER_CLAIM`] were and the walks hold `limit` tasks; then the
/// first `limit` of the walked tasks in turns ([`round_robin`]): of the keys listed, the
/// heads that waited longest first.
///
/// ```
/// use backstop_core::driver::{Gate, KeyStep, KeyWalk, Partitions};
/// let gate = Gate { concurrency: 1, rate_limit: 0, rate_window_ms: 0, partitioned: true };
/// let mut used = Partitions::new(gate);
/// used.running("b", 1);
/// let mut walk = KeyWalk::new(used, 10, None);
/// assert_eq!(walk.step(), KeyStep::Walk { key: "", room: 1 });
/// walk.walked(Vec::new());
/// assert_eq!(walk.step(), KeyStep::NextKey { after: "" });
/// walk.next_key(Some("b".into()));
/// // "b" is full: no walk, the next key
/// assert_eq!(walk.step(), KeyStep::NextKey { after: "b" });
/// walk.next_key(None);
/// assert_eq!(walk.step(), KeyStep::Done);
/// let (tasks, cursor) = walk.finish();
/// assert!(tasks.is_empty());
/// assert_eq!(cursor, None, "every key listed: the next claim starts at ''");
/// ```
#[derive(Debug)]
pub struct KeyWalk {
    used: Partitions,
    limit: usize,
    /// Where the walk started: `None` at `''`, else after this key.
    start: Option<String>,
    /// The key at hand.
    key: String,
    /// Whether the key at hand still needs its walk.
    to_walk: bool,
    /// Whether the listing went past the last key back to `''`.
    wrapped: bool,
    /// Keys listed so far.
    listed: usize,
    /// Tasks walked so far.
    found: usize,
    done: bool,
    walks: Vec<Vec<RawTask>>,
}

impl KeyWalk {
    /// The walk of a claim of at most `limit` tasks, with the keys' use of the limits
    /// counted in `used`, starting after `cursor` (from [`KeyCursors::start`]; `None`:
    /// at `''`).
    pub fn new(used: Partitions, limit: usize, cursor: Option<String>) -> Self {
        let (key, to_walk) = match &cursor {
            None => (String::new(), true),
            Some(after) => (after.clone(), false),
        };
        KeyWalk {
            used,
            limit,
            start: cursor,
            key,
            to_walk,
            wrapped: false,
            listed: usize::from(to_walk),
            found: 0,
            done: limit == 0,
            walks: Vec::new(),
        }
    }

    /// What to read next.
    pub fn step(&self) -> KeyStep<'_> {
        if self.done {
            return KeyStep::Done;
        }
        if self.to_walk {
            let room = self.used.room(&self.key, self.limit);
            if room > 0 {
                return KeyStep::Walk {
                    key: &self.key,
                    room,
                };
            }
        }
        if self.enough() {
            return KeyStep::Done;
        }
        KeyStep::NextKey { after: &self.key }
    }

    /// Whether the walk may stop before every key was listed.
    fn enough(&self) -> bool {
        self.listed >= KEYS_PER_CLAIM && self.found >= self.limit
    }

    /// The answer to [`KeyStep::Walk`]: the key's due tasks, in claim order.
    pub fn walked(&mut self, tasks: Vec<RawTask>) {
        self.to_walk = false;
        self.found += tasks.len();
        if !tasks.is_empty() {
            self.walks.push(tasks);
        }
    }

    /// The answer to [`KeyStep::NextKey`]: the next key with a due task, if any.
    pub fn next_key(&mut self, key: Option<String>) {
        // a key [`step`](Self::step) passed by, full, is walked no more
        self.to_walk = false;
        match key {
            // past the start again (the start key itself is listed last)
            Some(key) if self.wrapped && self.start.as_ref().is_some_and(|s| key > *s) => {
                self.done = true;
            }
            Some(key) => {
                self.key = key;
                self.to_walk = true;
                self.listed += 1;
            }
            // past the last key: a walk that started at '' has listed them all; one
            // that started later goes round to ''
            None if self.start.is_none() || self.wrapped => self.done = true,
            None => {
                self.wrapped = true;
                self.key = String::new();
                self.to_walk = true;
                self.listed += 1;
            }
        }
    }

    /// The tasks to claim, in turns, at most the limit; and where the next claim of the
    /// type starts: after the last key listed when the walk stopped early (see
    /// [`KEYS_PER_CLAIM`]), at `''` (`None`) when it listed every key.
    pub fn finish(self) -> (Vec<RawTask>, Option<String>) {
        let cut = !self.done && self.enough();
        let cursor = cut.then_some(self.key);
        (round_robin(self.walks, self.limit), cursor)
    }
}

/// Where the next partitioned claim of each event type starts, in this process (see
/// [`KeyWalk`]). Claims of a type take turns on its queue row, so each reads and
/// writes its type's cursor in turn; a claim that fails leaves it as it was or moved on,
/// either of which only changes where the next claim starts.
#[derive(Debug, Default)]
pub struct KeyCursors(Mutex<HashMap<String, String>>);

impl KeyCursors {
    /// Where a claim of `event_type` starts.
    pub fn start(&self, event_type: &str) -> Option<String> {
        let cursors = self.0.lock().unwrap_or_else(|p| p.into_inner());
        cursors.get(event_type).cloned()
    }

    /// Record where the next claim of `event_type` starts.
    pub fn set(&self, event_type: &str, cursor: Option<String>) {
        let mut cursors = self.0.lock().unwrap_or_else(|p| p.into_inner());
        match cursor {
            Some(key) => {
                cursors.insert(event_type.to_owned(), key);
            }
            None => {
                cursors.remove(event_type);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::driver::Gate;

    fn gate() -> Gate {
        Gate {
            concurrency: 1,
            rate_limit: 0,
            rate_window_ms: 0,
            partitioned: true,
        }
    }

    /// Runs `walk` over `keys` (sorted; each has one due task, `''` none), returning
    /// the keys walked, in order.
    fn run(walk: &mut KeyWalk, keys: &[String]) -> Vec<String> {
        let mut walked = Vec::new();
        loop {
            match walk.step() {
                KeyStep::Walk { key, .. } => {
                    let tasks = match keys.iter().position(|k| k == key) {
                        Some(i) => vec![RawTask::due(i as i64 + 1)],
                        None => Vec::new(),
                    };
                    walked.push(key.to_owned());
                    walk.walked(tasks);
                }
                KeyStep::NextKey { after } => {
                    let next = keys.iter().find(|k| k.as_str() > after).cloned();
                    walk.next_key(next);
                }
                KeyStep::Done => return walked,
            }
        }
    }

    fn keys(n: usize) -> Vec<String> {
        (0..n).map(|i| format!("k{i:03}")).collect()
    }

    #[test]
    fn lists_every_key_when_few_and_starts_at_the_first_again() {
        let keys = keys(5);
        let mut walk = KeyWalk::new(Partitions::new(gate()), 50, None);
        let walked = run(&mut walk, &keys);
        assert_eq!(walked, ["", "k000", "k001", "k002", "k003", "k004"]);
        let (tasks, cursor) = walk.finish();
        assert_eq!(tasks.len(), 5);
        assert_eq!(cursor, None);
    }

    #[test]
    fn stops_at_the_bound_with_enough_and_the_next_claim_goes_on_wrapping() {
        let keys = keys(100);
        let bound = KEYS_PER_CLAIM;
        let mut walk = KeyWalk::new(Partitions::new(gate()), 10, None);
        let first = run(&mut walk, &keys);
        assert_eq!(first.len(), bound, "'' and the first keys");
        assert_eq!(first[0], "");
        let (tasks, cursor) = walk.finish();
        let ids: Vec<i64> = tasks.iter().map(|t| t.id).collect();
        assert_eq!(ids, (1..=10).collect::<Vec<_>>(), "the oldest heads listed");
        assert_eq!(cursor, Some(keys[bound - 2].clone()));
        let mut seen: Vec<String> = first;
        let mut cursor = cursor;
        for _ in 0..3 {
            let mut walk = KeyWalk::new(Partitions::new(gate()), 10, cursor);
            let walked = run(&mut walk, &keys);
            assert_eq!(walked.len(), bound);
            seen.extend(walked);
            cursor = walk.finish().1;
        }
        seen.sort();
        seen.dedup();
        assert_eq!(seen.len(), 101, "every key, and '', listed in four claims");
    }

    #[test]
    fn a_walk_short_of_its_limit_goes_round_once() {
        let keys = keys(40);
        let mut walk = KeyWalk::new(Partitions::new(gate()), 50, Some("k004".into()));
        let walked = run(&mut walk, &keys);
        assert_eq!(walked.len(), 41, "every key and ''");
        assert_eq!(walked[0], "k005");
        assert_eq!(walked[35], "");
        assert_eq!(walked[40], "k004", "the start key last");
        let (tasks, cursor) = walk.finish();
        assert_eq!(tasks.len(), 40);
        assert_eq!(cursor, None, "all listed: back to ''");
    }

    #[test]
    fn full_keys_are_listed_not_walked_and_a_claim_lists_on_for_room() {
        let keys = keys(200);
        let mut used = Partitions::new(gate());
        for k in &keys[..150] {
            used.running(k, 1);
        }
        let mut walk = KeyWalk::new(used, 10, None);
        let walked = run(&mut walk, &keys);
        assert_eq!(walked[0], "", "'' has room (and no task)");
        assert_eq!(walked[1], "k150", "the full keys listed, not walked");
        assert_eq!(walked.len(), 11);
        let (tasks, cursor) = walk.finish();
        assert_eq!(tasks.len(), 10);
        assert_eq!(cursor.as_deref(), Some("k159"));
    }

    #[test]
    fn a_claim_of_none_reads_nothing() {
        let walk = KeyWalk::new(Partitions::new(gate()), 0, None);
        assert_eq!(walk.step(), KeyStep::Done);
    }
}
