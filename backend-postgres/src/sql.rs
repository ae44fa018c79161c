//! The SQL of the PostgreSQL backend, built once per store for its (validated) schema and
//! table. Every time is the database's `now()`; delays are bound as milliseconds.
//!
//! **A change of running tasks by id says `status + 0 = 3`**, not `status = 3`: the
//! plain condition matches the running index (`WHERE status = 3`), whose estimate is a
//! row or two (statistics taken while few tasks ran), so the planner walked every
//! running task and compared each with every id of the batch: a mark of 50 among 1,000
//! running tasks took 56 ms instead of 0.7 ms, and, marks falling behind, more tasks
//! stayed running, which slowed the next mark further. The expression keeps the index
//! out of reach; the batch's ids drive the join through the primary key.

use backstop_core::driver::schema::{self, version_table, MigrationFile, SchemaSql};
use backstop_core::driver::{
    AUDIT_COLUMNS, BARRIER_COLUMNS, COLUMNS, QUEUE_AUDIT_COLUMNS, SAGA_COLUMNS, SAGA_STEP_COLUMNS,
};
use backstop_core::limits::MAX_BATCH;

/// `COLUMNS` qualified by the table alias `t`.
fn t_columns() -> String {
    COLUMNS
        .split(", ")
        .map(|c| format!("t.{c}"))
        .collect::<Vec<_>>()
        .join(", ")
}

const MS: &str = "* interval '1 millisecond'";

/// The status a reset task takes: pending, or waiting (in line again) with an order key.
const RESET_STATUS: &str = "CASE WHEN order_key IS NULL THEN 0 ELSE 5 END";

/// The priority levels, in claim order (see `backstop_core::Priority`).
const LEVELS: &str = "'{0,1,2,3,4}'::smallint[]";

mod claims;
mod rows;
mod sagas;
use claims::{
    claim, claim_handover, claim_limited, claim_partitioned, limited_with_room, one_type,
};
use sagas::saga_advance;

/// The notification channel of `schema.table`: the qualified name, or when that is
/// longer than PostgreSQL's 63-byte identifiers, a prefix of it and a stable hash.
fn channel(schema: &str, table: &str) -> String {
    let full = format!("backstop.{schema}.{table}");
    if full.len() <= 63 {
        return full;
    }
    // FNV-1a: stable across builds and platforms (std's hasher is not).
    let hash = full.bytes().fold(0xcbf2_9ce4_8422_2325_u64, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    });
    // identifiers are ASCII (checked), so any byte index is a char boundary
    format!("{}#{hash:016x}", &full[..46])
}

/// How a list statement spells what differs (see `list_sql`).
pub(crate) const LIST: backstop_core::driver::ListDialect = backstop_core::driver::ListDialect {
    placeholder: |n| format!("${n}"),
    contains: |p| format!("strpos(last_error, {p}) > 0"),
    has_tag: |p| format!("strpos(tags, ',' || {p}::text || ',') > 0"),
    // a JSON string equal to the value: a number or an object never is
    metadata_is: |k, p| format!("(metadata::jsonb -> '{k}') = to_jsonb({p}::text)"),
    starts_with: |p| format!("starts_with(biz_key, {p}::text)"),
    older_than: |p| format!("updated_at < now() - {p}::bigint {MS}"),
    // pending tasks are the newest rows: a walk of the primary key from the oldest (the
    // plan PostgreSQL picks for `ORDER BY id LIMIT n` when the status is rare) reads every
    // retained row first
    backlog_order: "id + 0",
    age: |d| backstop_core::driver::Value::BigInt(Some(backstop_core::driver::millis(d))),
};

pub(crate) struct Sql {
    pub lock_key: String,
    /// The version table's statements and the migrations.
    pub schema: SchemaSql,
    pub insert: String,
    /// A step's report in its common case, in one statement (core's `SagaAdvance`).
    pub saga_advance: String,
    /// `insert` that also announces the new task on `channel` (delivered at commit;
    /// nothing on a duplicate), by id and event type: the text of
    /// `Wake::task_message`, so a listening engine that has drained the type claims it
    /// by id. $20 is the channel.
    pub insert_notify: String,
    /// $1 the rows (core's `insert_document`): the batch enqueue's multi-row insert.
    pub insert_rows: String,
    /// As `insert_rows`, announcing each row's event type on the channel ($2).
    pub insert_rows_notify: String,
    /// $1 the rows of plain tasks (core's `plain_document`), as `insert_rows`, and its
    /// form announcing as `insert_rows_notify`; `None` when a plain setting has no
    /// literal (see `plain_select`).
    pub insert_plain_rows: Option<(String, String)>,
    /// $1 event_type $2 biz_key: the task holding the key, locked: id, status, age ms.
    pub existing: String,
    /// $1 id: free the key a finished task holds.
    pub release_key: String,
    /// $1 payload $2 moves $3 delay ms $4 run at $5 id: replace a pending task's payload
    /// (and due time).
    pub replace_payload: String,
    /// $1 id $2 lease: a running task's success, on the handler's transaction.
    pub complete: String,
    /// $1 owner $2 id: the claim of a task never claimed before, on the caller's
    /// transaction (`claim_in`).
    pub claim_in: String,
    /// The participant barrier's insert of one row, skipped when it exists
    /// (`EnqueueStep::BarrierInsert`).
    pub barrier_insert: String,
    /// Whether a barrier row's reason is its own operation (`EnqueueStep::BarrierRead`).
    pub barrier_read: String,
    /// The barrier records older than an age, oldest first, up to a limit.
    pub purge_barrier: String,
    /// One global transaction's barrier records, oldest first.
    pub barrier_records: String,
    /// A saga's state row, skipped when its name and key exist (`EnqueueStep::SagaInsert`).
    pub saga_insert: String,
    /// A saga's id and status code by name and key (`EnqueueStep::SagaRead`).
    pub saga_read: String,
    /// A saga's state row by name and key (`SAGA_COLUMNS`).
    pub saga_get: String,
    /// The fenced failure of a task on a transaction (`EnqueueStep::Fail`).
    pub fail_tx: String,
    /// The locking read of a saga's status and group (`EnqueueStep::SagaLock`).
    pub saga_lock: String,
    /// The step rows of a saga's group (`EnqueueStep::StepRows`).
    pub step_rows: String,
    /// The upsert of a step row (`EnqueueStep::StepRecord`).
    pub step_record: String,
    /// A saga's row after a step's report (`EnqueueStep::SagaSet`).
    pub saga_set: String,
    /// A saga's step rows by position (`SAGA_STEP_COLUMNS`).
    pub saga_steps: String,
    /// The failed tasks of a saga's failed steps reset (`EnqueueStep::ResetFailed`).
    pub reset_failed: String,
    /// An entry of the saga operators' log (`EnqueueStep::SagaLog`).
    pub saga_log_insert: String,
    /// A saga's operators' log, oldest first.
    pub saga_log: String,
    /// A saga's state row by id (`SAGA_COLUMNS`).
    pub saga_by_id: String,
    /// The sagas of a filter, by id (`SAGA_COLUMNS`).
    pub sagas: String,
    /// The unfinished sagas per name and status: count, ms since the oldest change.
    pub saga_backlog: String,
    /// $1 event types: upsert into the handlers table.
    pub types_register: String,
    /// The handlers table.
    pub types_list: String,
    /// $1 event type $2 paused $3 action $4 operator $5 reason: the queue's setting
    /// upserted where it differs, and its log entry when it changed; the row
    /// (`QUEUE_COLUMNS`) when it did.
    pub queue_set: String,
    /// $1 event type: the queue's row.
    pub queue_get: String,
    /// Every queue's row.
    pub queues: String,
    /// $1 event type: its log, oldest first.
    pub queue_log: String,
    /// $1 order key: insert it if missing and lock it; a row when locked.
    pub key_lock: String,
    /// $1 order key: a task in the way (pending, running, parked and blocking).
    pub key_blocker: String,
    /// $1 order key: the first waiting task, locked.
    pub key_next: String,
    /// $1 id: waiting → pending.
    pub key_promote: String,
    /// $1 order key.
    pub key_drop: String,
    /// $1 order keys (sorted): insert the missing ones (see `KeysRelease`).
    pub keys_insert: String,
    /// $1 order keys: lock their rows in key order; the keys found.
    pub keys_lock: String,
    /// $1 order keys: the keys of the tasks in the way (locked for share).
    pub keys_blockers: String,
    /// $1 order keys: (key, first waiting task) of each, the task locked.
    pub keys_next: String,
    /// $1 ids: waiting → pending.
    pub keys_promote: String,
    /// $1 order keys.
    pub keys_drop: String,
    /// $1 after (text, '' for none) $2 limit: keys in order.
    pub keys_page: String,
    /// The `LISTEN`/`NOTIFY` channel of this table.
    pub channel: String,
    /// `LISTEN` on `channel`.
    pub listen: String,
    pub claim_by_id: String,
    /// The batch claims: the claimed rows of the types without limits.
    pub claim_one_type: String,
    pub claim_many_types: String,
    /// Sent with each batch claim: its limited types with a due task and room (see
    /// `limited_with_room`).
    pub limited_one_type: String,
    pub limited_many_types: String,
    pub limit_lock: String,
    pub gate_read: String,
    pub claim_handover: String,
    pub claim_limited: String,
    /// As `claim_limited`, of a partitioned type.
    pub claim_partitioned: String,
    pub recycle_dead: String,
    pub heartbeat: String,
    /// $1 output $2 id $3 lease: a running task's output, fenced.
    pub set_output: String,
    pub mark: String,
    pub manual_reset: String,
    /// $1 id $2 delay ms $3 due at $4 payload $5 action $6 operator $7 reason: a
    /// pending or waiting task's due time and payload, and its audit entry.
    pub edit: String,
    /// $1 id $2 operator $3 reason.
    pub cancel: String,
    /// $1 id $2 operator $3 reason.
    pub delete: String,
    /// $1 id $2 operator $3 reason $4 $5 expected status codes.
    pub retry: String,
    /// $1 task id.
    pub audit_log: String,
    pub status_of: String,
    pub get: String,
    /// `SELECT … FROM table` of a list; see `LIST`.
    /// The task table, quoted (and qualified) as every statement here writes it.
    pub tasks: String,
    pub list_select: String,
    pub stats_counts: String,
    /// `stats_counts` without the succeeded rows, through the status indexes.
    pub backlog_counts: String,
    pub stats_oldest_due: String,
    /// $1 window ms $2 bucket ms $3 cap per status.
    pub throughput: String,
    /// $1 older than (ms) $2 limit $3 status.
    pub purge_finished: String,
    /// $1 ids $2 status.
    pub delete_finished: String,
    /// $1 older than (ms) $2 limit: the tasks' audit log, then the queues' log.
    pub purge_audit: [String; 2],
    /// $1 older than (ms) $2 limit.
    pub purge_event_types: String,
    /// $1 consumer $2 message_id: one row inserted, or none for a duplicate.
    pub inbox_insert: String,
    /// $1 older than (ms) $2 limit.
    pub inbox_purge: String,
}

impl Sql {
    /// `schema` and `table` must have passed `limits::check_identifier`.
    pub fn new(schema: &str, table: &str) -> Sql {
        let t = format!("\"{schema}\".\"{table}\"");
        let ti = format!("\"{schema}\".\"{table}_inbox\"");
        let ta = format!("\"{schema}\".\"{table}_audit\"");
        let tv = format!("\"{schema}\".\"{}\"", version_table(table));
        let tk = format!("\"{schema}\".\"{table}_keys\"");
        let th = format!("\"{schema}\".\"{table}_handlers\"");
        let tb = format!("\"{schema}\".\"{table}_barrier\"");
        let ts = format!("\"{schema}\".\"{table}_saga\"");
        let tss = format!("\"{schema}\".\"{table}_saga_step\"");
        let tsa = format!("\"{schema}\".\"{table}_saga_audit\"");
        let tq = format!("\"{schema}\".\"{table}_queues\"");
        let tqa = format!("\"{schema}\".\"{table}_queue_audit\"");
        let tr = format!("\"{schema}\".\"{table}_rate\"");
        // a claim by id passes a task of a paused or limited type by (`set_queue`)
        let running = format!(
            "NOT EXISTS (SELECT 1 FROM {tq} q WHERE q.event_type = {t}.event_type
                AND (q.paused = 1 OR q.concurrency > 0 OR q.rate_limit > 0))"
        );
        let qcols = "event_type::text, paused::bigint, updated_at, concurrency::bigint,
            rate_limit::bigint, rate_window_ms::bigint, partitioned::bigint";
        let tc = t_columns();
        // core's insert_params: $1 event_type $2 biz_key $3 payload $4 max_attempts
        // $5 strategy $6 interval_ms $7 max_interval_ms $8 delay_ms $9 run_at (NULL: use
        // the delay; a time already past: now) $10 priority $11 jitter % $12 status
        // $13 order_key $14 order_block $15 timeout_ms $16 tags $17 metadata $18 traceparent
        // $19 partition key
        let insert_into = format!(
            "INSERT INTO {t} (event_type, biz_key, payload, status, attempts, max_attempts,
                retry_strategy, retry_interval_ms, retry_max_interval_ms, next_run_at,
                lease, created_at, updated_at, priority, retry_jitter_pct, order_key,
                order_block, timeout_ms, tags, metadata, traceparent, partition_key)"
        );
        let on_conflict = "ON CONFLICT (biz_key, event_type, dedup_slot) DO NOTHING";
        let insert = format!(
            "{insert_into}
             VALUES ($1, $2, $3, $12, 0, $4, $5, $6, $7,
                CASE WHEN $9::timestamptz IS NULL THEN now() + $8::bigint {MS}
                    ELSE GREATEST($9::timestamptz, now()) END,
                0, now(), now(), $10, $11, $13, $14, $15, $16, $17, $18, $19)
             {on_conflict} RETURNING id"
        );
        let saga_advance = saga_advance(&t, &ts, &tss, &tq, &tc, on_conflict);
        let inserts = rows::row_inserts(&t, &insert_into, on_conflict);
        let channel = channel(schema, table);
        Sql {
            lock_key: format!("backstop:{schema}.{table}"),
            schema: SchemaSql {
                setup: format!(
                    "CREATE SCHEMA IF NOT EXISTS \"{schema}\";
                     CREATE TABLE IF NOT EXISTS {tv} (
                        version    INTEGER      PRIMARY KEY,
                        name       VARCHAR(200) NOT NULL,
                        applied_at TIMESTAMPTZ  NOT NULL
                     )"
                ),
                read: format!("SELECT version::bigint FROM {tv}"),
                record: format!(
                    "INSERT INTO {tv} (version, name, applied_at) VALUES ($1, $2, now())"
                ),
                script_record: format!(
                    "INSERT INTO {tv} (version, name, applied_at) VALUES ({{version}}, '{{name}}', now())"
                ),
                files: MIGRATIONS,
                vars: vec![
                    ("tasks", t.clone()),
                    ("inbox", ti.clone()),
                    ("audit", ta.clone()),
                    ("keys", tk.clone()),
                    ("handlers", th.clone()),
                    ("barrier", tb.clone()),
                    ("saga", ts.clone()),
                    ("saga_step", tss.clone()),
                    ("saga_audit", tsa.clone()),
                    ("queues", tq.clone()),
                    ("queue_audit", tqa.clone()),
                    ("rate", tr.clone()),
                    ("table", table.to_owned()),
                    ("schema", schema.to_owned()),
                ],
            },
            edit: format!(
                "WITH e AS (
                    UPDATE {t} SET
                        next_run_at = CASE WHEN $2::bigint IS NOT NULL THEN now() + $2::bigint {MS}
                            WHEN $3::timestamptz IS NOT NULL THEN GREATEST($3::timestamptz, now())
                            ELSE next_run_at END,
                        payload = COALESCE($4::text, payload), updated_at = now()
                    WHERE id = $1 AND status IN (0, 5)
                    RETURNING {COLUMNS}),
                 a AS (
                    INSERT INTO {ta} (task_id, action, operator, reason, at)
                    SELECT id, $5, $6, $7, now() FROM e)
                 SELECT {COLUMNS} FROM e"
            ),
            // the change and its audit entry in one statement
            cancel: format!(
                "WITH c AS (
                    UPDATE {t} SET status = 4, lease = lease + 1, updated_at = now()
                    WHERE id = $1 AND status IN (0, 3, 5)
                    RETURNING {COLUMNS}),
                 a AS (
                    INSERT INTO {ta} (task_id, action, operator, reason, at)
                    SELECT id, 'cancel', $2, $3, now() FROM c)
                 SELECT {COLUMNS} FROM c"
            ),
            delete: format!(
                "WITH d AS (
                    DELETE FROM {t} WHERE id = $1 AND status <> 3
                    RETURNING {COLUMNS}),
                 a AS (
                    INSERT INTO {ta} (task_id, action, operator, reason, at)
                    SELECT id, 'delete', $2, $3, now() FROM d)
                 SELECT {COLUMNS} FROM d"
            ),
            audit_log: format!(
                "SELECT {AUDIT_COLUMNS} FROM {ta} WHERE task_id = $1 ORDER BY id"
            ),
            retry: format!(
                "WITH r AS (
                    UPDATE {t} SET status = {RESET_STATUS}, attempts = 0, snoozes = 0, next_run_at = now(),
                        owner = NULL, updated_at = now()
                    WHERE id = $1 AND status IN ($4, $5)
                    RETURNING {COLUMNS}),
                 a AS (
                    INSERT INTO {ta} (task_id, action, operator, reason, at)
                    SELECT id, 'reset', $2, $3, now() FROM r)
                 SELECT {COLUMNS} FROM r"
            ),
            inbox_insert: format!(
                "INSERT INTO {ti} (consumer, message_id, processed_at) VALUES ($1, $2, now())
                 ON CONFLICT (consumer, message_id) DO NOTHING"
            ),
            inbox_purge: format!(
                "WITH old AS MATERIALIZED (
                    SELECT consumer, message_id FROM {ti}
                    WHERE processed_at < now() - $1::bigint {MS}
                    ORDER BY processed_at
                    LIMIT $2
                    FOR UPDATE SKIP LOCKED)
                 DELETE FROM {ti} AS i USING old
                 WHERE i.consumer = old.consumer AND i.message_id = old.message_id"
            ),
            insert: insert.clone(),
            saga_advance,
            insert_rows: inserts.rows,
            insert_rows_notify: inserts.rows_notify,
            insert_plain_rows: inserts.plain,
            insert_notify: format!(
                "WITH ins AS ({insert})
                 SELECT ins.id FROM ins CROSS JOIN LATERAL
                    (SELECT pg_notify($20::text, 'task ' || ins.id || ' ' || $1::text)) AS n"
            ),
            listen: format!("LISTEN \"{channel}\""),
            channel,
            existing: format!(
                "SELECT id, status::bigint,
                    (extract(epoch FROM now() - created_at) * 1000)::bigint
                 FROM {t} WHERE event_type = $1 AND biz_key = $2 AND dedup_slot = 0
                 FOR UPDATE"
            ),
            types_register: format!(
                "INSERT INTO {th} (event_type, first_seen_at, last_seen_at)
                 SELECT et, now(), now() FROM unnest($1::text[]) AS t(et)
                 ON CONFLICT (event_type) DO UPDATE SET last_seen_at = now()"
            ),
            types_list: format!(
                "SELECT event_type::text, first_seen_at, last_seen_at FROM {th}"
            ),
            // a row inserted (`xmax = 0`) is logged unless it says only what no row
            // says (the resume of a type never paused)
            queue_set: format!(
                "WITH up AS (
                    INSERT INTO {tq} AS q (event_type, paused, concurrency, rate_limit,
                        rate_window_ms, updated_at, partitioned)
                    VALUES ($1, COALESCE($2::smallint, 0), COALESCE($6::int, 0),
                        COALESCE($7::int, 0), COALESCE($8::bigint, 0), now(),
                        COALESCE($9::smallint, 0))
                    ON CONFLICT (event_type) DO UPDATE SET
                        paused = COALESCE($2::smallint, q.paused),
                        concurrency = COALESCE($6::int, q.concurrency),
                        rate_limit = COALESCE($7::int, q.rate_limit),
                        rate_window_ms = COALESCE($8::bigint, q.rate_window_ms), updated_at = now(),
                        partitioned = COALESCE($9::smallint, q.partitioned)
                    WHERE q.paused <> COALESCE($2::smallint, q.paused)
                        OR q.concurrency <> COALESCE($6::int, q.concurrency)
                        OR q.rate_limit <> COALESCE($7::int, q.rate_limit)
                        OR q.rate_window_ms <> COALESCE($8::bigint, q.rate_window_ms)
                        OR q.partitioned <> COALESCE($9::smallint, q.partitioned)
                    RETURNING {qcols}, xmax = 0 AS fresh),
                 a AS (
                    INSERT INTO {tqa} (event_type, action, operator, reason, at)
                    SELECT $1, $3, $4, $5, now() FROM up
                    WHERE NOT up.fresh OR COALESCE($2::smallint, 0) <> 0
                        OR COALESCE($6::int, 0) <> 0 OR COALESCE($7::int, 0) <> 0
                        OR COALESCE($9::smallint, 0) <> 0)
                 SELECT {qcols} FROM up"
            ),
            queue_get: format!("SELECT {qcols} FROM {tq} WHERE event_type = $1"),
            queues: format!("SELECT {qcols} FROM {tq}"),
            queue_log: format!(
                "SELECT {QUEUE_AUDIT_COLUMNS} FROM {tqa} WHERE event_type = $1 ORDER BY id"
            ),
            complete: format!(
                "UPDATE {t} SET status = 1, last_error = NULL, updated_at = now()
                 WHERE id = $1 AND status + 0 = 3 AND lease = $2 RETURNING id"
            ),
            // The lease's clock starts at this statement (`clock_timestamp()`), not at
            // the transaction's start (`now()`, which the insert's due time is, so the
            // task is due).
            barrier_insert: format!(
                "INSERT INTO {tb} (gid, branch_id, op, reason, created_at)
                 VALUES ($1, $2, $3, $4, now())
                 ON CONFLICT (gid, branch_id, op) DO NOTHING RETURNING 1::bigint"
            ),
            barrier_read: format!(
                "SELECT (CASE WHEN reason = op THEN 1 ELSE 0 END)::bigint FROM {tb}
                 WHERE gid = $1 AND branch_id = $2 AND op = $3"
            ),
            claim_in: format!(
                "UPDATE {t} SET status = 3, owner = $1, attempts = attempts + 1, lease = 1,
                    updated_at = clock_timestamp()
                 WHERE id = $2 AND status = 0 AND lease = 0 AND next_run_at <= now()
                   AND {running}
                 RETURNING id"
            ),
            key_lock: format!(
                "WITH ins AS (
                    INSERT INTO {tk} (order_key) VALUES ($1) ON CONFLICT DO NOTHING
                    RETURNING order_key),
                 sel AS (SELECT order_key FROM {tk} WHERE order_key = $1 FOR UPDATE)
                 SELECT 1::bigint FROM ins UNION ALL SELECT 1::bigint FROM sel LIMIT 1"
            ),
            key_blocker: format!(
                "SELECT id FROM {t}
                 WHERE order_key = $1 AND (status IN (0, 3) OR (status = 2 AND order_block = 1))
                 LIMIT 1 FOR SHARE"
            ),
            key_next: format!(
                "SELECT id FROM {t} WHERE order_key = $1 AND status = 5
                 ORDER BY id LIMIT 1 FOR UPDATE"
            ),
            key_promote: format!(
                "UPDATE {t} SET status = 0, next_run_at = GREATEST(next_run_at, now()),
                    updated_at = now()
                 WHERE id = $1 AND status = 5 RETURNING id"
            ),
            key_drop: format!("DELETE FROM {tk} WHERE order_key = $1"),
            keys_insert: format!(
                "INSERT INTO {tk} (order_key)
                 SELECT k FROM unnest($1::text[]) AS u(k) ORDER BY k
                 ON CONFLICT DO NOTHING"
            ),
            keys_lock: format!(
                "SELECT order_key::text FROM {tk} WHERE order_key = ANY($1::text[])
                 ORDER BY order_key FOR UPDATE"
            ),
            keys_blockers: format!(
                "SELECT order_key::text FROM {t}
                 WHERE order_key = ANY($1::text[])
                   AND (status IN (0, 3) OR (status = 2 AND order_block = 1))
                 FOR SHARE"
            ),
            keys_next: format!(
                "SELECT u.k, w.id FROM unnest($1::text[]) AS u(k)
                 CROSS JOIN LATERAL (
                    SELECT id FROM {t} WHERE order_key = u.k AND status = 5
                    ORDER BY id LIMIT 1 FOR UPDATE) AS w"
            ),
            keys_promote: format!(
                "UPDATE {t} SET status = 0, next_run_at = GREATEST(next_run_at, now()),
                    updated_at = now()
                 WHERE id = ANY($1::bigint[]) AND status = 5 RETURNING id"
            ),
            keys_drop: format!("DELETE FROM {tk} WHERE order_key = ANY($1::text[])"),
            keys_page: format!(
                "SELECT order_key::text FROM {tk} WHERE order_key > $1 ORDER BY order_key LIMIT $2"
            ),
            release_key: format!(
                "UPDATE {t} SET dedup_slot = id WHERE id = $1 AND dedup_slot = 0 RETURNING id"
            ),
            replace_payload: format!(
                "UPDATE {t} SET payload = $1,
                    next_run_at = CASE WHEN $2::smallint = 1
                        THEN greatest(now() + $3::bigint {MS}, COALESCE($4::timestamptz, now()))
                        ELSE next_run_at END,
                    updated_at = now()
                 WHERE id = $5 AND status = 0
                 RETURNING id"
            ),
            claim_by_id: format!(
                "UPDATE {t} SET status = 3, owner = $2, attempts = attempts + 1,
                    lease = lease + 1, updated_at = now()
                 WHERE id = $1 AND status = 0 AND next_run_at <= now() AND {running}
                 RETURNING {COLUMNS}"
            ),
            // $1 owner $2 event type $3 limit. The locking CTE is MATERIALIZED: its LIMIT
            // is evaluated once, so the claim never takes more than $3 rows; SKIP LOCKED
            // lets claimers pass each other. One ordered walk per priority level of the
            // partial index `(event_type, priority, next_run_at, id) WHERE status = 0`,
            // each stopping at the limit, merged: a claim reads at most levels × $3 rows
            // whatever the backlog of this or other types. (A level's walk locks at most
            // $3 rows, until the statement ends.)
            claim_one_type: claim(
                &t,
                &tc,
                &one_type(
                    &t,
                    &format!(
                        "WHERE NOT EXISTS (SELECT 1 FROM {tq} WHERE event_type = $2
                            AND (paused = 1 OR concurrency > 0 OR rate_limit > 0))"
                    ),
                    "$3",
                ),
            ),
            // $1 event type
            limited_one_type: limited_with_room(&t, &tq, &tr, "q.event_type = $1"),
            // $1 owner $2 event types $3 limit: one ordered walk per type and level (as
            // above), the walks merged, the first $3 by (priority, next_run_at, id)
            // claimed. (`event_type = ANY($2)` cannot walk the index in order: it sorts or
            // skips through every due row of the types.)
            claim_many_types: claim(
                &t,
                &tc,
                &format!(
                    "SELECT w.id FROM unnest($2::text[]) AS et(event_type)
                    CROSS JOIN unnest({LEVELS}) AS p(priority)
                    CROSS JOIN LATERAL (
                        SELECT id, next_run_at FROM {t}
                        WHERE status = 0 AND event_type = et.event_type
                          AND priority = p.priority AND next_run_at <= now()
                        ORDER BY next_run_at, id
                        LIMIT $3
                        FOR UPDATE SKIP LOCKED) AS w
                    WHERE NOT EXISTS (
                        SELECT 1 FROM {tq} q WHERE q.event_type = et.event_type
                            AND (q.paused = 1 OR q.concurrency > 0 OR q.rate_limit > 0))
                    ORDER BY p.priority, w.next_run_at, w.id
                    LIMIT $3"
                ),
            ),
            // $1 event types
            limited_many_types: limited_with_room(&t, &tq, &tr, "q.event_type = ANY($1::text[])"),
            // $1 event type: a limited type's queue row, locked until the claim's
            // transaction ends (claims of the type, on every instance, take turns).
            limit_lock: format!(
                "SELECT 1 FROM {tq} WHERE event_type = $1 AND (concurrency > 0 OR rate_limit > 0)
                 FOR UPDATE"
            ),
            // $1 event type: a limited type's queue row, read without a lock (a
            // hand-over's first look: core's `Gate`, without the rate's window)
            gate_read: format!(
                "SELECT concurrency::bigint, rate_limit::bigint, partitioned::bigint FROM {tq}
                 WHERE event_type = $1 AND paused = 0 AND (concurrency > 0 OR rate_limit > 0)"
            ),
            // $1 owner $2 event type $3 limit $4 marked ids: the unlocked hand-over
            claim_handover: claim_handover(&t, &tq, &tc),
            // $1 owner $2 event type $3 limit: as claim_one_type, at most the room under
            // the type's limits (core's `Gate`; none if it is paused or no longer
            // limited), the running tasks and the window's starts counted by this
            // statement (after `limit_lock`: its snapshot sees every claim of the type
            // committed before it got the lock); a rate-limited type's claim adds its row
            // to the ledger and deletes the rows its window has passed. The ledger's
            // times are the clock's, not the transaction's start: the claim may have
            // waited for the lock.
            claim_limited: claim_limited(&t, &tq, &tr, &tc),
            // $1 owner $2 event type $3 limit: as claim_limited, the room per partition
            // key, the keys taken in turns.
            claim_partitioned: claim_partitioned(&t, &tq, &tr, &tc),
            // $1 older_than ms, $2 limit. Status and age re-checked on the row itself.
            // The rows by id, as a claim's (see `claim`): never a join the generic plan
            // could turn into a walk of the primary key. Answers one row: those put back
            // to pending, those recycled, and those passed over (dead in the statement's
            // snapshot, up to the limit, but not locked: another transaction held them).
            recycle_dead: format!(
                "WITH dead AS MATERIALIZED (
                    SELECT id FROM {t}
                    WHERE status = 3 AND updated_at < now() - $1::bigint {MS}
                    ORDER BY updated_at, id
                    LIMIT $2
                    FOR UPDATE SKIP LOCKED),
                 seen AS (
                    SELECT count(*) AS n FROM (
                        SELECT 1 FROM {t}
                        WHERE status = 3 AND updated_at < now() - $1::bigint {MS}
                        LIMIT $2) AS s),
                 moved AS (
                 UPDATE {t} AS t SET
                    status = CASE WHEN t.attempts < t.max_attempts THEN 0 ELSE 2 END,
                    last_error = 'attempt ' || t.attempts || ' of ' || t.max_attempts
                        || ' died: owner ' || COALESCE(t.owner, '?')
                        || ' stopped heartbeating'
                        || CASE WHEN t.attempts < t.max_attempts THEN '' ELSE '; no attempts left' END,
                    owner = NULL,
                    updated_at = now()
                 WHERE t.id = ANY (ARRAY(SELECT id FROM dead)) AND t.status + 0 = 3
                    AND t.updated_at < now() - $1::bigint {MS}
                 RETURNING t.status)
                 SELECT (SELECT count(*) FROM moved WHERE status = 0),
                    (SELECT count(*) FROM moved),
                    GREATEST((SELECT n FROM seen) - (SELECT count(*) FROM dead), 0)"
            ),
            set_output: format!(
                "UPDATE {t} SET output = $1 WHERE id = $2 AND status + 0 = 3 AND lease = $3"
            ),
            // $1 ids, $2 leases. The rows are locked in id order first.
            // Never waits for another writer (`SKIP LOCKED`): a row another transaction
            // holds (the holder's own mark or saga report under way, an operator's
            // command) is answered from the snapshot, held when it runs under the
            // lease, and left for the next heartbeat to refresh. A heartbeat that
            // waited held every other lease of the set with it, and the marks queued
            // behind those: the chaos lane's outages showed heartbeats of seconds.
            heartbeat: format!(
                "WITH l AS (SELECT * FROM unnest($1::bigint[], $2::bigint[]) AS l(id, lease)),
                 locked AS (
                    SELECT t.id FROM {t} AS t JOIN l ON t.id = l.id
                    WHERE t.status + 0 = 3 AND t.lease = l.lease
                    ORDER BY t.id FOR UPDATE OF t SKIP LOCKED),
                 up AS (
                    UPDATE {t} AS t SET updated_at = now()
                    FROM l, locked
                    WHERE t.id = l.id AND t.id = locked.id AND t.status + 0 = 3
                        AND t.lease = l.lease
                    RETURNING t.id, t.lease)
                 SELECT id, lease FROM up
                 UNION ALL
                 SELECT t.id, t.lease FROM {t} AS t JOIN l ON t.id = l.id
                 WHERE t.status + 0 = 3 AND t.lease = l.lease
                    AND NOT EXISTS (SELECT 1 FROM locked WHERE locked.id = t.id)"
            ),
            // One statement for a round of marks (each task at most once per round).
            // kind: 1 success, 2 retry, 3 fail, 4 release, 5 cancel, 6 snooze. $1 ids
            // $2 leases $3 kinds $4 delay_ms $5 errors $6 max_snoozes, in id order
            // (`mark_round` sorts them).
            //
            // Two marks of the same rows (an engine's late mark of a task another now
            // holds, beside that one's) lock them in the order the update visits them:
            // the arrays' order, its plan being a nested loop from the `unnest` to the
            // primary key (an array parameter's `unnest` is estimated at 10 rows), so
            // both lock in id order and cannot deadlock. Should a plan ever visit them
            // otherwise, the server ends the rare deadlock after `deadlock_timeout` and
            // the mark, a temporary error, is written again. The rows are not locked
            // first in a `FOR UPDATE` pass of their own: that wrote each row's header
            // once more (a WAL record a row) and cost a mark of 100 rows 0.5 ms of its
            // 2 ms (1.72 → 1.31 ms executing, `EXPLAIN ANALYZE`, against 1.25 ms for the
            // raw SQL's completion).
            mark: format!(
                "WITH m AS (SELECT * FROM unnest($1::bigint[], $2::bigint[], $3::smallint[],
                        $4::bigint[], $5::text[], $6::bigint[])
                        AS m(id, lease, kind, delay_ms, error, max_snoozes))
                 UPDATE {t} AS t SET
                    status = CASE m.kind
                        WHEN 1 THEN 1
                        WHEN 2 THEN CASE WHEN t.attempts < t.max_attempts THEN 0 ELSE 2 END
                        WHEN 3 THEN 2
                        WHEN 5 THEN 4
                        WHEN 6 THEN CASE WHEN t.snoozes < m.max_snoozes
                            OR t.attempts < t.max_attempts THEN 0 ELSE 2 END
                        ELSE 0 END,
                    next_run_at = CASE WHEN (m.kind = 2 AND t.attempts < t.max_attempts)
                        OR (m.kind = 6 AND (t.snoozes < m.max_snoozes
                            OR t.attempts < t.max_attempts))
                        THEN now() + m.delay_ms {MS} ELSE t.next_run_at END,
                    owner = CASE WHEN m.kind = 1 THEN t.owner ELSE NULL END,
                    attempts = CASE WHEN m.kind = 4
                        OR (m.kind = 6 AND t.snoozes < m.max_snoozes)
                        THEN GREATEST(t.attempts - 1, 0) ELSE t.attempts END,
                    snoozes = CASE WHEN m.kind = 6 AND t.snoozes < m.max_snoozes
                        THEN t.snoozes + 1 ELSE t.snoozes END,
                    last_error = CASE WHEN m.kind = 1 THEN NULL
                        WHEN m.kind = 4 OR (m.kind = 6 AND t.snoozes < m.max_snoozes)
                        THEN t.last_error ELSE m.error END,
                    updated_at = now()
                 FROM m
                 WHERE t.id = m.id AND t.status + 0 = 3 AND t.lease = m.lease
                 RETURNING t.id"
            ),
            // $1 id, $2 stuck_after ms
            manual_reset: format!(
                "UPDATE {t} SET status = {RESET_STATUS}, attempts = 0, snoozes = 0, next_run_at = now(),
                    owner = NULL, updated_at = now()
                 WHERE id = $1 AND (status = 2
                    OR (status = 3 AND updated_at < now() - $2::bigint {MS}))
                 RETURNING {COLUMNS}"
            ),
            status_of: format!("SELECT status FROM {t} WHERE id = $1"),
            get: format!("SELECT {COLUMNS} FROM {t} WHERE id = $1"),
            // $1 status $2 event_type $3 after_id $4 limit $5 older_than ms $6 biz_key
            // $7 error text
            tasks: t.clone(),
            list_select: format!("SELECT {COLUMNS} FROM {t}"),
            stats_counts: format!(
                "SELECT event_type::text, status, count(*) FROM {t}
                 GROUP BY event_type, status ORDER BY event_type, status"
            ),
            // an index-only walk of the partial backlog index, grouped in its order: no
            // sort of the backlog, and the succeeded rows are not in the index at all
            backlog_counts: format!(
                "SELECT event_type::text, status, count(*) FROM {t}
                 WHERE status <> 1
                 GROUP BY status, event_type ORDER BY event_type, status"
            ),
            throughput: format!(
                "SELECT event_type, status,
                    floor(extract(epoch FROM now() - updated_at) * 1000 / $2::bigint)::bigint,
                    count(*)
                 FROM ((SELECT event_type, status, updated_at FROM {t}
                        WHERE status = 1 AND updated_at >= now() - $1::bigint {MS}
                        ORDER BY updated_at DESC LIMIT $3)
                       UNION ALL
                       (SELECT event_type, status, updated_at FROM {t}
                        WHERE status = 2 AND updated_at >= now() - $1::bigint {MS}
                        ORDER BY updated_at DESC LIMIT $3)) AS f
                 GROUP BY 1, 2, 3"
            ),
            stats_oldest_due: format!(
                "SELECT (extract(epoch FROM now() - min(next_run_at)) * 1000)::bigint
                 FROM {t} WHERE status = 0 AND dedup_slot >= 0 AND next_run_at <= now()"
            ),
            barrier_records: format!(
                "SELECT {BARRIER_COLUMNS} FROM {tb} WHERE gid = $1
                 ORDER BY created_at, branch_id, op LIMIT {MAX_BATCH}"
            ),
            saga_insert: format!(
                "INSERT INTO {ts} (name, saga_key, status, grp, input, version, created_at,
                    updated_at)
                 VALUES ($1, $2, 0, 0, $3, 0, now(), now())
                 ON CONFLICT (name, saga_key) DO NOTHING RETURNING 1::bigint"
            ),
            saga_read: format!(
                "SELECT id, status::bigint FROM {ts} WHERE name = $1 AND saga_key = $2"
            ),
            saga_get: format!(
                "SELECT {SAGA_COLUMNS} FROM {ts} WHERE name = $1 AND saga_key = $2"
            ),
            fail_tx: format!(
                "UPDATE {t} SET status = 2, owner = NULL, last_error = $1, updated_at = now()
                 WHERE id = $2 AND status + 0 = 3 AND lease = $3 RETURNING id"
            ),
            saga_lock: format!(
                "SELECT status::bigint, grp::bigint FROM {ts} WHERE id = $1 FOR UPDATE"
            ),
            step_rows: format!(
                "SELECT position::bigint, state::bigint FROM {tss}
                 WHERE saga_id = $1 AND grp = $2"
            ),
            step_record: format!(
                "INSERT INTO {tss} AS s (saga_id, position, step, grp, state, output, updated_at)
                 VALUES ($1, $2, $3, $4, $5, $6, now())
                 ON CONFLICT (saga_id, position) DO UPDATE SET state = EXCLUDED.state,
                    output = COALESCE(EXCLUDED.output, s.output), updated_at = now()
                 RETURNING 1::bigint"
            ),
            saga_set: format!(
                "UPDATE {ts} SET status = $1, grp = $2, reason = COALESCE($3, reason),
                    version = version + 1, updated_at = now()
                 WHERE id = $4 RETURNING 1::bigint"
            ),
            saga_steps: format!(
                "SELECT {SAGA_STEP_COLUMNS} FROM {tss} WHERE saga_id = $1 ORDER BY position"
            ),
            reset_failed: format!(
                "WITH r AS (
                    UPDATE {t} SET status = 0, attempts = 0, snoozes = 0, next_run_at = now(), owner = NULL,
                        updated_at = now()
                    WHERE event_type = $1 AND status = 2
                      AND left(biz_key, char_length($2::text)) = $2::text
                    RETURNING 1)
                 SELECT count(*) FROM r"
            ),
            saga_log_insert: format!(
                "INSERT INTO {tsa} (saga_id, action, operator, reason, at)
                 VALUES ($1, $2, $3, $4, now()) RETURNING 1::bigint"
            ),
            saga_log: format!(
                "SELECT saga_id, action, operator, reason, at FROM {tsa}
                 WHERE saga_id = $1 ORDER BY id"
            ),
            saga_by_id: format!("SELECT {SAGA_COLUMNS} FROM {ts} WHERE id = $1"),
            // $1 after id $2 name $3 status $4 older than (ms) $5 limit $6 started older
            // than (ms)
            sagas: format!(
                "SELECT {SAGA_COLUMNS} FROM {ts}
                 WHERE id > $1 AND ($2::text IS NULL OR name = $2)
                   AND ($3::smallint IS NULL OR status = $3)
                   AND ($4::bigint IS NULL OR updated_at < now() - $4::bigint {MS})
                   AND ($6::bigint IS NULL OR created_at < now() - $6::bigint {MS})
                 ORDER BY id LIMIT $5"
            ),
            saga_backlog: format!(
                "SELECT name, status, count(*),
                        (extract(epoch FROM now() - min(updated_at)) * 1000)::bigint
                 FROM {ts} WHERE status IN (0, 1, 4) GROUP BY name, status"
            ),
            purge_barrier: format!(
                "WITH old AS MATERIALIZED (
                    SELECT gid, branch_id, op FROM {tb}
                    WHERE created_at < now() - $1::bigint {MS}
                    ORDER BY created_at
                    LIMIT $2
                    FOR UPDATE SKIP LOCKED)
                 DELETE FROM {tb} AS b USING old
                 WHERE b.gid = old.gid AND b.branch_id = old.branch_id AND b.op = old.op"
            ),
            purge_finished: format!(
                "WITH old AS MATERIALIZED (
                    SELECT id FROM {t}
                    WHERE status = $3::smallint AND updated_at < now() - $1::bigint {MS}
                    ORDER BY updated_at, id
                    LIMIT $2
                    FOR UPDATE SKIP LOCKED)
                 DELETE FROM {t} AS t
                 WHERE t.id = ANY (ARRAY(SELECT id FROM old)) AND t.status = $3::smallint"
            ),
            delete_finished: format!(
                "DELETE FROM {t} WHERE id = ANY($1) AND status = $2::smallint"
            ),
            purge_audit: [&ta, &tqa].map(|log| {
                format!(
                    "DELETE FROM {log} WHERE id = ANY (ARRAY(
                        SELECT id FROM {log} WHERE at < now() - $1::bigint {MS}
                        ORDER BY id LIMIT $2))"
                )
            }),
            purge_event_types: format!(
                "DELETE FROM {th} WHERE event_type = ANY (ARRAY(
                    SELECT event_type FROM {th} WHERE last_seen_at < now() - $1::bigint {MS}
                    ORDER BY last_seen_at LIMIT $2))"
            ),
        }
    }
}

/// The schema's history, one numbered SQL file per migration (`migrations/`; see
/// [`schema`](backstop_core::driver::schema) for their form). A new migration is a new
/// file and a line here.
const MIGRATIONS: &[MigrationFile] = schema::migration_files!("../migrations");
