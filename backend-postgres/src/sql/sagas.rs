//! The saga statements whose text is built rather than written out: the advance of a
//! batch of step reports in one statement.

use super::*;

/// A step's report in its common case, all or none (core's SagaAdvance): the saga
/// rows locked where they run (status 0) at the step's group, then the steps'
/// task rows (each set in id order, as every write takes them), the step's task
/// completed under its lease, then the step row, the saga row and the next
/// steps' tasks, inserted claimed by $14 when it is set. $1 saga, $2 group, $3
/// task id, $4 lease token, $5 position, $6 step, $7 state, $8 output, $9 the
/// saga's status after, $10 its group after, $11 the tasks (core's
/// insert_document), $12 channel, $13 whether to announce them, $14 the owner
/// who claims them (NULL: pending). A row per task inserted (its columns, then
/// how many rows the report wrote: 3 when it applied), or one of NULLs and that
/// count when none was.
pub(super) fn saga_advance(
    t: &str,
    ts: &str,
    tss: &str,
    tq: &str,
    tc: &str,
    on_conflict: &str,
) -> String {
    format!(
        "WITH q AS MATERIALIZED (
            SELECT * FROM json_to_recordset($1::text::json) AS q(i int, s bigint, g int,
                t bigint, l bigint, p int, n text, st smallint, o text, ss smallint, ng int,
                c text)),
         s AS (
            SELECT q.* FROM {ts} y JOIN q ON y.id = q.s
            WHERE y.status = 0 AND y.grp = q.g
            ORDER BY y.id FOR UPDATE OF y),
         k AS (
            SELECT k.id FROM {t} AS k JOIN s ON k.id = s.t
            WHERE k.status + 0 = 3 AND k.lease = s.l
            ORDER BY k.id FOR UPDATE OF k),
         f AS (
            UPDATE {t} AS k SET status = 1, last_error = NULL, updated_at = now()
            FROM s, k AS o WHERE k.id = s.t AND o.id = k.id AND k.status + 0 = 3
                AND k.lease = s.l
            RETURNING s.*),
         r AS (
            INSERT INTO {tss} AS x (saga_id, position, step, grp, state, output, updated_at)
            SELECT f.s, f.p, f.n, f.g, f.st, f.o, now() FROM f
            ON CONFLICT (saga_id, position) DO UPDATE SET state = EXCLUDED.state,
                output = COALESCE(EXCLUDED.output, x.output), updated_at = now()
            RETURNING 1),
         u AS (
            UPDATE {ts} AS y SET status = f.ss, grp = f.ng, version = y.version + 1,
                updated_at = now()
            FROM f WHERE y.id = f.s
            RETURNING 1),
         n AS (
            INSERT INTO {t} AS t (event_type, biz_key, payload, status, attempts,
                max_attempts, retry_strategy, retry_interval_ms, retry_max_interval_ms,
                next_run_at, lease, created_at, updated_at, priority, retry_jitter_pct,
                order_key, order_block, timeout_ms, tags, metadata, traceparent,
                partition_key, owner)
            SELECT r.e, r.k, r.p, CASE WHEN w.c IS NULL THEN 0 ELSE 3 END,
                CASE WHEN w.c IS NULL THEN 0 ELSE 1 END, r.m, r.s, r.i, r.x,
                CASE WHEN r.a IS NULL THEN now() + r.d {MS}
                    ELSE GREATEST('epoch'::timestamptz + r.a {MS}, now()) END,
                CASE WHEN w.c IS NULL THEN 0 ELSE 1 END, now(), clock_timestamp(),
                r.r, r.j, NULL, r.b, r.t, r.g, r.h, r.c, r.q, w.c
            FROM ROWS FROM (json_to_recordset($2::text::json) AS (e text, k text, p text,
                m bigint, s text, i bigint, x bigint, d bigint, a bigint, r smallint,
                j smallint, b smallint, t bigint, g text, h text, c text, q text))
                WITH ORDINALITY AS r(e, k, p, m, s, i, x, d, a, r, j, b, t, g, h, c, q, o)
            JOIN f ON f.i = ($3::int[])[r.o]
            CROSS JOIN LATERAL (SELECT CASE WHEN NOT EXISTS (
                SELECT 1 FROM {tq} WHERE event_type = r.e
                    AND (paused = 1 OR concurrency > 0 OR rate_limit > 0))
                THEN f.c END AS c) AS w
            {on_conflict}
            RETURNING {tc}),
         a AS (
            SELECT (SELECT array_agg(i) FROM f) AS applied,
                (SELECT count(*) FROM r) AS recorded, (SELECT count(*) FROM u) AS moved,
                (SELECT count(*) FROM n CROSS JOIN LATERAL (SELECT pg_notify($4::text, n.event_type)
                    WHERE n.owner IS NULL AND n.event_type = ANY($5::text[])) AS m) AS announced)
         SELECT n.*, a.applied, a.recorded, a.moved, a.announced FROM a LEFT JOIN n ON true"
    )
}
