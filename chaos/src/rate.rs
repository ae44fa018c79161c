//! The rate limit under faults: how many claims of the rate-limited type fall within a
//! window, from the workers' ledgers, against the rate the driver set.
//!
//! A claim's database time lies between when its call was sent and when its answer
//! came back (`C` lines carry both). The store counts starts by database time: two
//! claims of one window's starts are less than the window apart there. So `RATE + 1`
//! claims whose calls were all sent and answered within less than the window (less a
//! margin for the database clock's millisecond rounding) broke the limit, whatever
//! the faults: a delayed answer only widens a claim's interval. A claim whose answer
//! was lost (a kill, a cut connection) is missing from the ledger: the check sees
//! fewer starts than the store counted, never more.

use std::collections::{HashMap, HashSet};

use backstop::TaskId;

use crate::check::Line;
use crate::ledger::Entry;
use crate::worker::{RATE, RATED, RATE_WINDOW};

/// What the database clock's rounding (MySQL's milliseconds) may take off a window.
const MARGIN_MS: i64 = 20;

/// The verdict on the claims of the rate-limited type's tasks (`rated`).
pub(crate) fn check(rated: &[TaskId], ledgers: &HashMap<String, Vec<Entry>>) -> Line {
    let rated: HashSet<TaskId> = rated.iter().copied().collect();
    // (sent, answered) of every claim of a rated task
    let mut claims: Vec<(i64, i64)> = ledgers
        .values()
        .flatten()
        .filter_map(|e| match e {
            Entry::Claim { task, sent, at, .. } if rated.contains(task) => Some((*sent, *at)),
            _ => None,
        })
        .collect();
    claims.sort_unstable();
    let span = RATE_WINDOW.as_millis() as i64 - MARGIN_MS;
    // for each claim as the earliest sent: the claims sent after it and answered within
    // the span of its sending
    let (mut worst, mut over) = (0usize, Vec::new());
    for (i, &(sent, _)) in claims.iter().enumerate() {
        let within = claims[i..]
            .iter()
            .take_while(|(s, _)| *s < sent + span)
            .filter(|(_, at)| *at < sent + span)
            .count();
        worst = worst.max(within);
        if within > RATE as usize {
            over.push(sent);
        }
    }
    Line {
        ok: over.is_empty() && !claims.is_empty(),
        name: "the rate limit holds",
        detail: format!(
            "{} claims of {RATED} (rate {RATE} per {} ms): at most {worst} sent and answered \
             within {span} ms; {} windows over the rate{}",
            claims.len(),
            RATE_WINDOW.as_millis(),
            over.len(),
            crate::check::some("from", over.iter().map(|t| t.to_string()))
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn claim(task: TaskId, sent: i64, at: i64) -> Entry {
        Entry::Claim {
            task,
            lease: 1,
            sent,
            at,
        }
    }

    /// `RATE + 1` claims sent and answered within a window break the limit; the same
    /// claims with one answered a window after the first was sent do not (its database
    /// time may have been that late), nor with one sent a window later.
    #[test]
    fn claims_over_the_rate_within_a_window_fail() {
        let n = RATE as i64 + 1;
        let ids: Vec<TaskId> = (0..n).collect();
        let within: Vec<Entry> = ids
            .iter()
            .map(|&id| claim(id, 1000 + id, 1010 + id))
            .collect();
        let ledgers = HashMap::from([("w1".to_owned(), within.clone())]);
        let line = check(&ids, &ledgers);
        assert!(!line.ok, "{}", line.detail);
        assert!(
            line.detail.contains(&format!("at most {n} sent")),
            "{}",
            line.detail
        );

        let mut late = within.clone();
        late[n as usize - 1] = claim(n - 1, 1000 + n, 1000 + RATE_WINDOW.as_millis() as i64);
        let line = check(&ids, &HashMap::from([("w1".to_owned(), late)]));
        assert!(line.ok, "{}", line.detail);

        let mut apart = within;
        let next = 1000 + RATE_WINDOW.as_millis() as i64;
        apart[n as usize - 1] = claim(n - 1, next, next + 5);
        let line = check(&ids, &HashMap::from([("w1".to_owned(), apart)]));
        assert!(line.ok, "{}", line.detail);
        // claims of other tasks do not count
        let line = check(&ids[..1], &HashMap::from([("w1".to_owned(), Vec::new())]));
        assert!(!line.ok, "no claim at all is no evidence: {}", line.detail);
    }
}
