//! The global concurrency limit under faults: how many handler runs of the limited type
//! overlapped, from the workers' ledgers, against the limit the driver set.
//!
//! A run spans its ledger's start (`S`, in the handler, after the claim committed) to its
//! end (`E`, before its mark is sent), so it lies within the span the database counts
//! the task as running; a run with no end was cut short by a kill (it ends there) or a
//! shutdown (it ends at its worker's last ledger line). The limit may be passed only
//! where a lease expired under a live run: its worker was stopped past `dead_after`, or
//! cut off from the database, and the sweep recycled its task while it still ran. So a
//! moment over the limit is explained when one of the runs then is superseded (its task
//! was claimed again before it ended) or overlaps a fault that held its worker's leases
//! unrefreshed (a stop of that worker, or a fault every worker saw).

use std::collections::HashMap;

use backstop::TaskId;

use crate::check::{Line, PerTask};
use crate::driver::{Fault, FaultKind};
use crate::ledger::Entry;
use crate::worker::{DEAD_AFTER, LIMIT, LIMITED, POLL};

/// The verdict on the runs of the limited type's tasks (`limited`).
pub(crate) fn check(
    limited: &[TaskId],
    per: &HashMap<TaskId, PerTask>,
    ledgers: &HashMap<String, Vec<Entry>>,
    faults: &[Fault],
) -> Line {
    let last_seen = last_seen(ledgers);
    let linger = (DEAD_AFTER + POLL).as_millis() as i64;
    // (start, end, superseded, held up by a fault) of every run of the limited type
    let mut spans = Vec::new();
    for id in limited {
        let Some(p) = per.get(id) else {
            continue;
        };
        for r in &p.runs {
            let end = match &r.end {
                Some((_, at)) => *at,
                None => faults
                    .iter()
                    .filter(|f| f.kind == FaultKind::Kill && f.pid == Some(r.pid))
                    .map(|f| f.start)
                    .filter(|&k| k >= r.start)
                    .min()
                    .or_else(|| last_seen.get(&r.pid).copied())
                    .unwrap_or(r.start),
            };
            let superseded = p.claims.iter().any(|&(l, at)| l > r.lease && at < end);
            let held_up = faults.iter().any(|f| {
                f.kind.hits_engines()
                    && !matches!(f.kind, FaultKind::Kill | FaultKind::Term)
                    && (f.pid.is_none() || f.pid == Some(r.pid))
                    && f.start <= end
                    && f.end + linger >= r.start
            });
            spans.push((r.start, end, superseded, held_up));
        }
    }
    // sweep: at equal times an end comes before a start (the slot is freed first). A
    // run that ends the millisecond it starts (its worker killed as it started, or a
    // handler quicker than the clock) holds no slot at that resolution: it is left out,
    // since its end would come before its own start and leave it counted ever after.
    let mut events: Vec<(i64, i32, usize)> = Vec::new();
    for (i, (start, end, _, _)) in spans.iter().enumerate() {
        if end <= start {
            continue;
        }
        events.push((*start, 1, i));
        events.push((*end, -1, i));
    }
    events.sort_by_key(|&(at, delta, _)| (at, delta));
    let mut active: Vec<usize> = Vec::new();
    let (mut worst, mut over, mut by_claim, mut unexplained) = (0usize, 0u64, 0u64, Vec::new());
    for (at, delta, i) in events {
        if delta < 0 {
            active.retain(|&a| a != i);
            continue;
        }
        active.push(i);
        worst = worst.max(active.len());
        if active.len() > LIMIT as usize {
            over += 1;
            if active.iter().any(|&a| spans[a].2) {
                by_claim += 1;
            } else if !active.iter().any(|&a| spans[a].3) {
                unexplained.push(at);
            }
        }
    }
    Line {
        ok: unexplained.is_empty() && !spans.is_empty(),
        name: "the concurrency limit holds but for expired leases",
        detail: format!(
            "{} runs of {LIMITED} (limit {LIMIT}): worst {worst} at once; {over} starts over \
             the limit ({by_claim} beside a run whose task was claimed again under it, {} \
             beside a run whose worker a fault held up), {} with no expired lease to explain \
             them{}",
            spans.len(),
            over - by_claim - unexplained.len() as u64,
            unexplained.len(),
            crate::check::some("at", unexplained.iter().map(|t| t.to_string()))
        ),
    }
}

/// Each worker's last ledger time, by pid.
fn last_seen(ledgers: &HashMap<String, Vec<Entry>>) -> HashMap<u32, i64> {
    let mut last = HashMap::new();
    for entries in ledgers.values() {
        let Some(pid) = entries.iter().find_map(|e| match e {
            Entry::Owner { pid, .. } => Some(*pid),
            _ => None,
        }) else {
            continue;
        };
        let at = entries
            .iter()
            .filter_map(|e| match e {
                Entry::Claim { at, .. }
                | Entry::Start { at, .. }
                | Entry::End { at, .. }
                | Entry::Mark { at, .. }
                | Entry::Stopped { at } => Some(*at),
                _ => None,
            })
            .max();
        if let Some(at) = at {
            last.insert(pid, at);
        }
    }
    last
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::check::Run;

    /// `LIMIT + 1` runs at once: over the limit, unexplained with no fault, explained
    /// when a stop of one of their workers overlapped it; a run cut by a kill ends there.
    #[test]
    fn runs_over_the_limit_fail_unless_a_lease_expired() {
        let n = LIMIT as i64 + 1;
        let mut per = HashMap::new();
        for id in 0..n {
            let mut p = PerTask::default();
            p.claims.push((1, 999));
            p.runs.push(Run {
                task: id,
                lease: 1,
                pid: 100 + id as u32,
                start: 1000 + id,
                end: Some(("ok".into(), 2000)),
            });
            per.insert(id, p);
        }
        let ids: Vec<TaskId> = (0..n).collect();
        let ledgers = HashMap::new();
        let line = check(&ids, &per, &ledgers, &[]);
        assert!(!line.ok, "{}", line.detail);
        assert!(line.detail.contains("worst 7 at once"), "{}", line.detail);
        let stop = Fault {
            kind: FaultKind::Stop,
            pid: Some(100),
            node: None,
            start: 500,
            end: 900,
        };
        let line = check(&ids, &per, &ledgers, &[stop]);
        assert!(line.ok, "{}", line.detail);
        // the last run's worker killed before the others started: not over the limit
        let last = per.get_mut(&(n - 1)).unwrap();
        last.runs[0].end = None;
        last.runs[0].start = 900;
        let kill = Fault {
            kind: FaultKind::Kill,
            pid: Some(100 + n as u32 - 1),
            node: None,
            start: 950,
            end: 950,
        };
        let line = check(&ids, &per, &ledgers, &[kill]);
        assert!(line.ok, "{}", line.detail);
        assert!(line.detail.contains("worst 6 at once"), "{}", line.detail);
    }

    /// Runs that end the millisecond they start — a worker killed as its handlers
    /// started, a handler quicker than the clock — hold no slot: beside `LIMIT` runs
    /// later, not over the limit (the sweep once kept them counted ever after, and
    /// failed a chaos run on SQLite with 8 at once).
    #[test]
    fn runs_ending_as_they_start_hold_no_slot() {
        let mut per = HashMap::new();
        // (pid, start, end) of each task's one run, claimed at `claimed`
        let mut run = |id: TaskId, claimed: i64, pid: u32, start: i64, end: Option<i64>| {
            let mut p = PerTask::default();
            p.claims.push((1, claimed));
            p.runs.push(Run {
                task: id,
                lease: 1,
                pid,
                start,
                end: end.map(|at| ("ok".to_string(), at)),
            });
            per.insert(id, p);
        };
        run(0, 999, 100, 1000, None);
        run(1, 999, 100, 1000, None);
        run(2, 999, 101, 1001, Some(1001));
        for id in 3..3 + LIMIT as i64 {
            run(id, 2000, 101, 3000 + id, Some(4000));
        }
        let ids: Vec<TaskId> = (0..3 + LIMIT as i64).collect();
        let kill = Fault {
            kind: FaultKind::Kill,
            pid: Some(100),
            node: None,
            start: 1000,
            end: 1000,
        };
        let line = check(&ids, &per, &HashMap::new(), &[kill]);
        assert!(line.ok, "{}", line.detail);
        assert!(line.detail.contains("worst 6 at once"), "{}", line.detail);
    }
}
