//! Helpers for backends that apply a batch as one set-based statement.

use std::collections::HashSet;

use crate::model::Mark;

/// Split a batch of marks into rounds in which each task appears at most once, keeping
/// the order: round 1 holds the first mark of every task, round 2 the second, and so on.
///
/// A set-based `UPDATE … FROM (the marks)` applies at most one mark per row, and which one
/// is unspecified. The contract says marks apply in order, so a backend runs one statement
/// per round, in order, in one transaction. Almost every batch is a single round.
///
/// ```
/// use backstop_core::{batch::mark_rounds, Lease, Mark};
/// let l = |id| Lease { task_id: id, token: 1 };
/// let marks = [Mark::success(l(1)), Mark::success(l(2)), Mark::release(l(1))];
/// assert_eq!(mark_rounds(&marks), vec![vec![0, 1], vec![2]]);
/// ```
pub fn mark_rounds(marks: &[Mark]) -> Vec<Vec<usize>> {
    let mut rounds: Vec<(HashSet<i64>, Vec<usize>)> = Vec::new();
    for (i, m) in marks.iter().enumerate() {
        let id = m.lease.task_id;
        match rounds.iter_mut().find(|(ids, _)| !ids.contains(&id)) {
            Some((ids, idx)) => {
                ids.insert(id);
                idx.push(i);
            }
            None => rounds.push((HashSet::from([id]), vec![i])),
        }
    }
    rounds.into_iter().map(|(_, idx)| idx).collect()
}

/// Put claimed tasks in claim order, oldest first: `(next_run_at, id)`. `RETURNING` and
/// `SELECT … WHERE id IN (…)` give rows in no particular order.
pub fn oldest_first(tasks: &mut [crate::Task]) {
    tasks.sort_by_key(|t| (t.next_run_at, t.id));
}
