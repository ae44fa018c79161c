//! The batch claim's statement fragments: the claim of picked rows, the ordered walks of
//! one event type's due rows, and the read of the limited types a claim passes by.

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

/// The event types `limited` (a condition on the queues' row `q`, on $1) names that have
/// a concurrency or rate limit, a due task and, as this statement sees it, room under
/// their limits: the type and `partitioned`. Those are the types a batch claim's
/// `picked` passes by, which the driver claims each in a transaction of its own
/// (`limit_lock`, `claim_limited` or `claim_partitioned`, as `partitioned` says). A type
/// it sees full is left alone: the claims are spared its lock while nothing can be
/// claimed, and a task of it that ends makes its engine poll the type again. (A
/// partitioned type's room is its partitions': it is named whenever it has a due task.)
///
/// The due task is looked for as the walks look, in the order of the claim index, one
/// row per level: a plain `EXISTS` on the type is planned as a scan of the whole table
/// (its due rows look common), which took 10 ms a claim.
///
/// It is a statement of its own, sent with the claim in the same round trip (pipelined
/// on one connection), not a second half of the claim's: the claim's `LIMIT` is a
/// parameter, so PostgreSQL plans the claim anew at every call (a custom plan), and this
/// half's subqueries were most of that planning (0.39–0.61 ms a claim against 0.15–0.22
/// without them). With the type its only parameter this statement keeps a generic plan.
pub(super) fn limited_with_room(t: &str, tq: &str, tr: &str, limited: &str) -> String {
    format!(
        "SELECT q.event_type::text, q.partitioned FROM {tq} q
         WHERE {limited} AND q.paused = 0 AND (q.concurrency > 0 OR q.rate_limit > 0)
           AND (q.partitioned = 1 OR q.concurrency = 0 OR q.concurrency > (SELECT count(*)
                FROM {t} WHERE status = 3 AND event_type = q.event_type))
           AND (q.partitioned = 1 OR q.rate_limit = 0 OR q.rate_limit > (SELECT
                COALESCE(sum(starts), 0) FROM {tr} WHERE event_type = q.event_type
                  AND at > clock_timestamp() - q.rate_window_ms {MS}))
           AND EXISTS (SELECT 1 FROM unnest({LEVELS}) AS p(priority)
                CROSS JOIN LATERAL (SELECT 1 FROM {t} WHERE status = 0
                    AND event_type = q.event_type AND priority = p.priority
                    AND next_run_at <= now()
                    ORDER BY next_run_at, id LIMIT 1) AS d)"
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
            WHERE event_type = $2 AND paused = 0 AND partitioned = 0
              AND (concurrency > 0 OR rate_limit > 0)),
         picked AS MATERIALIZED ({picked}),
         c AS (
            UPDATE {t} AS t SET status = 3, owner = $1, attempts = t.attempts + 1,
                lease = t.lease + 1, updated_at = now()
            WHERE t.id = ANY (ARRAY(SELECT id FROM picked))
            RETURNING {tc}),
         {ledger}
         SELECT * FROM c",
        picked = one_type(t, "", &room),
        ledger = ledger(tr),
    )
}

/// The unlocked hand-over of a type whose only limit is its concurrency (core's
/// `Gate::hands_over_unlocked`), after its marks in the same transaction: $1 owner, $2
/// event type, $3 limit, $4 the marked ids. It claims at most as many tasks as the
/// marked rows of the type this transaction changed (their `xmin` is its id: a mark
/// that did not apply left its row alone), and the room its count of running tasks,
/// which no longer counts them, leaves (`Gate::handover_room`). Nothing when the queue
/// is paused or has another limit by now (the row `g`).
pub(super) fn claim_handover(t: &str, tq: &str, tc: &str) -> String {
    let room = format!(
        "CASE WHEN EXISTS (SELECT 1 FROM g) THEN LEAST($3,
            (SELECT count(*) FROM {t} WHERE id = ANY($4::bigint[]) AND event_type = $2
               AND xmin = (txid_current() % 4294967296)::text::xid),
            GREATEST((SELECT concurrency FROM g)
                - (SELECT count(*) FROM {t} WHERE status = 3 AND event_type = $2), 0))
         ELSE 0 END"
    );
    format!(
        "WITH g AS (
            SELECT concurrency FROM {tq}
            WHERE event_type = $2 AND paused = 0 AND concurrency > 0 AND rate_limit = 0
              AND partitioned = 0),
         picked AS MATERIALIZED ({picked}),
         c AS (
            UPDATE {t} AS t SET status = 3, owner = $1, attempts = t.attempts + 1,
                lease = t.lease + 1, updated_at = now()
            WHERE t.id = ANY (ARRAY(SELECT id FROM picked))
            RETURNING {tc})
         SELECT * FROM c",
        picked = one_type(t, "", &room),
    )
}

/// The ledger's part of a limited claim of rows `c` under gate `g` (a rate-limited
/// type's): one row per partition key it claimed tasks of (core's `starts_per_key`),
/// and the type's rows its window has passed deleted.
fn ledger(tr: &str) -> String {
    format!(
        "r AS (
            INSERT INTO {tr} (event_type, at, starts, partition_key)
            SELECT $2, clock_timestamp(), count(*), c.partition_key FROM c
            WHERE (SELECT rate_limit FROM g) > 0 GROUP BY c.partition_key),
         d AS (
            DELETE FROM {tr} WHERE event_type = $2 AND EXISTS (SELECT 1 FROM c)
              AND (SELECT rate_limit FROM g) > 0
              AND at <= clock_timestamp() - (SELECT rate_window_ms FROM g) {MS})"
    )
}

/// The claim of a partitioned limited type (core's `Gate`, `Partitions`, `KeyWalk` and
/// `round_robin`), after `limit_lock`: $1 owner, $2 event type, $3 limit, $4 the key the
/// last claim of the type listed last when it stopped early (NULL: start at `''`). The
/// keys with a due task are listed as core's `KeyWalk` lists them: from `''` (or after
/// $4, wrapping past the last key to `''` and on up to $4), one dive each on the
/// partition index (a loose index scan: each the first key after the last), each key
/// walked as it is listed: its due tasks in claim order up to its room (from its running
/// tasks and its starts in the window; the key `''` on the claim index), carried as
/// arrays; until every key was listed, or `KEYS_PER_CLAIM` were and the walks hold $3
/// tasks. Of the walked tasks, the first $3 in turns (`rank`, then claim order). Each
/// row claimed carries, after the task's columns, where the next claim starts (NULL when
/// every key was listed). Nothing is claimed when the queue is paused, not partitioned
/// or no longer limited. The walks do not lock: claims of the type take turns on the
/// queue's row, and the update re-checks each row is still pending.
pub(super) fn claim_partitioned(t: &str, tq: &str, tr: &str, tc: &str) -> String {
    // The walk of key `key` (an expression), at most `most` of its due tasks in claim
    // order, as arrays (ids, priorities, due times; NULL when none): the key `''` on the
    // claim index, another on the partition index (whose predicate needs
    // `partition_key <> ''`).
    let walk = |key: &str, most: &str| {
        let one = |which: &str| {
            format!(
                "(SELECT id, priority, next_run_at FROM {t}
                  WHERE status = 0 AND event_type = $2 AND partition_key = {key} {which}
                    AND next_run_at <= now()
                  ORDER BY priority, next_run_at, id LIMIT GREATEST({most}, 0))"
            )
        };
        format!(
            "SELECT array_agg(w.id ORDER BY w.priority, w.next_run_at, w.id) AS ids,
                array_agg(w.priority ORDER BY w.priority, w.next_run_at, w.id) AS pr,
                array_agg(w.next_run_at ORDER BY w.priority, w.next_run_at, w.id) AS at
             FROM ({unkeyed} UNION ALL {keyed}) w",
            unkeyed = one(&format!("AND {key} = ''")),
            keyed = one(&format!("AND {key} <> '' AND partition_key <> ''")),
        )
    };
    // a key's room (`key` an expression): what its running tasks and its starts in the
    // window leave, at most $3
    let room = |key: &str| {
        format!(
            "COALESCE((SELECT room FROM rooms WHERE rooms.key = {key}), (SELECT room FROM free))"
        )
    };
    let keys = backstop_core::driver::KEYS_PER_CLAIM;
    format!(
        "WITH RECURSIVE g AS (
            SELECT concurrency, rate_limit, rate_window_ms FROM {tq}
            WHERE event_type = $2 AND paused = 0 AND partitioned = 1
              AND (concurrency > 0 OR rate_limit > 0)),
         used AS (
            SELECT partition_key AS key, count(*) AS running, 0::bigint AS started
            FROM {t} WHERE status = 3 AND event_type = $2 AND (SELECT concurrency FROM g) > 0
            GROUP BY partition_key
            UNION ALL
            SELECT partition_key, 0, sum(starts)::bigint FROM {tr}
            WHERE event_type = $2 AND (SELECT rate_limit FROM g) > 0
              AND at > clock_timestamp() - (SELECT rate_window_ms FROM g) {MS}
            GROUP BY partition_key),
         rooms AS (
            SELECT u.key, LEAST($3::bigint,
                CASE WHEN g.concurrency > 0 THEN g.concurrency - sum(u.running)::bigint
                ELSE $3::bigint END,
                CASE WHEN g.rate_limit > 0 THEN g.rate_limit - sum(u.started)::bigint
                ELSE $3::bigint END) AS room
            FROM used u CROSS JOIN g GROUP BY u.key, g.concurrency, g.rate_limit),
         free AS (
            SELECT LEAST($3::bigint,
                CASE WHEN concurrency > 0 THEN concurrency::bigint ELSE $3::bigint END,
                CASE WHEN rate_limit > 0 THEN rate_limit::bigint ELSE $3::bigint END) AS room
            FROM g),
         keyed(key, wrapped, listed, found, ids, pr, at) AS (
            SELECT s.key, false, CASE WHEN $4::text IS NULL THEN 1 ELSE 0 END,
                COALESCE(cardinality(a.ids), 0)::bigint, a.ids, a.pr, a.at
            FROM (SELECT COALESCE($4::text, '') AS key FROM g) s
            CROSS JOIN LATERAL ({walk_start}) a
            UNION ALL
            SELECT n.key::text, n.wrapped, keyed.listed + 1,
                keyed.found + COALESCE(cardinality(a.ids), 0), a.ids, a.pr, a.at
            FROM keyed
            CROSS JOIN LATERAL (
                SELECT (SELECT partition_key FROM {t}
                        WHERE status = 0 AND event_type = $2 AND partition_key > keyed.key
                          AND partition_key <> '' AND next_run_at <= now()
                        ORDER BY partition_key LIMIT 1) AS nk) x
            CROSS JOIN LATERAL (
                SELECT CASE
                    WHEN x.nk IS NOT NULL AND NOT (keyed.wrapped AND x.nk > $4::text)
                        THEN x.nk
                    WHEN x.nk IS NULL AND NOT keyed.wrapped AND $4::text IS NOT NULL
                        THEN ''
                    END AS key,
                    keyed.wrapped OR (x.nk IS NULL AND $4::text IS NOT NULL) AS wrapped) n
            CROSS JOIN LATERAL ({walk_next}) a
            WHERE keyed.key IS NOT NULL
              AND NOT (keyed.listed >= {keys} AND keyed.found >= $3::bigint)),
         walked AS (
            SELECT w.id, w.priority, w.next_run_at, w.rank
            FROM keyed CROSS JOIN LATERAL unnest(keyed.ids, keyed.pr, keyed.at)
                WITH ORDINALITY AS w(id, priority, next_run_at, rank)),
         picked AS MATERIALIZED (
            SELECT id FROM walked ORDER BY rank, priority, next_run_at, id LIMIT $3::bigint),
         last AS (SELECT key FROM keyed ORDER BY listed DESC LIMIT 1),
         c AS (
            UPDATE {t} AS t SET status = 3, owner = $1, attempts = t.attempts + 1,
                lease = t.lease + 1, updated_at = now()
            WHERE t.id = ANY (ARRAY(SELECT id FROM picked)) AND t.status = 0
            RETURNING {tc}),
         {ledger}
         SELECT c.*, (SELECT key FROM last)::text FROM c",
        walk_start = walk(
            "s.key",
            &format!(
                "CASE WHEN $4::text IS NULL THEN {} ELSE 0 END",
                room("s.key")
            )
        ),
        walk_next = walk("n.key", &room("n.key")),
        ledger = ledger(tr),
    )
}
