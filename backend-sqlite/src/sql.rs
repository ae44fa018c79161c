//! The SQL of the SQLite backend, built once per store for its (validated) table name.
//!
//! Times are Unix milliseconds (INTEGER); `now` is bound as a parameter read after the
//! write lock is taken.
//!
//! **A bound limit is written `LIMIT CAST(?n AS INTEGER)`, never `LIMIT ?n`.** SQLite's
//! planner reads the value bound to a bare `LIMIT ?n` and marks the statement to be
//! compiled again whenever that parameter is bound anew, so a cached statement was
//! re-prepared at every call: for the claim (five index walks merged), the parse and
//! plan cost more than the claim's own reads, on the writer thread every process write
//! waits for. The cast keeps the value out of the planner's reach. The test
//! `bound_limits_do_not_recompile` holds every statement of this module to it.

use backstop_core::driver::schema::{self, version_table, MigrationFile, SchemaSql};
use backstop_core::driver::{
    AUDIT_COLUMNS, BARRIER_COLUMNS, COLUMNS, QUEUE_AUDIT_COLUMNS, QUEUE_COLUMNS, SAGA_COLUMNS,
    SAGA_STEP_COLUMNS,
};
use backstop_core::limits::MAX_BATCH;

use crate::batch_rows::RowInserts;

/// This machine's clock in Unix milliseconds: SQLite's "database time", as the
/// statements store times.
pub(crate) fn now_ms() -> i64 {
    chrono::Utc::now().timestamp_millis()
}

/// How a list statement spells what differs (see `list_sql`); an age is bound as its
/// cutoff (now − age, in ms).
pub(crate) const LIST: backstop_core::driver::ListDialect = backstop_core::driver::ListDialect {
    placeholder: |n| format!("?{n}"),
    contains: |p| format!("instr(last_error, {p}) > 0"),
    has_tag: |p| format!("instr(tags, ',' || {p} || ',') > 0"),
    // a JSON string equal to the value: a number or an object never is
    metadata_is: |k, p| {
        format!("json_type(metadata, '$.\"{k}\"') = 'text' AND json_extract(metadata, '$.\"{k}\"') = {p}")
    },
    starts_with: |p| format!("substr(biz_key, 1, length({p})) = {p}"),
    older_than: |p| format!("updated_at < {p}"),
    backlog_order: "id",
    // a cutoff on the store's clock, read as the statement is made
    age: |d| {
        let cutoff = now_ms().saturating_sub(backstop_core::driver::millis(d));
        backstop_core::driver::Value::BigInt(Some(cutoff))
    },
};

/// The status a reset task takes: pending, or waiting (in line again) with an order key.
const RESET_STATUS: &str = "CASE WHEN order_key IS NULL THEN 0 ELSE 5 END";

/// The priority levels (see `backstop_core::Priority`): a claim walks each.
pub(crate) const PRIORITY_LEVELS: usize = 5;

pub(crate) struct Sql {
    table: String,
    /// The version table's statements and the migrations.
    pub schema: SchemaSql,
    /// ?1 event type ?2 now: which priority levels have a due task (see `claim_batch`);
    /// none of a paused type; then, for a limited type, its concurrency, rate limit,
    /// window ms, running tasks and starts in the window (NULLs: not limited).
    pub due_levels: String,
    /// ?1 event type ?2 paused ?3 concurrency ?4 rate limit ?5 window ms (NULL: 0) ?6
    /// now: the queue's row, unless it has one.
    pub queue_insert: String,
    /// ?1 event type ?2 paused ?3 concurrency ?4 rate limit ?5 window ms (NULL: as they
    /// are) ?6 now: the queue's settings, where they differ.
    pub queue_update: String,
    /// ?1 event type: a limited type's queue row (concurrency, rate limit, window ms,
    /// partitioned), none when it is paused or has no limit.
    pub gate_read: String,
    /// ?1 event type ?2 ids (a JSON array): how many of these tasks are of the type.
    pub of_type: String,
    /// ?1 event type ?2 now ?3 starts: a claim's row in the rate limits' ledger.
    pub rate_record: String,
    /// ?1 event type ?2 cutoff: the type's ledger rows the window has passed, deleted.
    pub rate_trim: String,
    /// A partitioned limited type's claim.
    pub partitions: crate::partitions::PartitionSql,
    /// ?1 event type ?2 action ?3 operator ?4 reason ?5 now: an entry of the queues' log.
    pub queue_audit: String,
    /// ?1 event type: the queue's row.
    pub queue_get: String,
    /// Every queue's row.
    pub queues: String,
    /// ?1 event type: its log, oldest first.
    pub queue_log: String,
    pub insert: String,
    /// The batch enqueue's multi-row inserts.
    pub insert_rows: RowInserts,
    /// ?1 event_type ?2 biz_key ?3 now: the task holding the key: id, status, age ms.
    pub existing: String,
    /// ?1 id: free the key a finished task holds.
    pub release_key: String,
    /// ?1 payload ?2 moves (0/1) ?3 delay ms ?4 run at ms ?5 id ?6 now: replace a pending
    /// task's payload (and due time).
    pub replace_payload: String,
    /// ?1 event type ?2 now: upsert into the handlers table.
    pub types_register: String,
    /// The handlers table.
    pub types_list: String,
    /// ?1 order key: insert it into the keys table if missing.
    pub key_insert: String,
    /// ?1 order key: a task in the way (pending, running, parked and blocking).
    pub key_blocker: String,
    /// ?1 order key: the first waiting task.
    pub key_next: String,
    /// ?1 id ?2 now: waiting → pending.
    pub key_promote: String,
    /// ?1 order key.
    pub key_drop: String,
    /// ?1 after ?2 limit: keys in order.
    pub keys_page: String,
    pub claim_by_id: String,
    /// ?1 owner ?2 id ?3 now: the claim of a task never claimed before, on the caller's
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
    /// ?1 now: the unfinished sagas per name and status: count, ms since the oldest
    /// change.
    pub saga_backlog: String,
    pub recycle_dead: String,
    pub heartbeat: String,
    /// ?1 output ?2 id ?3 lease: a running task's output, fenced.
    pub set_output: String,
    pub mark_success: String,
    /// ?1 id, ?2 lease, ?3 now: the success mark on the handler's transaction
    /// (`complete_tx`).
    pub complete: String,
    pub mark_retry: String,
    pub mark_fail: String,
    /// ?1 now ?2 id ?3 lease ?4 reason: running → cancelled.
    pub mark_cancel: String,
    /// ?1 now ?2 id ?3 lease ?4 due ?5 error ?6 max: a snooze (see MarkAction).
    pub mark_snooze: String,
    pub release: String,
    pub manual_reset: String,
    /// ?1 now ?2 delay ms ?3 due at ms ?4 payload ?5 id: a pending or waiting task's due
    /// time and payload.
    pub edit: String,
    /// ?1 now ?2 id: pending or running → cancelled.
    pub cancel: String,
    /// ?1 id: not running.
    pub delete: String,
    /// ?1 now ?2 id ?3 ?4 expected status codes.
    pub retry: String,
    /// ?1 task id ?2 action ?3 operator ?4 reason ?5 now.
    pub audit_insert: String,
    /// ?1 task id.
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
    /// ?1 now ?2 window ms ?3 bucket ms ?4 cap per status.
    pub throughput: String,
    /// ?1 cutoff ?2 limit ?3 status.
    pub purge_finished: String,
    /// ?1 cutoff ?2 limit: the tasks' audit log, then the queues' log.
    pub purge_audit: [String; 2],
    /// ?1 cutoff ?2 limit.
    pub purge_event_types: String,
    pub inbox_insert: String,
    pub inbox_purge: String,
    /// ?1 id ?2 status.
    pub delete_finished: String,
}

/// The columns of [`INSERT_TUPLE`].
pub(crate) const INSERT_COLUMNS: &str = "event_type, biz_key, payload, status, attempts, \
    max_attempts, retry_strategy, retry_interval_ms, retry_max_interval_ms, next_run_at, lease, \
    created_at, updated_at, priority, retry_jitter_pct, order_key, order_block, timeout_ms, tags, \
    metadata, traceparent, partition_key";

/// Core's insert_params (?1–?19: ?8 delay ms, ?9 run_at ms: NULL uses the delay, a time
/// already past is now, a NULL makes max() NULL), then ?20 now.
pub(crate) const INSERT_TUPLE: &str =
    "(?1, ?2, ?3, ?12, 0, ?4, ?5, ?6, ?7, COALESCE(max(?9, ?20), ?20 + ?8), 0,
    ?20, ?20, ?10, ?11, ?13, ?14, ?15, ?16, ?17, ?18, ?19)";

/// The end of every insert of a task: a held key is skipped, a made row answers its id.
pub(crate) const INSERT_TAIL: &str =
    "ON CONFLICT (biz_key, event_type, dedup_slot) DO NOTHING RETURNING id";

impl Sql {
    /// `table` must have passed `limits::check_identifier`.
    pub fn new(table: &str) -> Sql {
        let t = format!("\"{table}\"");
        let ti = format!("\"{table}_inbox\"");
        let ta = format!("\"{table}_audit\"");
        let tv = format!("\"{}\"", version_table(table));
        let tk = format!("\"{table}_keys\"");
        let th = format!("\"{table}_handlers\"");
        let tb = format!("\"{table}_barrier\"");
        let ts = format!("\"{table}_saga\"");
        let tss = format!("\"{table}_saga_step\"");
        let tsa = format!("\"{table}_saga_audit\"");
        let tq = format!("\"{table}_queues\"");
        let tqa = format!("\"{table}_queue_audit\"");
        let tr = format!("\"{table}_rate\"");
        // a claim by id passes a task of a paused or limited type by (`set_queue`)
        let running = format!(
            "NOT EXISTS (SELECT 1 FROM {tq} WHERE {tq}.event_type = {t}.event_type
                AND ({tq}.paused = 1 OR {tq}.concurrency > 0 OR {tq}.rate_limit > 0))"
        );
        // Every change to a running task is fenced by id, status and lease.
        let fenced = "WHERE id = ?2 AND status = 3 AND lease = ?3";
        Sql {
            table: t.clone(),
            due_levels: Self::due_levels(&t, &tq, &tr),
            queue_insert: format!(
                "INSERT INTO {tq} (event_type, paused, concurrency, rate_limit, rate_window_ms,
                    updated_at, partitioned)
                 VALUES (?1, COALESCE(?2, 0), COALESCE(?3, 0), COALESCE(?4, 0), COALESCE(?5, 0), ?6,
                    COALESCE(?7, 0))
                 ON CONFLICT (event_type) DO NOTHING"
            ),
            queue_update: format!(
                "UPDATE {tq} SET paused = COALESCE(?2, paused),
                    concurrency = COALESCE(?3, concurrency), rate_limit = COALESCE(?4, rate_limit),
                    rate_window_ms = COALESCE(?5, rate_window_ms), updated_at = ?6,
                    partitioned = COALESCE(?7, partitioned)
                 WHERE event_type = ?1
                   AND (paused <> COALESCE(?2, paused) OR concurrency <> COALESCE(?3, concurrency)
                    OR rate_limit <> COALESCE(?4, rate_limit)
                    OR rate_window_ms <> COALESCE(?5, rate_window_ms)
                    OR partitioned <> COALESCE(?7, partitioned))"
            ),
            gate_read: format!(
                "SELECT concurrency, rate_limit, rate_window_ms, partitioned FROM {tq}
                 WHERE event_type = ?1 AND paused = 0 AND (concurrency > 0 OR rate_limit > 0)"
            ),
            of_type: format!(
                "SELECT COUNT(*) FROM {t}
                 WHERE event_type = ?1 AND id IN (SELECT value FROM json_each(?2))"
            ),
            rate_record: format!(
                "INSERT INTO {tr} (event_type, at, starts, partition_key) VALUES (?1, ?2, ?3, ?4)"
            ),
            partitions: crate::partitions::PartitionSql::new(&t, &tr, table),
            rate_trim: format!("DELETE FROM {tr} WHERE event_type = ?1 AND at <= ?2"),
            queue_audit: format!(
                "INSERT INTO {tqa} (event_type, action, operator, reason, at)
                 VALUES (?1, ?2, ?3, ?4, ?5)"
            ),
            queue_get: format!("SELECT {QUEUE_COLUMNS} FROM {tq} WHERE event_type = ?1"),
            queues: format!("SELECT {QUEUE_COLUMNS} FROM {tq}"),
            queue_log: format!(
                "SELECT {QUEUE_AUDIT_COLUMNS} FROM {tqa} WHERE event_type = ?1 ORDER BY id"
            ),
            schema: SchemaSql {
                setup: format!(
                    "CREATE TABLE IF NOT EXISTS {tv} (
                        version    INTEGER PRIMARY KEY,
                        name       TEXT    NOT NULL,
                        applied_at INTEGER NOT NULL
                     )"
                ),
                read: format!("SELECT version FROM {tv}"),
                record: format!(
                    "INSERT INTO {tv} (version, name, applied_at) VALUES (?1, ?2, ?3)"
                ),
                script_record: format!(
                    "INSERT INTO {tv} (version, name, applied_at)
                     VALUES ({{version}}, '{{name}}',
                        CAST((julianday('now') - 2440587.5) * 86400000 AS INTEGER))"
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
                ],
            },
            // ?1 consumer ?2 message_id ?3 now: one row inserted, or none for a duplicate
            inbox_insert: format!(
                "INSERT INTO {ti} (consumer, message_id, processed_at) VALUES (?1, ?2, ?3)
                 ON CONFLICT (consumer, message_id) DO NOTHING"
            ),
            // ?1 cutoff ?2 limit
            inbox_purge: format!(
                "DELETE FROM {ti} WHERE (consumer, message_id) IN (
                    SELECT consumer, message_id FROM {ti} WHERE processed_at < ?1
                    ORDER BY processed_at LIMIT CAST(?2 AS INTEGER))"
            ),
            insert: format!("INSERT INTO {t} ({INSERT_COLUMNS}) VALUES {INSERT_TUPLE} {INSERT_TAIL}"),
            insert_rows: RowInserts::new(&t),
            existing: format!(
                "SELECT id, status, ?3 - created_at FROM {t}
                 WHERE event_type = ?1 AND biz_key = ?2 AND dedup_slot = 0"
            ),
            release_key: format!("UPDATE {t} SET dedup_slot = id WHERE id = ?1 AND dedup_slot = 0"),
            key_insert: format!("INSERT OR IGNORE INTO {tk} (order_key) VALUES (?1)"),
            types_register: format!(
                "INSERT INTO {th} (event_type, first_seen_at, last_seen_at) VALUES (?1, ?2, ?2)
                 ON CONFLICT (event_type) DO UPDATE SET last_seen_at = ?2"
            ),
            types_list: format!("SELECT event_type, first_seen_at, last_seen_at FROM {th}"),
            key_blocker: format!(
                "SELECT id FROM {t}
                 WHERE order_key = ?1 AND (status IN (0, 3) OR (status = 2 AND order_block = 1))
                 LIMIT 1"
            ),
            key_next: format!(
                "SELECT id FROM {t} WHERE order_key = ?1 AND status = 5 ORDER BY id LIMIT 1"
            ),
            key_promote: format!(
                "UPDATE {t} SET status = 0, next_run_at = max(next_run_at, ?2), updated_at = ?2
                 WHERE id = ?1 AND status = 5"
            ),
            key_drop: format!("DELETE FROM {tk} WHERE order_key = ?1"),
            keys_page: format!(
                "SELECT order_key FROM {tk} WHERE order_key > ?1 ORDER BY order_key LIMIT CAST(?2 AS INTEGER)"
            ),
            // ?1 payload ?2 moves ?3 delay ms ?4 run at ms ?5 id ?6 now
            replace_payload: format!(
                "UPDATE {t} SET payload = ?1,
                    next_run_at = CASE WHEN ?2 = 1 THEN max(?6 + ?3, COALESCE(?4, ?6))
                        ELSE next_run_at END,
                    updated_at = ?6
                 WHERE id = ?5 AND status = 0"
            ),
            claim_by_id: format!(
                "UPDATE {t} SET status = 3, owner = ?1, attempts = attempts + 1,
                    lease = lease + 1, updated_at = ?2
                 WHERE id = ?3 AND status = 0 AND next_run_at <= ?2 AND {running}
                 RETURNING {COLUMNS}"
            ),
            barrier_insert: format!(
                "INSERT INTO {tb} (gid, branch_id, op, reason, created_at)
                 VALUES (?1, ?2, ?3, ?4, ?5)
                 ON CONFLICT (gid, branch_id, op) DO NOTHING"
            ),
            barrier_read: format!(
                "SELECT CASE WHEN reason = op THEN 1 ELSE 0 END FROM {tb}
                 WHERE gid = ?1 AND branch_id = ?2 AND op = ?3"
            ),
            claim_in: format!(
                "UPDATE {t} SET status = 3, owner = ?1, attempts = attempts + 1, lease = 1,
                    updated_at = ?3
                 WHERE id = ?2 AND status = 0 AND lease = 0 AND next_run_at <= ?3
                   AND {running}"
            ),
            // ?1 now, ?2 cutoff, ?3 limit. Status and age re-checked on the row itself.
            recycle_dead: format!(
                "UPDATE {t} SET
                    status = CASE WHEN attempts < max_attempts THEN 0 ELSE 2 END,
                    last_error = 'attempt ' || attempts || ' of ' || max_attempts
                        || ' died: owner ' || COALESCE(owner, '?')
                        || ' stopped heartbeating'
                        || CASE WHEN attempts < max_attempts THEN '' ELSE '; no attempts left' END,
                    owner = NULL,
                    updated_at = ?1
                 WHERE id IN (SELECT id FROM {t} WHERE status = 3 AND updated_at < ?2
                              ORDER BY updated_at, id LIMIT CAST(?3 AS INTEGER))
                   AND status = 3 AND updated_at < ?2
                 RETURNING status"
            ),
            heartbeat: format!("UPDATE {t} SET updated_at = ?1 {fenced}"),
            set_output: format!("UPDATE {t} SET output = ?1 {fenced}"),
            mark_success: format!(
                "UPDATE {t} SET status = 1, last_error = NULL, updated_at = ?1 {fenced}"
            ),
            complete: format!(
                "UPDATE {t} SET status = 1, last_error = NULL, updated_at = ?3
                 WHERE id = ?1 AND status = 3 AND lease = ?2"
            ),
            // ?4 = next_run_at, ?5 = error
            mark_retry: format!(
                "UPDATE {t} SET
                    status = CASE WHEN attempts < max_attempts THEN 0 ELSE 2 END,
                    next_run_at = CASE WHEN attempts < max_attempts THEN ?4 ELSE next_run_at END,
                    owner = NULL, last_error = ?5, updated_at = ?1
                 {fenced}"
            ),
            mark_fail: format!(
                "UPDATE {t} SET status = 2, owner = NULL, last_error = ?4, updated_at = ?1 {fenced}"
            ),
            mark_cancel: format!(
                "UPDATE {t} SET status = 4, owner = NULL, last_error = ?4, updated_at = ?1 {fenced}"
            ),
            mark_snooze: format!(
                "UPDATE {t} SET
                    status = CASE WHEN snoozes < ?6 OR attempts < max_attempts THEN 0 ELSE 2 END,
                    next_run_at = CASE WHEN snoozes < ?6 OR attempts < max_attempts
                        THEN ?4 ELSE next_run_at END,
                    last_error = CASE WHEN snoozes < ?6 THEN last_error ELSE ?5 END,
                    attempts = CASE WHEN snoozes < ?6 THEN MAX(attempts - 1, 0) ELSE attempts END,
                    snoozes = CASE WHEN snoozes < ?6 THEN snoozes + 1 ELSE snoozes END,
                    owner = NULL, updated_at = ?1
                 {fenced}"
            ),
            release: format!(
                "UPDATE {t} SET status = 0, owner = NULL, attempts = MAX(attempts - 1, 0),
                    updated_at = ?1
                 {fenced}"
            ),
            // ?1 now, ?2 id, ?3 stuck cutoff
            manual_reset: format!(
                "UPDATE {t} SET status = {RESET_STATUS}, attempts = 0, snoozes = 0, next_run_at = ?1,
                    owner = NULL, updated_at = ?1
                 WHERE id = ?2 AND (status = 2 OR (status = 3 AND updated_at < ?3))
                 RETURNING {COLUMNS}"
            ),
            status_of: format!("SELECT status FROM {t} WHERE id = ?1"),
            edit: format!(
                "UPDATE {t} SET
                    next_run_at = CASE WHEN ?2 IS NOT NULL THEN ?1 + ?2
                        WHEN ?3 IS NOT NULL THEN max(?3, ?1) ELSE next_run_at END,
                    payload = COALESCE(?4, payload), updated_at = ?1
                 WHERE id = ?5 AND status IN (0, 5)
                 RETURNING {COLUMNS}"
            ),
            cancel: format!(
                "UPDATE {t} SET status = 4, lease = lease + 1, updated_at = ?1
                 WHERE id = ?2 AND status IN (0, 3, 5)
                 RETURNING {COLUMNS}"
            ),
            delete: format!("DELETE FROM {t} WHERE id = ?1 AND status <> 3 RETURNING {COLUMNS}"),
            retry: format!(
                "UPDATE {t} SET status = {RESET_STATUS}, attempts = 0, snoozes = 0, next_run_at = ?1,
                    owner = NULL, updated_at = ?1
                 WHERE id = ?2 AND status IN (?3, ?4)
                 RETURNING {COLUMNS}"
            ),
            audit_insert: format!(
                "INSERT INTO {ta} (task_id, action, operator, reason, at) VALUES (?1, ?2, ?3, ?4, ?5)"
            ),
            audit_log: format!("SELECT {AUDIT_COLUMNS} FROM {ta} WHERE task_id = ?1 ORDER BY id"),
            get: format!("SELECT {COLUMNS} FROM {t} WHERE id = ?1"),
            tasks: t.clone(),
            list_select: format!("SELECT {COLUMNS} FROM {t}"),
            stats_counts: format!(
                "SELECT event_type, status, COUNT(*) FROM {t}
                 GROUP BY event_type, status ORDER BY event_type, status"
            ),
            backlog_counts: format!(
                "SELECT event_type, status, COUNT(*) FROM {t}
                 WHERE status IN (0, 2, 3, 4, 5)
                 GROUP BY event_type, status ORDER BY event_type, status"
            ),
            // ?1 now: how long the oldest due task has been due, in ms
            throughput: format!(
                "SELECT event_type, status, (?1 - updated_at) / ?3, COUNT(*) FROM (
                    SELECT * FROM (SELECT event_type, status, updated_at FROM {t}
                        WHERE status = 1 AND updated_at >= ?1 - ?2
                        ORDER BY updated_at DESC LIMIT CAST(?4 AS INTEGER))
                    UNION ALL
                    SELECT * FROM (SELECT event_type, status, updated_at FROM {t}
                        WHERE status = 2 AND updated_at >= ?1 - ?2
                        ORDER BY updated_at DESC LIMIT CAST(?4 AS INTEGER)))
                 GROUP BY 1, 2, 3"
            ),
            // the partial index of the pending rows: the planner would otherwise take
            // the claim index's `status = 0` range (every pending row) for a covering one
            stats_oldest_due: format!(
                "SELECT ?1 - MIN(next_run_at) FROM {t} INDEXED BY \"{table}_ix_oldest_due\"
                 WHERE status = 0 AND next_run_at <= ?1"
            ),
            barrier_records: format!(
                "SELECT {BARRIER_COLUMNS} FROM {tb} WHERE gid = ?1
                 ORDER BY created_at, branch_id, op LIMIT {MAX_BATCH}"
            ),
            saga_insert: format!(
                "INSERT INTO {ts} (name, saga_key, status, grp, input, version, created_at,
                    updated_at)
                 VALUES (?1, ?2, 0, 0, ?3, 0, ?4, ?4)
                 ON CONFLICT (name, saga_key) DO NOTHING"
            ),
            saga_read: format!("SELECT id, status FROM {ts} WHERE name = ?1 AND saga_key = ?2"),
            saga_get: format!(
                "SELECT {SAGA_COLUMNS} FROM {ts} WHERE name = ?1 AND saga_key = ?2"
            ),
            // ?4 now
            fail_tx: format!(
                "UPDATE {t} SET status = 2, owner = NULL, last_error = ?1, updated_at = ?4
                 WHERE id = ?2 AND status = 3 AND lease = ?3"
            ),
            // the write transaction holds the whole file: no row lock of its own
            saga_lock: format!("SELECT status, grp FROM {ts} WHERE id = ?1"),
            step_rows: format!(
                "SELECT position, state FROM {tss} WHERE saga_id = ?1 AND grp = ?2"
            ),
            // ?7 now
            step_record: format!(
                "INSERT INTO {tss} (saga_id, position, step, grp, state, output, updated_at)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)
                 ON CONFLICT (saga_id, position) DO UPDATE SET state = excluded.state,
                    output = COALESCE(excluded.output, output), updated_at = excluded.updated_at"
            ),
            // ?5 now
            saga_set: format!(
                "UPDATE {ts} SET status = ?1, grp = ?2, reason = COALESCE(?3, reason),
                    version = version + 1, updated_at = ?5
                 WHERE id = ?4"
            ),
            saga_steps: format!(
                "SELECT {SAGA_STEP_COLUMNS} FROM {tss} WHERE saga_id = ?1 ORDER BY position"
            ),
            // ?5 now
            reset_failed: format!(
                "UPDATE {t} SET status = 0, attempts = 0, snoozes = 0, next_run_at = ?3, owner = NULL,
                    updated_at = ?3
                 WHERE event_type = ?1 AND status = 2 AND substr(biz_key, 1, length(?2)) = ?2"
            ),
            // ?5 now
            saga_log_insert: format!(
                "INSERT INTO {tsa} (saga_id, action, operator, reason, at)
                 VALUES (?1, ?2, ?3, ?4, ?5)"
            ),
            saga_log: format!(
                "SELECT saga_id, action, operator, reason, at FROM {tsa}
                 WHERE saga_id = ?1 ORDER BY id"
            ),
            saga_by_id: format!("SELECT {SAGA_COLUMNS} FROM {ts} WHERE id = ?1"),
            // ?1 after id ?2 name ?3 status ?4 older than (ms) ?5 limit ?6 now ?7 started
            // older than (ms)
            sagas: format!(
                "SELECT {SAGA_COLUMNS} FROM {ts}
                 WHERE id > ?1 AND (?2 IS NULL OR name = ?2) AND (?3 IS NULL OR status = ?3)
                   AND (?4 IS NULL OR updated_at < ?6 - ?4)
                   AND (?7 IS NULL OR created_at < ?6 - ?7)
                 ORDER BY id LIMIT CAST(?5 AS INTEGER)"
            ),
            saga_backlog: format!(
                "SELECT name, status, COUNT(*), ?1 - MIN(updated_at)
                 FROM {ts} WHERE status IN (0, 1, 4) GROUP BY name, status"
            ),
            purge_barrier: format!(
                "DELETE FROM {tb} WHERE (gid, branch_id, op) IN (
                    SELECT gid, branch_id, op FROM {tb} WHERE created_at < ?1
                    ORDER BY created_at LIMIT CAST(?2 AS INTEGER))"
            ),
            purge_finished: format!(
                "DELETE FROM {t} WHERE id IN (
                    SELECT id FROM {t} WHERE status = ?3 AND updated_at < ?1
                    ORDER BY updated_at, id LIMIT CAST(?2 AS INTEGER))"
            ),
            purge_audit: [&ta, &tqa].map(|log| {
                format!(
                    "DELETE FROM {log} WHERE id IN (
                        SELECT id FROM {log} WHERE at < ?1 ORDER BY id LIMIT CAST(?2 AS INTEGER))"
                )
            }),
            purge_event_types: format!(
                "DELETE FROM {th} WHERE event_type IN (
                    SELECT event_type FROM {th} WHERE last_seen_at < ?1
                    ORDER BY last_seen_at LIMIT CAST(?2 AS INTEGER))"
            ),
            delete_finished: format!("DELETE FROM {t} WHERE id = ?1 AND status = ?2"),
        }
    }

    /// Which priority levels of one event type have a due task: ?1 event type, ?2 now;
    /// one column per level, the level or NULL. One index dive per level (a few
    /// microseconds each), so the claim walks only the levels that have work: almost
    /// always one, none on an idle poll. The last six columns are a limited type's
    /// gate (`Gate`): its concurrency, rate limit and window, its running tasks (when
    /// it has a concurrency limit) and its starts in the window (when it has a rate),
    /// whether it is partitioned (then the counts are left to its claim: see
    /// `partitions`), NULLs when it is not limited; read in the claim's write
    /// transaction: no other claim counts in between.
    fn due_levels(t: &str, tq: &str, tr: &str) -> String {
        let probes = (0..PRIORITY_LEVELS)
            .map(|level| {
                format!(
                    "(SELECT {level} FROM {t}
                      WHERE status = 0 AND event_type = ?1 AND priority = {level}
                        AND next_run_at <= ?2
                        AND NOT EXISTS (SELECT 1 FROM {tq} WHERE event_type = ?1 AND paused = 1)
                      LIMIT 1)"
                )
            })
            .collect::<Vec<_>>()
            .join(", ");
        format!(
            "SELECT {probes}, q.concurrency, q.rate_limit, q.rate_window_ms,
                CASE WHEN q.concurrency > 0 AND q.partitioned = 0 THEN (
                    SELECT count(*) FROM {t} WHERE status = 3 AND event_type = ?1) END,
                CASE WHEN q.rate_limit > 0 AND q.partitioned = 0 THEN (
                    SELECT COALESCE(SUM(starts), 0) FROM {tr}
                    WHERE event_type = ?1 AND at > ?2 - q.rate_window_ms) END,
                q.partitioned
             FROM (SELECT 1) LEFT JOIN {tq} q
                ON q.event_type = ?1 AND (q.concurrency > 0 OR q.rate_limit > 0)"
        )
    }

    /// The batch claim of the `walks` that [`due_levels`](Self::due_levels) found: each
    /// `(i, level)` walks the due rows of event type `?{i + 4}` at that priority level in
    /// the `(status, event_type, priority, next_run_at, id)` index, up to the limit; the
    /// walks are merged by `(priority, next_run_at, id)`, so a claim never sorts the
    /// backlog (one walk, the common case, needs no merge at all). ?1 owner, ?2 now, ?3
    /// limit, ?4.. the event types. The whole statement runs under `BEGIN IMMEDIATE`, so
    /// no other writer can claim the rows in between.
    pub fn claim_batch(&self, walks: &[(usize, usize)]) -> String {
        let t = &self.table;
        let walk = |&(i, level): &(usize, usize)| {
            format!(
                "SELECT id, priority, next_run_at FROM {t}
                 WHERE status = 0 AND event_type = ?{} AND priority = {level}
                   AND next_run_at <= ?2
                 ORDER BY next_run_at, id LIMIT CAST(?3 AS INTEGER)",
                i + 4
            )
        };
        let picked = match walks {
            [one] => walk(one),
            _ => {
                let walks = walks
                    .iter()
                    .map(|w| format!("SELECT id, priority, next_run_at FROM ({})", walk(w)))
                    .collect::<Vec<_>>()
                    .join(" UNION ALL ");
                format!("{walks} ORDER BY priority, next_run_at, id LIMIT CAST(?3 AS INTEGER)")
            }
        };
        format!(
            "UPDATE {t} SET status = 3, owner = ?1, attempts = attempts + 1,
                lease = lease + 1, updated_at = ?2
             WHERE id IN (SELECT id FROM ({picked}))
             RETURNING {COLUMNS}"
        )
    }
}

/// The schema's history, one numbered SQL file per migration (`migrations/`; see
/// [`schema`](backstop_core::driver::schema) for their form). A new migration is a new
/// file and a line here.
const MIGRATIONS: &[MigrationFile] = schema::migration_files!("../migrations");

#[cfg(test)]
mod tests {
    use super::Sql;
    use rusqlite::{Connection, StatementStatus};

    /// No statement of this module binds a bare `LIMIT ?n` (see the module docs).
    #[test]
    fn bound_limits_do_not_recompile() {
        let source = include_str!("sql.rs");
        let bare: Vec<&str> = source
            .lines()
            .filter(|l| {
                l.split("LIMIT ?")
                    .skip(1)
                    .any(|rest| rest.starts_with(|c: char| c.is_ascii_digit()))
            })
            .collect();
        assert!(bare.is_empty(), "bare bound limits: {bare:?}");

        // and the claim, bound again with other values, runs without being compiled again
        let c = Connection::open_in_memory().expect("open");
        let sql = Sql::new("t");
        for m in &sql.schema.migrations().expect("the migration files") {
            for s in &m.statements {
                c.execute_batch(s).expect("migrate");
            }
        }
        c.execute_batch(
            "INSERT INTO t (event_type, biz_key, payload, max_attempts, retry_strategy,
                retry_interval_ms, retry_max_interval_ms, next_run_at, created_at, updated_at)
             VALUES ('a', 'k1', '{}', 3, 'fixed', 1, 1, 0, 0, 0),
                    ('a', 'k2', '{}', 3, 'fixed', 1, 1, 0, 0, 0),
                    ('a', 'k3', '{}', 3, 'fixed', 1, 1, 0, 0, 0)",
        )
        .expect("insert");
        let mut claim = c.prepare(&sql.claim_batch(&[(0, 2)])).expect("prepare");
        // three due tasks: claims of 1, 2 and 5 take 1, 2 and none
        for (now, limit, taken) in [(10_i64, 1_i64, 1), (11, 2, 2), (12, 5, 0)] {
            let ids = claim
                .query_map(rusqlite::params!["me", now, limit, "a"], |r| {
                    r.get::<_, i64>(0)
                })
                .expect("claim")
                .collect::<rusqlite::Result<Vec<_>>>()
                .expect("rows");
            assert_eq!(ids.len(), taken);
        }
        assert_eq!(claim.get_status(StatementStatus::RePrepare), 0);
    }
}
