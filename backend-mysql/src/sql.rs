//! The SQL of the MySQL / MariaDB backend, built once per store for its (validated) table.
//!
//! Every time is the server's `NOW(3)` (the session time zone is UTC); delays are bound as
//! microseconds. Single-table `UPDATE` assignments are evaluated left to right in MySQL, so
//! an assignment that reads a column comes before the one that changes it.

use backstop_core::driver::schema::{self, version_table, MigrationFile, SchemaSql};
use backstop_core::driver::InsertTexts;
use backstop_core::driver::{
    AUDIT_COLUMNS, BARRIER_COLUMNS, COLUMNS, COLUMN_COUNT, QUEUE_AUDIT_COLUMNS, SAGA_COLUMNS,
    SAGA_STEP_COLUMNS,
};
use backstop_core::limits::is_event_type_char;
use backstop_core::limits::MAX_BATCH;

/// How a list statement spells what differs (see `list_sql`); an age is bound in µs.
pub(crate) const LIST: backstop_core::driver::ListDialect = backstop_core::driver::ListDialect {
    placeholder: |_| "?".to_owned(),
    contains: |p| format!("LOCATE({p}, last_error) > 0"),
    has_tag: |p| format!("LOCATE(CONCAT(',', {p}, ','), tags) > 0"),
    // a JSON string equal to the value, byte for byte (MariaDB's JSON functions answer
    // in the connection's collation): a number or an object never is
    metadata_is: |k, p| {
        format!(
            "JSON_TYPE(JSON_EXTRACT(metadata, '$.\"{k}\"')) = 'STRING' \
             AND CAST(JSON_UNQUOTE(JSON_EXTRACT(metadata, '$.\"{k}\"')) AS BINARY) \
             = CAST({p} AS BINARY)"
        )
    },
    // the table's binary collation: byte for byte
    starts_with: |p| format!("LOCATE({p}, biz_key) = 1"),
    older_than: |p| format!("updated_at < NOW(3) - INTERVAL {p} MICROSECOND"),
    // as on PostgreSQL: `ORDER BY id LIMIT n` walked the primary key through every
    // succeeded row (an error search took seconds at 10M rows)
    backlog_order: "id + 0",
    age: |d| backstop_core::driver::Value::BigInt(Some(crate::conn::micros(d))),
};

/// The status a reset task takes: pending, or waiting (in line again) with an order key.
const RESET_STATUS: &str = "CASE WHEN order_key IS NULL THEN 0 ELSE 5 END";

/// The priority levels (see `backstop_core::Priority`): a claim walks each.
pub(crate) const PRIORITY_LEVELS: usize = 5;
/// Every priority level, as a mask of levels ([`Sql::walks`]).
pub(crate) const ALL_LEVELS: u32 = (1 << PRIORITY_LEVELS) - 1;

pub(crate) struct Sql {
    table: String,
    /// The order keys table.
    keys_table: String,
    /// The queues table (`set_queue`): claims pass a paused type by.
    queues_table: String,
    /// The rate limits' ledger of claims.
    rate_table: String,
    pub lock_name: String,
    /// The version table's statements and the migrations.
    pub schema: SchemaSql,
    pub insert: String,
    /// The batch enqueue's multi-row inserts (MariaDB), by row count.
    pub insert_rows: InsertTexts,
    /// The same for rows of plain tasks only (`plain_tuple`).
    pub insert_rows_plain: Option<InsertTexts>,
    /// event_type, biz_key: the task holding the key, locked: id, status, age ms.
    pub existing: String,
    /// id: free the key a finished task holds.
    pub release_key: String,
    /// payload, moves (0/1), delay ms, run at, id: replace a pending task's payload (and due time).
    pub replace_payload: String,
    /// id, lease: a running task's success, on the handler's transaction.
    pub complete: String,
    /// owner, id: the claim of a task never claimed before, on the caller's transaction
    /// (`claim_in`).
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
    /// event type: upsert into the handlers table.
    pub types_register: String,
    /// The handlers table.
    pub types_list: String,
    /// order key: insert it into the keys table if missing, and lock its row.
    pub key_insert: String,
    /// order key: a task in the way (pending, running, parked and blocking).
    pub key_blocker: String,
    /// order key: the first waiting task, locked.
    pub key_next: String,
    /// id: waiting → pending.
    pub key_promote: String,
    /// order key.
    pub key_drop: String,
    /// after, limit: keys in order.
    pub keys_page: String,
    pub claim_by_id: String,
    pub get: String,
    pub seen_dead: String,
    pub mark_retry: String,
    pub mark_fail: String,
    /// reason, id, lease: running → cancelled.
    pub mark_cancel: String,
    /// max, delay µs, max, max, error, max, max, id, lease: a snooze (see MarkAction).
    pub mark_snooze: String,
    pub release: String,
    pub manual_reset: String,
    /// delay ms, delay ms, due at, due at, payload, id: a pending or waiting task's due
    /// time and payload.
    pub edit: String,
    /// id: pending or running → cancelled.
    pub cancel: String,
    /// id: the row, locked (for a delete).
    pub get_for_update: String,
    /// id.
    pub delete: String,
    /// id, two expected status codes.
    pub retry: String,
    /// task id, action, operator, reason.
    pub audit_insert: String,
    /// task id.
    pub audit_log: String,
    pub status_of: String,
    /// `SELECT … FROM table` of a list; see `LIST`.
    /// The task table, quoted (and qualified) as every statement here writes it.
    pub tasks: String,
    pub list_select: String,
    pub stats_counts: String,
    /// `stats_counts` without the succeeded rows, through the status indexes.
    pub backlog_counts: String,
    pub stats_oldest_due: String,
    /// bucket ms, window µs, cap, window µs, cap.
    pub throughput: String,
    /// status, older µs, limit.
    pub purge_finished: String,
    /// older µs, limit: the tasks' audit log, then the queues' log.
    pub purge_audit: [String; 2],
    /// older µs, limit.
    pub purge_event_types: String,
    /// output, id, lease: a running task's output, fenced.
    pub set_output: String,
    /// consumer, message_id: one row inserted, or none for a duplicate.
    pub inbox_insert: String,
    /// older µs, limit.
    pub inbox_purge: String,
    /// event type, paused, concurrency, rate limit, window ms (NULL: 0): the queue's row,
    /// unless it has one.
    pub queue_insert: String,
    /// paused, concurrency, rate limit, window ms (NULL: as they are), event type, then
    /// the four again: the queue's settings, where they differ.
    pub queue_update: String,
    /// event type: a limited type's queue row, locked until the claim's transaction
    /// ends: its concurrency, rate limit and window ms (no row if paused or not limited).
    pub limit_lock: String,
    /// event type: on a Galera cluster, the write before `limit_lock` that makes the
    /// claims of two nodes conflict (migration 22).
    pub limit_turn: String,
    /// event type: as `limit_lock`, without the lock (an unlocked hand-over's).
    pub gate_read: String,
    /// event type: how many of its tasks run.
    pub running_count: String,
    /// event type, window µs: its starts in the window (the ledger's sum).
    pub rate_used: String,
    /// event type, starts: a claim's row in the ledger, now.
    pub rate_record: String,
    /// event type, window µs: its ledger rows the window has passed, deleted.
    pub rate_trim: String,
    /// A partitioned limited type's claim.
    pub partitions: crate::partitions::PartitionSql,
    /// action, operator, reason, event type: an entry of the queues' log, at the time
    /// the queue's row says it changed.
    pub queue_audit: String,
    /// event type: the queue's row.
    pub queue_get: String,
    /// Every queue's row.
    pub queues: String,
    /// event type: its log, oldest first.
    pub queue_log: String,
}

/// The condition a claim by id of the rows of task table `t` adds: the task's type is
/// neither paused nor limited (one primary-key read of the queues table `tq`).
fn not_paused(t: &str, tq: &str) -> String {
    format!(
        "NOT EXISTS (SELECT 1 FROM {tq} WHERE {tq}.event_type = {t}.event_type
            AND ({tq}.paused = 1 OR {tq}.concurrency > 0 OR {tq}.rate_limit > 0))"
    )
}

/// Most rows of one of the batch enqueue's multi-row inserts.
const INSERT_ROWS_MAX: usize = 1024;
/// The multi-row inserts' row counts: powers of two below this, then its multiples
/// (core's `InsertTexts::stepped`).
const INSERT_ROWS_STEP: usize = 64;

mod claim;
mod plain;
pub use claim::LockWait;
use plain::plain_tuple;

impl Sql {
    /// `table` must have passed `limits::check_identifier`.
    pub fn new(table: &str) -> Sql {
        let t = format!("`{table}`");
        let ti = format!("`{table}_inbox`");
        let ta = format!("`{table}_audit`");
        let tv = format!("`{}`", version_table(table));
        let tk = format!("`{table}_keys`");
        let insert_tuple = "(?, ?, ?, 0, ?, ?, ?, ?,
                    GREATEST(NOW(3) + INTERVAL (? * 1000) MICROSECOND, COALESCE(?, NOW(3))), 0,
                    NOW(3), NOW(3), ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)";
        let insert_columns = "event_type, biz_key, payload, attempts, max_attempts,
                retry_strategy, retry_interval_ms, retry_max_interval_ms, next_run_at,
                lease, created_at, updated_at, priority, retry_jitter_pct, status, order_key,
                order_block, timeout_ms, tags, metadata, traceparent, partition_key";
        let th = format!("`{table}_handlers`");
        let tb = format!("`{table}_barrier`");
        let ts = format!("`{table}_saga`");
        let tss = format!("`{table}_saga_step`");
        let tsa = format!("`{table}_saga_audit`");
        let tq = format!("`{table}_queues`");
        let tqa = format!("`{table}_queue_audit`");
        let tr = format!("`{table}_rate`");
        let running = not_paused(&t, &tq);
        let fenced = "WHERE id = ? AND status = 3 AND lease = ?";
        // event type: a limited type's queue row, as its claims read it (core's `Gate`)
        let gate_read = format!(
            "SELECT CAST(concurrency AS SIGNED), CAST(rate_limit AS SIGNED),
                CAST(rate_window_ms AS SIGNED), CAST(partitioned AS SIGNED) FROM {tq}
             WHERE event_type = ? AND paused = 0 AND (concurrency > 0 OR rate_limit > 0)"
        );
        Sql {
            table: t.clone(),
            keys_table: tk.clone(),
            queues_table: tq.clone(),
            rate_table: tr.clone(),
            lock_name: format!("backstop:migrate:{table}"),
            schema: SchemaSql {
                setup: format!(
                    "CREATE TABLE IF NOT EXISTS {tv} (
                        version    INT          NOT NULL,
                        name       VARCHAR(200) NOT NULL,
                        applied_at DATETIME(3)  NOT NULL,
                        PRIMARY KEY (version)
                     ) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin"
                ),
                read: format!("SELECT CAST(version AS SIGNED) FROM {tv}"),
                record: format!(
                    "INSERT INTO {tv} (version, name, applied_at) VALUES (?, ?, NOW(3))"
                ),
                script_record: format!(
                    "INSERT INTO {tv} (version, name, applied_at) VALUES ({{version}}, '{{name}}', NOW(3))"
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
            // core's insert_params: event_type, biz_key, payload, max_attempts, strategy,
            // interval, max, delay ms (zero with a run_at), run_at (NULL: use the delay; a
            // time already past: now), priority, jitter %, status, order_key, order_block,
            // timeout ms, tags, metadata, traceparent, partition key
            insert: format!("INSERT INTO {t} ({insert_columns}) VALUES {insert_tuple}"),
            // The batch enqueue's multi-row inserts, one per row count (1, 2, 4 … 32,
            // then 64, 128, 192 … 1024: a batch of 1 000 in three inserts, not the seven
            // of powers of two up to 256; 4 producers 0.815× → 0.88× the raw insert, 1
            // producer 0.80× → 0.79×, medians of twelve rounds), every value bound
            // (MariaDB's RETURNING; MySQL has none). Not an INSERT …
            // SELECT: that is a bulk insert, which holds the table's AUTO-INC lock to its
            // end (innodb_autoinc_lock_mode 1, the default), so batches of shared keys
            // deadlock on it (error 1467). IGNORE skips a row whose key is held, as
            // PostgreSQL's ON CONFLICT DO NOTHING does, instead of failing all of them;
            // the other errors it would turn into warnings cannot happen to checked input
            // (every text within its column, nothing NULL that may not be).
            insert_rows: InsertTexts::stepped(INSERT_ROWS_MAX, INSERT_ROWS_STEP, {
                let t = t.clone();
                move |n| {
                    let rows = vec![insert_tuple; n].join(", ");
                    format!("INSERT IGNORE INTO {t} ({insert_columns}) VALUES {rows} RETURNING id")
                }
            }),
            // Rows of plain tasks: their settings as constants, four values bound a row
            // instead of nineteen and no due-time expression (MariaDB spends per row on
            // each bound value and expression: 0.63× the raw insert with 1 producer
            // against 0.8× with constants)
            insert_rows_plain: plain_tuple().map(|(columns, tuple)| {
                let t = t.clone();
                InsertTexts::stepped(INSERT_ROWS_MAX, INSERT_ROWS_STEP, move |n| {
                    let rows = vec![tuple.as_str(); n].join(", ");
                    format!("INSERT IGNORE INTO {t} ({columns}) VALUES {rows} RETURNING id")
                })
            }),
            // A locking read sees the latest committed row whatever the isolation level.
            existing: format!(
                "SELECT id, CAST(status AS SIGNED),
                    CAST(TIMESTAMPDIFF(MICROSECOND, created_at, NOW(3)) DIV 1000 AS SIGNED)
                 FROM {t} WHERE event_type = ? AND biz_key = ? AND dedup_slot = 0
                 FOR UPDATE"
            ),
            release_key: format!("UPDATE {t} SET dedup_slot = id WHERE id = ? AND dedup_slot = 0"),
            // An upsert, not INSERT IGNORE: a duplicate takes the row's exclusive lock at
            // once (INSERT IGNORE takes a shared one, and two waiters upgrading it
            // deadlock), so this one statement is the key's lock. It changes the row
            // (`takes`): on Galera only a change orders two nodes' takes (migration 24).
            key_insert: format!(
                "INSERT INTO {tk} (order_key) VALUES (?)
                 ON DUPLICATE KEY UPDATE takes = takes + 1"
            ),
            types_register: format!(
                "INSERT INTO {th} (event_type, first_seen_at, last_seen_at)
                 VALUES (?, NOW(3), NOW(3))
                 ON DUPLICATE KEY UPDATE last_seen_at = NOW(3)"
            ),
            types_list: format!("SELECT event_type, first_seen_at, last_seen_at FROM {th}"),
            queue_insert: format!(
                "INSERT IGNORE INTO {tq} (event_type, paused, concurrency, rate_limit,
                    rate_window_ms, partitioned, updated_at)
                 VALUES (?, COALESCE(?, 0), COALESCE(?, 0), COALESCE(?, 0), COALESCE(?, 0),
                    COALESCE(?, 0), NOW(3))"
            ),
            queue_update: format!(
                "UPDATE {tq} SET paused = COALESCE(?, paused),
                    concurrency = COALESCE(?, concurrency), rate_limit = COALESCE(?, rate_limit),
                    rate_window_ms = COALESCE(?, rate_window_ms),
                    partitioned = COALESCE(?, partitioned), updated_at = NOW(3)
                 WHERE event_type = ?
                   AND (paused <> COALESCE(?, paused) OR concurrency <> COALESCE(?, concurrency)
                    OR rate_limit <> COALESCE(?, rate_limit)
                    OR rate_window_ms <> COALESCE(?, rate_window_ms)
                    OR partitioned <> COALESCE(?, partitioned))"
            ),
            limit_lock: format!("{gate_read} FOR UPDATE"),
            limit_turn: format!(
                "UPDATE {tq} SET turns = turns + 1
                 WHERE event_type = ? AND paused = 0 AND (concurrency > 0 OR rate_limit > 0)"
            ),
            gate_read: gate_read.clone(),
            rate_used: format!(
                "SELECT CAST(COALESCE(SUM(starts), 0) AS SIGNED) FROM {tr}
                 WHERE event_type = ? AND at > NOW(3) - INTERVAL ? MICROSECOND"
            ),
            rate_record: format!(
                "INSERT INTO {tr} (event_type, at, starts, partition_key) VALUES (?, NOW(3), ?, ?)"
            ),
            partitions: crate::partitions::PartitionSql::new(&t, &tr),
            rate_trim: format!(
                "DELETE FROM {tr} WHERE event_type = ? AND at <= NOW(3) - INTERVAL ? MICROSECOND"
            ),
            running_count: format!(
                "SELECT COUNT(*) FROM {t} FORCE INDEX (ix_claim_type)
                 WHERE status = 3 AND event_type = ?"
            ),
            // at the change's own time (NOW(3) is each statement's)
            queue_audit: format!(
                "INSERT INTO {tqa} (event_type, action, operator, reason, at)
                 SELECT event_type, ?, ?, ?, updated_at FROM {tq} WHERE event_type = ?"
            ),
            queue_get: format!(
                "SELECT event_type, CAST(paused AS SIGNED), updated_at,
                    CAST(concurrency AS SIGNED), CAST(rate_limit AS SIGNED),
                    CAST(rate_window_ms AS SIGNED), CAST(partitioned AS SIGNED) FROM {tq}
                 WHERE event_type = ?"
            ),
            queues: format!(
                "SELECT event_type, CAST(paused AS SIGNED), updated_at,
                    CAST(concurrency AS SIGNED), CAST(rate_limit AS SIGNED),
                    CAST(rate_window_ms AS SIGNED), CAST(partitioned AS SIGNED) FROM {tq}"
            ),
            queue_log: format!(
                "SELECT {QUEUE_AUDIT_COLUMNS} FROM {tqa} WHERE event_type = ? ORDER BY id"
            ),
            complete: format!(
                "UPDATE {t} SET status = 1, last_error = NULL, updated_at = NOW(3) {fenced}"
            ),
            barrier_insert: format!(
                "INSERT IGNORE INTO {tb} (gid, branch_id, op, reason, created_at)
                 VALUES (?, ?, ?, ?, NOW(3))"
            ),
            // a locking read: the row a racing call committed after this transaction's
            // snapshot is what its insert just found
            barrier_read: format!(
                "SELECT CAST(CASE WHEN reason = op THEN 1 ELSE 0 END AS SIGNED) FROM {tb}
                 WHERE gid = ? AND branch_id = ? AND op = ? LOCK IN SHARE MODE"
            ),
            claim_in: format!(
                "UPDATE {t} SET status = 3, owner = ?, attempts = attempts + 1, lease = 1,
                    updated_at = NOW(3)
                 WHERE id = ? AND status = 0 AND lease = 0 AND next_run_at <= NOW(3)
                   AND {running}"
            ),
            key_blocker: format!(
                "SELECT id FROM {t}
                 WHERE order_key = ?
                   AND (order_status IN (0, 3) OR (order_status = 2 AND order_block = 1))
                 LIMIT 1 LOCK IN SHARE MODE"
            ),
            key_next: format!(
                "SELECT id FROM {t} WHERE order_key = ? AND order_status = 5
                 ORDER BY id LIMIT 1 FOR UPDATE"
            ),
            key_promote: format!(
                "UPDATE {t} SET status = 0, next_run_at = GREATEST(next_run_at, NOW(3)),
                    updated_at = NOW(3)
                 WHERE id = ? AND status = 5"
            ),
            key_drop: format!("DELETE FROM {tk} WHERE order_key = ?"),
            keys_page: format!(
                "SELECT order_key FROM {tk} WHERE order_key > ? ORDER BY order_key LIMIT ?"
            ),
            // payload, moves, delay ms, run at, id
            replace_payload: format!(
                "UPDATE {t} SET payload = ?,
                    next_run_at = CASE WHEN ? = 1
                        THEN GREATEST(NOW(3) + INTERVAL (? * 1000) MICROSECOND, COALESCE(?, NOW(3)))
                        ELSE next_run_at END,
                    updated_at = NOW(3)
                 WHERE id = ? AND status = 0"
            ),
            // owner, id
            claim_by_id: format!(
                "UPDATE {t} SET status = 3, owner = ?, attempts = attempts + 1,
                    lease = lease + 1, updated_at = NOW(3)
                 WHERE id = ? AND status = 0 AND next_run_at <= NOW(3) AND {running}"
            ),
            get: format!("SELECT {COLUMNS} FROM {t} WHERE id = ?"),
            // older_than µs, limit. A consistent (non-locking) read: see `recycle_dead`.
            seen_dead: format!(
                "SELECT COUNT(*) FROM (SELECT 1 FROM {t} FORCE INDEX (ix_updated)
                    WHERE status = 3 AND updated_at < NOW(3) - INTERVAL ? MICROSECOND
                    LIMIT ?) AS d"
            ),
            // delay µs, error, id, lease
            mark_retry: format!(
                "UPDATE {t} SET
                    next_run_at = CASE WHEN attempts < max_attempts
                        THEN NOW(3) + INTERVAL ? MICROSECOND ELSE next_run_at END,
                    status = CASE WHEN attempts < max_attempts THEN 0 ELSE 2 END,
                    owner = NULL, last_error = ?, updated_at = NOW(3)
                 {fenced}"
            ),
            // error, id, lease
            mark_fail: format!(
                "UPDATE {t} SET status = 2, owner = NULL, last_error = ?, updated_at = NOW(3)
                 {fenced}"
            ),
            mark_cancel: format!(
                "UPDATE {t} SET status = 4, owner = NULL, last_error = ?, updated_at = NOW(3)
                 {fenced}"
            ),
            // assignments run left to right on the row as changed so far: `attempts`
            // and `snoozes` are set after the columns whose conditions read them
            mark_snooze: format!(
                "UPDATE {t} SET
                    next_run_at = CASE WHEN snoozes < ? OR attempts < max_attempts
                        THEN NOW(3) + INTERVAL ? MICROSECOND ELSE next_run_at END,
                    status = CASE WHEN snoozes < ? OR attempts < max_attempts THEN 0 ELSE 2 END,
                    last_error = CASE WHEN snoozes < ? THEN last_error ELSE ? END,
                    attempts = CASE WHEN snoozes < ? THEN GREATEST(attempts - 1, 0)
                        ELSE attempts END,
                    snoozes = CASE WHEN snoozes < ? THEN snoozes + 1 ELSE snoozes END,
                    owner = NULL, updated_at = NOW(3)
                 {fenced}"
            ),
            release: format!(
                "UPDATE {t} SET status = 0, owner = NULL, attempts = GREATEST(attempts - 1, 0),
                    updated_at = NOW(3)
                 {fenced}"
            ),
            // id, stuck_after µs
            manual_reset: format!(
                "UPDATE {t} SET status = {RESET_STATUS}, attempts = 0, snoozes = 0, next_run_at = NOW(3),
                    owner = NULL, updated_at = NOW(3)
                 WHERE id = ? AND (status = 2
                    OR (status = 3 AND updated_at < NOW(3) - INTERVAL ? MICROSECOND))"
            ),
            status_of: format!("SELECT status FROM {t} WHERE id = ?"),
            edit: format!(
                "UPDATE {t} SET
                    next_run_at = CASE WHEN ? IS NOT NULL THEN NOW(3) + INTERVAL (? * 1000) MICROSECOND
                        WHEN ? IS NOT NULL THEN GREATEST(?, NOW(3)) ELSE next_run_at END,
                    payload = COALESCE(?, payload), updated_at = NOW(3)
                 WHERE id = ? AND status IN (0, 5)"
            ),
            cancel: format!(
                "UPDATE {t} SET status = 4, lease = lease + 1, updated_at = NOW(3)
                 WHERE id = ? AND status IN (0, 3, 5)"
            ),
            get_for_update: format!("SELECT {COLUMNS} FROM {t} WHERE id = ? FOR UPDATE"),
            delete: format!("DELETE FROM {t} WHERE id = ?"),
            retry: format!(
                "UPDATE {t} SET status = {RESET_STATUS}, attempts = 0, snoozes = 0, next_run_at = NOW(3),
                    owner = NULL, updated_at = NOW(3)
                 WHERE id = ? AND status IN (?, ?)"
            ),
            audit_insert: format!(
                "INSERT INTO {ta} (task_id, action, operator, reason, at) VALUES (?, ?, ?, ?, NOW(3))"
            ),
            audit_log: format!("SELECT {AUDIT_COLUMNS} FROM {ta} WHERE task_id = ? ORDER BY id"),
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
            throughput: format!(
                "SELECT event_type, status,
                    CAST(FLOOR(TIMESTAMPDIFF(MICROSECOND, updated_at, NOW(3)) / 1000 / ?) AS SIGNED),
                    COUNT(*)
                 FROM ((SELECT event_type, status, updated_at FROM {t}
                        WHERE status = 1 AND updated_at >= NOW(3) - INTERVAL ? MICROSECOND
                        ORDER BY updated_at DESC LIMIT ?)
                       UNION ALL
                       (SELECT event_type, status, updated_at FROM {t}
                        WHERE status = 2 AND updated_at >= NOW(3) - INTERVAL ? MICROSECOND
                        ORDER BY updated_at DESC LIMIT ?)) AS f
                 GROUP BY 1, 2, 3"
            ),
            // the oldest due task of each (event type, priority level), one dive each
            // (`Using index for group-by`: the claim index leads with the grouped
            // columns), then the oldest of those
            stats_oldest_due: format!(
                "SELECT CAST(TIMESTAMPDIFF(MICROSECOND, MIN(oldest), NOW(3)) / 1000 AS SIGNED)
                 FROM (SELECT MIN(next_run_at) AS oldest FROM {t} FORCE INDEX (ix_claim_type)
                       WHERE status = 0 AND next_run_at <= NOW(3)
                       GROUP BY status, event_type, priority) AS due"
            ),
            // older µs, limit
            barrier_records: format!(
                "SELECT {BARRIER_COLUMNS} FROM {tb} WHERE gid = ?
                 ORDER BY created_at, branch_id, op LIMIT {MAX_BATCH}"
            ),
            saga_insert: format!(
                "INSERT IGNORE INTO {ts} (name, saga_key, status, grp, input, version,
                    created_at, updated_at)
                 VALUES (?, ?, 0, 0, ?, 0, NOW(3), NOW(3))"
            ),
            // a locking read: the row a racing start committed after this transaction's
            // snapshot is what its insert just found
            saga_read: format!(
                "SELECT id, CAST(status AS SIGNED) FROM {ts} WHERE name = ? AND saga_key = ?
                 LOCK IN SHARE MODE"
            ),
            saga_get: format!("SELECT {SAGA_COLUMNS} FROM {ts} WHERE name = ? AND saga_key = ?"),
            saga_lock: format!(
                "SELECT CAST(status AS SIGNED), CAST(grp AS SIGNED) FROM {ts} WHERE id = ?
                 FOR UPDATE"
            ),
            // a locking read: the rows a report committed after this transaction's
            // snapshot are what the saga row's lock waited for
            step_rows: format!(
                "SELECT CAST(position AS SIGNED), CAST(state AS SIGNED) FROM {tss}
                 WHERE saga_id = ? AND grp = ? FOR UPDATE"
            ),
            step_record: format!(
                "INSERT INTO {tss} (saga_id, position, step, grp, state, output, updated_at)
                 VALUES (?, ?, ?, ?, ?, ?, NOW(3))
                 ON DUPLICATE KEY UPDATE state = VALUES(state),
                    output = COALESCE(VALUES(output), output), updated_at = NOW(3)"
            ),
            saga_set: format!(
                "UPDATE {ts} SET status = ?, grp = ?, reason = COALESCE(?, reason),
                    version = version + 1, updated_at = NOW(3)
                 WHERE id = ?"
            ),
            saga_steps: format!(
                "SELECT {SAGA_STEP_COLUMNS} FROM {tss} WHERE saga_id = ? ORDER BY position"
            ),
            reset_failed: format!(
                "UPDATE {t} SET status = 0, attempts = 0, snoozes = 0, next_run_at = NOW(3), owner = NULL,
                    updated_at = NOW(3)
                 WHERE event_type = ? AND status = 2 AND LOCATE(?, biz_key) = 1"
            ),
            saga_log_insert: format!(
                "INSERT INTO {tsa} (saga_id, action, operator, reason, at)
                 VALUES (?, ?, ?, ?, NOW(3))"
            ),
            saga_log: format!(
                "SELECT saga_id, action, operator, reason, at FROM {tsa}
                 WHERE saga_id = ? ORDER BY id"
            ),
            saga_by_id: format!("SELECT {SAGA_COLUMNS} FROM {ts} WHERE id = ?"),
            // after id, name twice, status twice, older than (µs) twice, started older than
            // (µs) twice, limit
            sagas: format!(
                "SELECT {SAGA_COLUMNS} FROM {ts}
                 WHERE id > ? AND (? IS NULL OR name = ?) AND (? IS NULL OR status = ?)
                   AND (? IS NULL OR updated_at < NOW(3) - INTERVAL ? MICROSECOND)
                   AND (? IS NULL OR created_at < NOW(3) - INTERVAL ? MICROSECOND)
                 ORDER BY id LIMIT ?"
            ),
            saga_backlog: format!(
                "SELECT name, status, COUNT(*),
                        CAST(TIMESTAMPDIFF(MICROSECOND, MIN(updated_at), NOW(3)) / 1000 AS SIGNED)
                 FROM {ts} WHERE status IN (0, 1, 4) GROUP BY name, status"
            ),
            purge_barrier: format!(
                "DELETE FROM {tb} WHERE created_at < NOW(3) - INTERVAL ? MICROSECOND
                 ORDER BY created_at LIMIT ?"
            ),
            purge_finished: format!(
                "DELETE FROM {t} WHERE status = ? AND updated_at < NOW(3) - INTERVAL ? MICROSECOND
                 ORDER BY updated_at, id LIMIT ?"
            ),
            purge_audit: [&ta, &tqa].map(|log| {
                format!(
                    "DELETE FROM {log} WHERE at < NOW(3) - INTERVAL ? MICROSECOND
                     ORDER BY id LIMIT ?"
                )
            }),
            set_output: format!("UPDATE {t} SET output = ? {fenced}"),
            purge_event_types: format!(
                "DELETE FROM {th} WHERE last_seen_at < NOW(3) - INTERVAL ? MICROSECOND
                 ORDER BY last_seen_at LIMIT ?"
            ),
            // INSERT IGNORE only ignores the duplicate key here: the lengths were checked
            inbox_insert: format!(
                "INSERT IGNORE INTO {ti} (consumer, message_id, processed_at) VALUES (?, ?, NOW(3))"
            ),
            inbox_purge: format!(
                "DELETE FROM {ti} WHERE processed_at < NOW(3) - INTERVAL ? MICROSECOND
                 ORDER BY processed_at LIMIT ?"
            ),
        }
    }

    fn placeholders(n: usize) -> String {
        vec!["?"; n].join(", ")
    }

    /// Insert-or-lock `n` order keys (sorted), as `key_insert` does for one: each row's
    /// exclusive lock, taken in key order (see `KeysRelease`), each row changed.
    pub fn keys_upsert(&self, n: usize) -> String {
        format!(
            "INSERT INTO {} (order_key) VALUES {}
             ON DUPLICATE KEY UPDATE takes = takes + 1",
            self.keys_table,
            vec!["(?)"; n].join(", ")
        )
    }

    /// The keys of the tasks in the way among `n` keys (a locking read, as `key_blocker`).
    pub fn keys_blockers(&self, n: usize) -> String {
        format!(
            "SELECT order_key FROM {} FORCE INDEX (ix_order)
             WHERE order_key IN ({})
               AND (order_status IN (0, 3) OR (order_status = 2 AND order_block = 1))
             LOCK IN SHARE MODE",
            self.table,
            Self::placeholders(n)
        )
    }

    /// `(key, first waiting task)` of each of `n` keys, the task locked.
    pub fn keys_next(&self, n: usize) -> String {
        let one = format!(
            "(SELECT order_key, id FROM {} WHERE order_key = ? AND order_status = 5
              ORDER BY id LIMIT 1 FOR UPDATE)",
            self.table
        );
        vec![one; n].join(" UNION ALL ")
    }

    /// `n` waiting tasks → pending (as `key_promote`).
    pub fn keys_promote(&self, n: usize) -> String {
        format!(
            "UPDATE {} SET status = 0, next_run_at = GREATEST(next_run_at, NOW(3)),
                updated_at = NOW(3)
             WHERE id IN ({}) AND status = 5",
            self.table,
            Self::placeholders(n)
        )
    }

    /// Delete `n` keys from the keys table.
    pub fn keys_drop(&self, n: usize) -> String {
        format!(
            "DELETE FROM {} WHERE order_key IN ({})",
            self.keys_table,
            Self::placeholders(n)
        )
    }

    /// Recycle dead rows the sweep holds: back to pending (`to_pending`) or failed (no
    /// attempts left). Status and age re-checked on the row: older_than µs, ids….
    pub fn recycle(&self, to_pending: bool, n: usize) -> String {
        let t = &self.table;
        let (status, why) = if to_pending {
            (0, "")
        } else {
            (2, "; no attempts left")
        };
        format!(
            "UPDATE {t} SET
                last_error = CONCAT('attempt ', attempts, ' of ', max_attempts,
                    ' died: owner ', COALESCE(owner, '?'), ' stopped heartbeating{why}'),
                status = {status},
                owner = NULL,
                updated_at = NOW(3)
             WHERE status = 3 AND updated_at < NOW(3) - INTERVAL ? MICROSECOND
               AND id IN ({})",
            Self::placeholders(n)
        )
    }

    /// The update of the rows the claim's read locked: owner, token, updated_at (the
    /// read's `NOW(3)`), ids….
    pub fn claim_ids(&self, n: usize) -> String {
        let t = &self.table;
        let ids = Self::placeholders(n);
        format!(
            "UPDATE {t} SET status = 3, owner = ?, attempts = attempts + 1, lease = lease + 1,
                claim_token = ?, updated_at = ?
             WHERE id IN ({ids}) AND status = 0"
        )
    }

    /// `lease = CASE id WHEN ? THEN ? … END`: binds id, lease per task.
    fn lease_case(n: usize) -> String {
        format!("CASE id {} END", vec!["WHEN ? THEN ?"; n].join(" "))
    }

    /// Mark many running tasks succeeded in one statement, tagging the rows it changed:
    /// token, ids…, (id, lease)….
    pub fn mark_success_many(&self, n: usize) -> String {
        let t = &self.table;
        format!(
            "UPDATE {t} SET status = 1, last_error = NULL, updated_at = NOW(3), claim_token = ?
             WHERE id IN ({}) AND status = 3 AND lease = {}",
            Self::placeholders(n),
            Self::lease_case(n)
        )
    }

    /// Refresh many leases in one statement: ids…, (id, lease)….
    pub fn heartbeat_many(&self, n: usize) -> String {
        let t = &self.table;
        format!(
            "UPDATE {t} SET updated_at = NOW(3)
             WHERE id IN ({}) AND status = 3 AND lease = {}",
            Self::placeholders(n),
            Self::lease_case(n)
        )
    }

    /// Lock the rows among `n` that run under the named leases, passing over those
    /// another transaction holds (`SKIP LOCKED`): ids…, (id, lease)….
    pub fn lock_leases(&self, n: usize) -> String {
        let t = &self.table;
        format!(
            "SELECT id FROM {t} WHERE id IN ({}) AND status = 3 AND lease = {}
             FOR UPDATE SKIP LOCKED",
            Self::placeholders(n),
            Self::lease_case(n)
        )
    }

    /// Refresh `updated_at` of `n` rows this transaction has locked: ids….
    pub fn touch_rows(&self, n: usize) -> String {
        let t = &self.table;
        format!(
            "UPDATE {t} SET updated_at = NOW(3) WHERE id IN ({})",
            Self::placeholders(n)
        )
    }

    /// These rows, if they carry this token: token, ids… (through the primary key).
    pub fn rows_with_token(&self, n: usize) -> String {
        let t = &self.table;
        format!(
            "SELECT {COLUMNS} FROM {t} WHERE claim_token = ? AND id IN ({})",
            Self::placeholders(n)
        )
    }

    /// Which of these rows carry this token: token, ids… (through the primary key: the
    /// token has no index).
    pub fn ids_with_token(&self, n: usize) -> String {
        let t = &self.table;
        format!(
            "SELECT id FROM {t} WHERE claim_token = ? AND id IN ({})",
            Self::placeholders(n)
        )
    }

    /// How many of these rows are of an event type, how many tasks of the type run (as
    /// [`running_count`](Self::running_count) counts them), and the priority levels with
    /// a due task of the type (a mask, bit `l` for level `l`, for [`walks`](Self::walks):
    /// one loose index scan of the claim index), in one round trip: event type, ids…,
    /// event type, event type.
    pub fn of_type(&self, n: usize) -> String {
        let t = &self.table;
        format!(
            "SELECT (SELECT COUNT(*) FROM {t} WHERE event_type = ? AND id IN ({})),
                    (SELECT COUNT(*) FROM {t} FORCE INDEX (ix_claim_type)
                     WHERE status = 3 AND event_type = ?),
                    (SELECT CAST(COALESCE(BIT_OR(1 << priority), 0) AS SIGNED) FROM (
                       SELECT priority, MIN(next_run_at) FROM {t} FORCE INDEX (ix_claim_type)
                       WHERE status = 0 AND event_type = ? AND next_run_at <= NOW(3)
                       GROUP BY status, event_type, priority) AS due)",
            Self::placeholders(n)
        )
    }

    /// The current lease of those of these rows that are running: ids….
    pub fn running_leases(&self, n: usize) -> String {
        let t = &self.table;
        format!(
            "SELECT id, lease FROM {t} WHERE status = 3 AND id IN ({})",
            Self::placeholders(n)
        )
    }

    /// Delete listed tasks still in a status: status, ids….
    pub fn delete_finished(&self, n: usize) -> String {
        let t = &self.table;
        let ids = Self::placeholders(n);
        format!("DELETE FROM {t} WHERE status = ? AND id IN ({ids})")
    }
}

/// The schema's history, one numbered SQL file per migration (`migrations/`; see
/// [`schema`](backstop_core::driver::schema) for their form). A new migration is a new
/// file and a line here.
const MIGRATIONS: &[MigrationFile] = schema::migration_files!("../migrations");
