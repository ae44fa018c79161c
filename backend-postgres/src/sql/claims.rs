//! The batch claim's statement fragments: the claim of picked rows, the ordered walks of
//! one event type's due rows, and the marker rows that name the limited types a claim met.

use super::*;

/// The claim of the rows `picked` selects (and locks): $1 is the owner.
///
/// The rows are updated by id through `id = ANY(ARRAY(…))`, never joined to the CTE: on
/// the generic plan of a prepared statement the planner cannot see the LIMIT (a
/// parameter), guesses thousands of picked rows and merge-joins them against the
/// primary key walked from its start: a claim of 50 behind a million older rows took
/// 25 ms instead of 2 (`scripts/bench --only isolation`). An array of ids is always
/// looked up id by id.
pub(super) fn claim(t: &str, tc: &str, picked: &str) -> String {
    format!(
        "WITH picked AS MATERIALIZED ({picked})
         UPDATE {t} AS t SET status = 3, owner = $1, attempts = t.attempts + 1,
            lease = t.lease + 1, updated_at = now()
         WHERE t.id = ANY (ARRAY(SELECT id FROM picked))
         RETURNING {tc}"
    )
}

/// The ids a claim of event type $2 picks, up to $3 per priority level: one ordered walk
/// per level of the partial index `(event_type, priority, next_run_at, id) WHERE status =
/// 0`, locking with SKIP LOCKED, merged in claim order; `filter` (a `WHERE` on the merged
/// rows, or nothing) and at most `limit` of them (an expression).
pub(super) fn one_type(t: &str, filter: &str, limit: &str) -> String {
    format!(
        "SELECT w.id FROM unnest({LEVELS}) AS p(priority)
        CROSS JOIN LATERAL (
            SELECT id, next_run_at FROM {t}
            WHERE status = 0 AND event_type = $2 AND priority = p.priority
              AND next_run_at <= now()
            ORDER BY next_run_at, id
            LIMIT $3
            FOR UPDATE SKIP LOCKED) AS w
        {filter}
        ORDER BY p.priority, w.next_run_at, w.id
        LIMIT {limit}"
    )
}

/// A batch claim of the rows `picked` selects (as [`claim`]), each row followed by a
/// NULL; then one row per event type that `limited` (a condition on the queues' row
/// `q`) names with a due task and, as this statement sees it, room under its limit:
/// NULL task columns and the type. (A type it sees full is left alone: the claims are
/// spared its lock while nothing can be claimed, and a task of it that ends makes its
/// engine poll the type again.) The due task is looked for as the walks look, in the
/// order of the claim index, one row per level: a plain `EXISTS` on the type is planned
/// as a scan of the whole table (its due rows look common), which took 10 ms a claim. Those are the types with
/// a concurrency limit, which `picked` passes by and the driver claims each in a
/// transaction of its own (`limit_lock`, `claim_limited`): the claim learns of them in
/// its one round trip.
pub(super) fn claim_marking(
    t: &str,
    tq: &str,
    tr: &str,
    tc: &str,
    picked: &str,
    limited: &str,
) -> String {
    format!(
        "WITH c AS ({claim})
         SELECT c.*, NULL::text FROM c
         UNION ALL
         SELECT c.*, q.event_type::text FROM {tq} q LEFT JOIN c ON false
         WHERE {limited} AND q.paused = 0 AND (q.concurrency > 0 OR q.rate_limit > 0)
           AND (q.concurrency = 0 OR q.concurrency > (SELECT count(*) FROM {t}
                WHERE status = 3 AND event_type = q.event_type))
           AND (q.rate_limit = 0 OR q.rate_limit > (SELECT COALESCE(sum(starts), 0)
                FROM {tr} WHERE event_type = q.event_type
                  AND at > clock_timestamp() - q.rate_window_ms {MS}))
           AND EXISTS (SELECT 1 FROM unnest({LEVELS}) AS p(priority)
                CROSS JOIN LATERAL (SELECT 1 FROM {t} WHERE status = 0
                    AND event_type = q.event_type AND priority = p.priority
                    AND next_run_at <= now()
                    ORDER BY next_run_at, id LIMIT 1) AS d)",
        claim = claim(t, tc, picked)
    )
}

/// The claim of a limited type (core's `Gate`): $1 owner, $2 event type, $3 limit. The
/// queue's row `g` (none when paused or no longer limited: nothing is claimed) gives
/// the room: the concurrency limit less the running tasks, the rate less the starts of
/// the window in the ledger `tr`; a claim that took tasks of a rate-limited type adds
/// its ledger row and deletes the rows its window has passed (all in one statement:
/// PostgreSQL's data-modifying `WITH` runs each part once, on one snapshot).
pub(super) fn claim_limited(t: &str, tq: &str, tr: &str, tc: &str) -> String {
    let room = format!(
        "CASE WHEN EXISTS (SELECT 1 FROM g) THEN LEAST($3,
            CASE WHEN (SELECT concurrency FROM g) > 0 THEN GREATEST((SELECT concurrency FROM g)
                - (SELECT count(*) FROM {t} WHERE status = 3 AND event_type = $2), 0)
            ELSE $3 END,
            CASE WHEN (SELECT rate_limit FROM g) > 0 THEN GREATEST((SELECT rate_limit FROM g)
                - (SELECT COALESCE(sum(starts), 0) FROM {tr} WHERE event_type = $2
                    AND at > clock_timestamp() - (SELECT rate_window_ms FROM g) {MS}), 0)
            ELSE $3 END)
         ELSE 0 END"
    );
    format!(
        "WITH g AS (
            SELECT concurrency, rate_limit, rate_window_ms FROM {tq}
            WHERE event_type = $2 AND paused = 0 AND (concurrency > 0 OR rate_limit > 0)),
         picked AS MATERIALIZED ({picked}),
         c AS (
            UPDATE {t} AS t SET status = 3, owner = $1, attempts = t.attempts + 1,
                lease = t.lease + 1, updated_at = now()
            WHERE t.id = ANY (ARRAY(SELECT id FROM picked))
            RETURNING {tc}),
         r AS (
            INSERT INTO {tr} (event_type, at, starts)
            SELECT $2, clock_timestamp(), count(*) FROM c
            HAVING count(*) > 0 AND (SELECT rate_limit FROM g) > 0),
         d AS (
            DELETE FROM {tr} WHERE event_type = $2 AND EXISTS (SELECT 1 FROM c)
              AND (SELECT rate_limit FROM g) > 0
              AND at <= clock_timestamp() - (SELECT rate_window_ms FROM g) {MS})
         SELECT * FROM c",
        picked = one_type(t, "", &room),
    )
}
