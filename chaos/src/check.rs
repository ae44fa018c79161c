//! The invariants, checked at the end of a run against the rows and the ledgers, each
//! reported with its counts.

use std::collections::{HashMap, HashSet};
use std::fmt::Write as _;
use std::path::PathBuf;
use std::time::Duration;

use backstop::{Status, Task, TaskId};

use crate::driver::{Backend, Fault, FaultKind, Lane, Outcome, Written};
use crate::ledger::Entry;
use crate::worker::{
    published_twice, DEAD_AFTER, FAIL, FAIL_ATTEMPTS, HELD, LIMITED, OK, POLL, RATED, RELAY,
};

/// A worker stopped with SIGTERM: whether it exited cleanly, and how many rows it left
/// `running` under its name (checked after a mid-run stop).
#[derive(Debug, Clone)]
pub struct Graceful {
    pub pid: u32,
    pub clean: bool,
    /// The rows it left `running`.
    pub left: Vec<TaskId>,
}

/// Everything a run produced.
pub struct Input {
    pub backend: Backend,
    pub lane: Lane,
    pub seed: u64,
    pub written: HashMap<String, Written>,
    pub tasks: Vec<Task>,
    pub orders: Vec<String>,
    pub ledgers: HashMap<String, Vec<Entry>>,
    pub faults: Vec<Fault>,
    pub settle_ms: i64,
    pub settle_bound: Duration,
    /// When the last fault ended (ms since the epoch), and the tasks pending and running
    /// then: what the settling time is counted from.
    pub quiet_from: i64,
    pub backlog_then: (u64, u64),
    /// How long the workers took to catch up with the writers before the last fault.
    pub catch_up_ms: i64,
    /// The consumers' effect rows, `(msg_id, biz_key)`.
    pub effects: Vec<(String, String)>,
    /// Entries in the dead-letter stream.
    pub dead_letters: u64,
    /// What the sagas left.
    pub sagas: crate::saga::Outcomes,
    /// When every relayed task's effect was there, after the last fault.
    pub inbox_settle_ms: i64,
    pub inbox_bound: Duration,
    pub graceful: Vec<Graceful>,
    pub running_after: Vec<TaskId>,
    /// When the `HELD` queue's pause returned and its resume was sent (ms since the
    /// epoch): no task of it existed before the pause, so no claim of one may come
    /// before the resume.
    pub held: (i64, i64),
    /// Galera: each node's peak memory and its state at the end.
    pub galera: Option<crate::galera::Health>,
    pub dir: PathBuf,
}

/// One invariant's verdict.
pub struct Line {
    pub ok: bool,
    pub name: &'static str,
    pub detail: String,
}

/// The verdicts of a run, and its headline figures.
pub struct Report {
    pub title: String,
    pub lines: Vec<Line>,
    /// Duplicate runs per fault kind that explains them.
    pub duplicates: Vec<(FaultKind, u64)>,
    /// Tasks that ran more than once (beyond their failed attempts), and tasks in all.
    pub duplicated_tasks: (u64, u64),
    pub dir: PathBuf,
}

impl Report {
    /// No invariant was violated.
    pub fn ok(&self) -> bool {
        self.lines.iter().all(|l| l.ok)
    }

    /// The report as printed.
    pub fn render(&self) -> String {
        let mut s = format!("{}\n", self.title);
        for l in &self.lines {
            let _ = writeln!(
                s,
                "  {}  {:<48} {}",
                if l.ok { "ok  " } else { "FAIL" },
                l.name,
                l.detail
            );
        }
        if !self.ok() {
            let _ = writeln!(
                s,
                "  the ledgers and worker logs are kept in {}",
                self.dir.display()
            );
        }
        s
    }
}

pub(crate) struct Run {
    pub task: TaskId,
    pub lease: i64,
    pub pid: u32,
    pub start: i64,
    pub end: Option<(String, i64)>,
}

struct MarkRec {
    lease: i64,
    action: String,
    /// `None`: the call failed and may have applied.
    applied: Option<bool>,
    sent: i64,
}

/// What the ledgers say of one task: its claims `(lease, at)`, runs and marks.
#[derive(Default)]
pub(crate) struct PerTask {
    pub claims: Vec<(i64, i64)>,
    pub runs: Vec<Run>,
    marks: Vec<MarkRec>,
}

fn index(ledgers: &HashMap<String, Vec<Entry>>) -> HashMap<TaskId, PerTask> {
    let mut by: HashMap<TaskId, PerTask> = HashMap::new();
    for entries in ledgers.values() {
        let mut ends: HashMap<(TaskId, i64), (String, i64)> = HashMap::new();
        for e in entries {
            if let Entry::End {
                task,
                lease,
                outcome,
                at,
            } = e
            {
                ends.insert((*task, *lease), (outcome.clone(), *at));
            }
        }
        for e in entries {
            match e {
                Entry::Claim {
                    task, lease, at, ..
                } => by.entry(*task).or_default().claims.push((*lease, *at)),
                Entry::Start {
                    task,
                    lease,
                    pid,
                    at,
                } => by.entry(*task).or_default().runs.push(Run {
                    task: *task,
                    lease: *lease,
                    pid: *pid,
                    start: *at,
                    end: ends.get(&(*task, *lease)).cloned(),
                }),
                Entry::Mark {
                    task,
                    lease,
                    action,
                    applied,
                    sent,
                    ..
                } => by.entry(*task).or_default().marks.push(MarkRec {
                    lease: *lease,
                    action: action.clone(),
                    applied: *applied,
                    sent: *sent,
                }),
                _ => {}
            }
        }
    }
    for t in by.values_mut() {
        t.runs.sort_by_key(|r| r.start);
    }
    by
}

/// The fault that explains a second run after `first`, if any: a kill of either run's
/// worker, or a fault every worker saw, between the first's start and the second's. A
/// stop is seen by every worker: the stopped one may hold SQLite's write lock, or row
/// locks in the middle of a transaction (a mark in several rounds), that the others'
/// statements wait for.
///
/// A kill explains the runs it cut short. The other faults leave leases that were not
/// refreshed while they lasted: the sweep may recycle those until `dead_after` and a poll
/// after the fault ended, and a stopped worker, woken, starts the tasks it had claimed
/// before, so their effect lasts that much longer than the fault.
fn explain(faults: &[Fault], first: &Run, second: &Run) -> Option<FaultKind> {
    let linger = (DEAD_AFTER + POLL).as_millis() as i64;
    faults
        .iter()
        .filter(|f| f.kind != FaultKind::Term && f.kind.hits_engines())
        .filter(|f| {
            let end = if f.kind == FaultKind::Kill {
                f.end
            } else {
                f.end + linger
            };
            f.start <= second.start && end >= first.start
        })
        .find(|f| match f.pid {
            None => true,
            Some(_) if f.kind == FaultKind::Stop => true,
            Some(p) => p == first.pid || p == second.pid,
        })
        .map(|f| f.kind)
}

/// A few of the offending task ids, to look them up in the ledgers.
fn ids(examples: &[TaskId]) -> String {
    some("tasks", examples.iter().map(|i| i.to_string()))
}

/// A few of the offenders (`what` names them), for a verdict's detail: empty, or
/// `; <what> a, b, …` (five at most).
pub fn some(what: &str, all: impl Iterator<Item = String>) -> String {
    let some: Vec<String> = all.take(5).collect();
    if some.is_empty() {
        String::new()
    } else {
        format!("; {what} {}", some.join(", "))
    }
}

/// The verdict of a settling time: `ms` after the last fault (`i64::MAX`: never) within
/// `bound`.
pub fn settled(name: &'static str, ms: i64, bound: Duration) -> Line {
    let bound_ms = bound.as_millis() as i64;
    Line {
        ok: ms <= bound_ms,
        name,
        detail: if ms == i64::MAX {
            "never settled".into()
        } else {
            format!("{ms} ms after the last fault (bound {bound_ms} ms)")
        },
    }
}

fn terminal(s: Status) -> bool {
    matches!(s, Status::Succeeded | Status::Failed | Status::Cancelled)
}

/// Check every invariant of a run.
pub fn check(input: Input) -> Report {
    let Input {
        backend,
        lane,
        seed,
        written,
        tasks,
        orders,
        ledgers,
        faults,
        settle_ms,
        settle_bound,
        quiet_from,
        backlog_then,
        catch_up_ms,
        effects,
        dead_letters,
        sagas,
        inbox_settle_ms,
        inbox_bound,
        graceful,
        running_after,
        held,
        galera,
        dir,
    } = input;
    let mut lines = Vec::new();
    // the sagas' step tasks (and their reconciler's ticks) are checked as sagas, below;
    // every other invariant is of the suite's own tasks
    let tasks: Vec<Task> = tasks
        .into_iter()
        .filter(|t| !t.event_type.starts_with("saga:"))
        .collect();
    let by_key: HashMap<&str, &Task> = tasks.iter().map(|t| (t.biz_key.as_str(), t)).collect();
    let orders: HashSet<&str> = orders.iter().map(String::as_str).collect();
    let saga_keys: HashSet<&str> = sagas.sagas.iter().map(|s| s.key.as_str()).collect();
    let count = |o: Outcome| written.values().filter(|w| w.outcome == o).count();
    let (committed, rolled_back, unknown) = (
        count(Outcome::Committed),
        count(Outcome::RolledBack),
        count(Outcome::Unknown),
    );
    // the workers' own transactions, their task claimed in them (keys `w…`)
    let claimed_in_tx = written
        .iter()
        .filter(|(k, w)| k.starts_with('w') && w.outcome == Outcome::Committed)
        .count();

    // 1. every committed task reached the terminal state its kind leads to
    let (mut missing, mut unfinished, mut wrong) = (0, 0, 0);
    for (key, w) in &written {
        if w.outcome != Outcome::Committed || w.event_type == crate::saga::STARTED {
            continue;
        }
        match by_key.get(key.as_str()) {
            None => missing += 1,
            Some(t) if !terminal(t.status) => unfinished += 1,
            Some(t) => {
                let right = match w.event_type {
                    OK | RELAY | HELD | LIMITED | RATED => t.status == Status::Succeeded,
                    FAIL => t.status == Status::Failed && t.attempts == FAIL_ATTEMPTS,
                    _ => false,
                };
                if !right || !orders.contains(key.as_str()) {
                    wrong += 1;
                }
            }
        }
    }
    lines.push(Line {
        ok: missing + unfinished + wrong == 0 && committed > 0,
        name: "every committed task terminal, as its kind says",
        detail: format!(
            "{committed} committed: {missing} missing, {unfinished} not terminal, {wrong} in the wrong state"
        ),
    });

    // 2. nothing of a rolled-back transaction; all or nothing of a lost commit
    let mut leaked = 0;
    let mut split = 0;
    let mut strays = 0;
    for (key, w) in &written {
        let (task, order) = (
            by_key.contains_key(key.as_str()) || saga_keys.contains(key.as_str()),
            orders.contains(key.as_str()),
        );
        match w.outcome {
            Outcome::RolledBack if task || order => leaked += 1,
            Outcome::Unknown if task != order => split += 1,
            _ => {}
        }
    }
    for t in &tasks {
        if !written.contains_key(&t.biz_key) {
            strays += 1;
        }
    }
    lines.push(Line {
        ok: leaked + split + strays == 0,
        name: "rolled back leaves nothing; lost commits whole",
        detail: format!(
            "{rolled_back} rolled back: {leaked} left rows; {unknown} commit answers lost: {split} split; {strays} tasks of no transaction"
        ),
    });

    let per = index(&ledgers);

    // 2b. a task a worker claimed in its own transaction and never ran under that claim
    // (killed between the commit and the hand-over, or shut down: the trade-off of
    // `Engine::claim_in`) was taken over and finished under a later lease
    let (mut orphaned, mut not_taken_over) = (0, Vec::new());
    for (key, w) in &written {
        if !key.starts_with('w') || w.outcome != Outcome::Committed {
            continue;
        }
        let Some(t) = by_key.get(key.as_str()) else {
            continue;
        };
        let ran_first = per
            .get(&t.id)
            .is_some_and(|p| p.runs.iter().any(|r| r.lease == 1));
        if !ran_first {
            orphaned += 1;
            if !(terminal(t.status) && t.lease > 1) {
                not_taken_over.push(t.id);
            }
        }
    }
    lines.push(Line {
        ok: not_taken_over.is_empty(),
        name: "claimed in the transaction, never run: taken over",
        detail: format!(
            "{claimed_in_tx} claimed in their transaction: {orphaned} never run under that claim (worker killed or stopped first), {} of them not finished under a later lease{}",
            not_taken_over.len(),
            ids(&not_taken_over)
        ),
    });

    // 2c. a paused queue starts nothing: no task of the held type was claimed between its
    // pause and its resume, by the poller, run-ahead or a wake-up, whatever the faults did
    let (paused_at, resumed_at) = held;
    let (mut held_tasks, mut enqueued_paused, mut early) = (0, 0, Vec::new());
    for t in tasks.iter().filter(|t| t.event_type == HELD) {
        held_tasks += 1;
        if t.created_at.timestamp_millis() < resumed_at {
            enqueued_paused += 1;
        }
        let claimed_early = per
            .get(&t.id)
            .is_some_and(|p| p.claims.iter().any(|&(_, at)| at < resumed_at));
        if claimed_early {
            early.push(t.id);
        }
    }
    lines.push(Line {
        ok: early.is_empty() && enqueued_paused > 0,
        name: "a paused queue starts nothing while paused",
        detail: format!(
            "{held_tasks} tasks of {HELD}, {enqueued_paused} enqueued during its {} ms pause: {} claimed before the resume{}",
            resumed_at - paused_at,
            early.len(),
            ids(&early)
        ),
    });

    // 2d. the limited type never ran more than its limit at once, but where a lease
    // expired under a live run
    let limited: Vec<TaskId> = tasks
        .iter()
        .filter(|t| t.event_type == LIMITED)
        .map(|t| t.id)
        .collect();
    lines.push(crate::limit::check(&limited, &per, &ledgers, &faults));

    // 2e. no window held more claims of the rate-limited type than its rate
    let rated: Vec<TaskId> = tasks
        .iter()
        .filter(|t| t.event_type == RATED)
        .map(|t| t.id)
        .collect();
    lines.push(crate::rate::check(&rated, &ledgers));

    // 3. no stale lease applied: an applied mark's lease was the newest claim when sent
    let (mut applied, mut stale) = (0u64, 0u64);
    for p in per.values() {
        for m in p.marks.iter().filter(|m| m.applied == Some(true)) {
            applied += 1;
            if p.claims.iter().any(|&(l, at)| l > m.lease && at < m.sent) {
                stale += 1;
            }
        }
    }
    lines.push(Line {
        ok: stale == 0 && applied > 0,
        name: "no stale lease ever applied",
        detail: format!("{applied} marks applied, {stale} by a lease already superseded"),
    });

    // 4. the final state was written by the final lease
    let killed_after = |pid: u32, t: i64| {
        faults
            .iter()
            .any(|f| f.kind == FaultKind::Kill && f.pid == Some(pid) && f.start >= t)
    };
    let (mut finals, mut behind, mut not_by_final, mut unrecorded) = (0u64, 0u64, 0u64, 0u64);
    let mut examples = Vec::new();
    let mut answer_lost = 0u64;
    for t in tasks.iter().filter(|t| terminal(t.status)) {
        finals += 1;
        let Some(p) = per.get(&t.id) else { continue };
        let newest = p
            .claims
            .iter()
            .map(|c| c.0)
            .chain(p.runs.iter().map(|r| r.lease))
            .max()
            .unwrap_or(0);
        if newest > t.lease {
            behind += 1;
            examples.push(t.id);
        }
        let want: &[&str] = if t.status == Status::Succeeded {
            &["success"]
        } else {
            &["fail", "retry"]
        };
        let by_final = |applied: Option<bool>| {
            p.marks.iter().any(|m| {
                m.applied == applied && m.lease == t.lease && want.contains(&m.action.as_str())
            })
        };
        if by_final(Some(true)) {
            continue;
        }
        if by_final(None) {
            // the final lease's mark applied but its answer was lost (a fault)
            answer_lost += 1;
            continue;
        }
        // its worker died between the mark and the ledger line, or the sweep parked it
        let run = p.runs.iter().find(|r| r.lease == t.lease);
        match run {
            Some(r) if killed_after(r.pid, r.start) => unrecorded += 1,
            // attempts used up by a holder that died or stopped: the sweep parked it
            _ if t.status == Status::Failed => unrecorded += 1,
            _ => {
                not_by_final += 1;
                examples.push(t.id);
            }
        }
    }
    lines.push(Line {
        ok: behind + not_by_final == 0,
        name: "final state written by the final lease",
        detail: format!(
            "{finals} terminal: {behind} behind a newer claim, {not_by_final} not by their final lease ({answer_lost} by a mark whose answer was lost, {unrecorded} by a worker killed before its ledger line or by the sweep){}",
            ids(&examples)
        ),
    });

    // 5. duplicate runs only where a fault explains them
    let mut dups: HashMap<FaultKind, u64> = HashMap::new();
    let (mut unexplained, mut after_success, mut dup_tasks) = (0u64, 0u64, 0u64);
    let mut dup_examples = Vec::new();
    for p in per.values() {
        let mut dup = false;
        for pair in p.runs.windows(2) {
            let (a, b) = (&pair[0], &pair[1]);
            if matches!(&a.end, Some((o, _)) if o == "retry") {
                continue; // a failed attempt and its retry
            }
            dup = true;
            // a claim after an applied success: the task ran again although done (a
            // stale holder's copy, claimed before, is a duplicate its fault explains)
            let succeeded_before = p
                .marks
                .iter()
                .any(|m| m.applied == Some(true) && m.action == "success" && m.lease < b.lease);
            if succeeded_before {
                after_success += 1;
                dup_examples.push(a.task);
                continue;
            }
            match explain(&faults, a, b) {
                Some(k) => *dups.entry(k).or_default() += 1,
                None => {
                    unexplained += 1;
                    dup_examples.push(a.task);
                }
            }
        }
        if dup {
            dup_tasks += 1;
        }
    }
    let mut duplicates: Vec<(FaultKind, u64)> = dups.into_iter().collect();
    duplicates.sort();
    let explained: u64 = duplicates.iter().map(|d| d.1).sum();
    let total_tasks = tasks.len() as u64;
    lines.push(Line {
        ok: unexplained + after_success == 0,
        name: "duplicate runs only where a fault explains them",
        detail: format!(
            "{} tasks ran twice ({:.2}%): {explained} explained ({}), {unexplained} unexplained, {after_success} after an applied success{}",
            dup_tasks,
            100.0 * dup_tasks as f64 / total_tasks.max(1) as f64,
            duplicates
                .iter()
                .map(|(k, n)| format!("{} {n}", k.name()))
                .collect::<Vec<_>>()
                .join(", "),
            ids(&dup_examples)
        ),
    });

    // 6. the relay's messages applied exactly once through the inbox
    let mut applied_by_key: HashMap<&str, Vec<&str>> = HashMap::new();
    for (msg, key) in &effects {
        applied_by_key
            .entry(key.as_str())
            .or_default()
            .push(msg.as_str());
    }
    let (mut relayed, mut unapplied, mut twice, mut stray_effects) = (0u64, 0u64, 0u64, 0u64);
    let mut effect_examples = Vec::new();
    for (key, w) in &written {
        let applied = applied_by_key.get(key.as_str()).map_or(0, Vec::len);
        let committed = w.event_type == RELAY && w.outcome == Outcome::Committed;
        // a lost commit answer: its message may exist; it must be applied once if it does
        let exists = by_key
            .get(key.as_str())
            .is_some_and(|t| t.event_type == RELAY);
        if committed || exists {
            relayed += 1;
            match applied {
                0 => unapplied += 1,
                1 => {}
                _ => twice += 1,
            }
            if applied != 1 {
                if let Some(t) = by_key.get(key.as_str()) {
                    effect_examples.push(t.id);
                }
            }
        } else if applied > 0 {
            stray_effects += 1;
        }
    }
    stray_effects += applied_by_key
        .keys()
        .filter(|k| !written.contains_key(**k))
        .count() as u64;
    // XADDs beyond the first of a task: published twice, left to the inbox to absorb
    let republished: usize = per
        .values()
        .filter(|p| {
            p.runs
                .first()
                .and_then(|r| tasks.iter().find(|t| t.id == r.task))
                .is_some_and(|t| t.event_type == RELAY)
        })
        .map(|p| {
            p.runs
                .iter()
                .filter(|r| matches!(&r.end, Some((o, _)) if o == "ok"))
                .count()
                .saturating_sub(1)
        })
        .sum();
    let doubled = tasks
        .iter()
        .filter(|t| t.event_type == RELAY && t.status == Status::Succeeded)
        .filter(|t| published_twice(t.id))
        .count();
    lines.push(Line {
        ok: unapplied + twice + stray_effects + dead_letters == 0 && relayed > 0 && doubled > 0,
        name: "inbox effects exactly once",
        detail: format!(
            "{relayed} relayed: {unapplied} never applied, {twice} applied more than once, {stray_effects} effects of no relayed task, {dead_letters} dead-lettered; published twice: {doubled} on purpose, {republished} after a lost answer{}",
            ids(&effect_examples)
        ),
    });
    lines.push(settled(
        "inbox settled within the tasks' bound + reclaim",
        inbox_settle_ms,
        inbox_bound,
    ));

    // the sagas' invariants
    lines.extend(crate::saga::check(&written, &orders, &sagas));

    // 7. graceful shutdown leaves nothing running
    let unclean: Vec<TaskId> = graceful
        .iter()
        .filter(|g| !g.clean)
        .map(|g| i64::from(g.pid))
        .collect();
    let mut left: Vec<TaskId> = graceful.iter().flat_map(|g| g.left.clone()).collect();
    left.extend(running_after);
    lines.push(Line {
        ok: unclean.is_empty() && left.is_empty(),
        name: "graceful shutdown leaves nothing running",
        detail: format!(
            "{} shutdowns: {} unclean{}, {} rows left running{}",
            graceful.len(),
            unclean.len(),
            if unclean.is_empty() {
                String::new()
            } else {
                format!(" (pids {unclean:?})")
            },
            left.len(),
            ids(&left)
        ),
    });

    // 8. settled soon after the last fault; what it settled from, and the task that
    // settled last (to tell a slow recovery from a long retry chain)
    let mut line = settled(
        "settled within dead_after + a poll + margin",
        settle_ms,
        settle_bound,
    );
    if let Some(f) = faults.last() {
        line.detail += &format!(
            "; after {} (the backlog before it drained in {catch_up_ms} ms), with {} pending and {} running then",
            f.kind.name(),
            backlog_then.0,
            backlog_then.1
        );
    }
    if let Some(t) = tasks.iter().max_by_key(|t| t.updated_at) {
        line.detail += &format!(
            "; the last: {} after {} attempt(s), made {} ms before the fault ended",
            t.event_type,
            t.attempts,
            quiet_from - t.created_at.timestamp_millis()
        );
    }
    lines.push(line);

    // Galera: the cluster whole again, its nodes' memory bounded
    if let Some(health) = &galera {
        lines.push(crate::galera::check(health));
    }

    // the faults, with the kills that hit a handler mid-run
    let mut kinds: Vec<(FaultKind, usize)> = Vec::new();
    for f in &faults {
        match kinds.iter_mut().find(|k| k.0 == f.kind) {
            Some(k) => k.1 += 1,
            None => kinds.push((f.kind, 1)),
        }
    }
    kinds.sort();
    let mid_handler = faults
        .iter()
        .filter(|f| f.kind == FaultKind::Kill)
        .filter(|f| {
            per.values().any(|p| {
                p.runs
                    .iter()
                    .any(|r| Some(r.pid) == f.pid && r.start <= f.start && r.end.is_none())
            })
        })
        .count();
    let title = format!(
        "chaos {} ({} lane, seed {seed}, {} workers): {committed} tasks committed, {rolled_back} rolled back, {unknown} with their commit answer lost (one transaction in ten enqueues five tasks at once; {claimed_in_tx} claimed in their transaction by a worker)\n  faults: {} ({mid_handler} kills during a handler{})",
        backend.name(),
        lane.name,
        lane.workers,
        kinds
            .iter()
            .map(|(k, n)| {
                // the Galera nodes a node fault hit: `n1*` was the writer
                let hit: Vec<String> = faults
                    .iter()
                    .filter(|f| f.kind == *k)
                    .filter_map(|f| f.node)
                    .map(|(n, writer)| format!("n{n}{}", if writer { "*" } else { "" }))
                    .collect();
                if hit.is_empty() {
                    format!("{} {n}", k.name())
                } else {
                    format!("{} {n} ({})", k.name(), hit.join(" "))
                }
            })
            .collect::<Vec<_>>()
            .join(", "),
        if faults.iter().any(|f| f.node.is_some()) {
            "; n1* the writer node"
        } else {
            ""
        }
    );
    Report {
        title,
        lines,
        duplicates,
        duplicated_tasks: (dup_tasks, total_tasks),
        dir,
    }
}
