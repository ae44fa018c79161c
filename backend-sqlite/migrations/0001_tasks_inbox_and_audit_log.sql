-- name: tasks, inbox and audit log
--
-- The schema before versioning, so a table made then is adopted as it
-- stands.

CREATE TABLE IF NOT EXISTS {tasks} (
    id                    INTEGER PRIMARY KEY AUTOINCREMENT,
    event_type            TEXT    NOT NULL,
    biz_key               TEXT    NOT NULL,
    payload               TEXT    NOT NULL,
    status                INTEGER NOT NULL DEFAULT 0,
    attempts              INTEGER NOT NULL DEFAULT 0,
    max_attempts          INTEGER NOT NULL,
    retry_strategy        TEXT    NOT NULL,
    retry_interval_ms     INTEGER NOT NULL,
    retry_max_interval_ms INTEGER NOT NULL,
    next_run_at           INTEGER NOT NULL,
    owner                 TEXT,
    lease                 INTEGER NOT NULL DEFAULT 0,
    last_error            TEXT,
    created_at            INTEGER NOT NULL,
    updated_at            INTEGER NOT NULL
);

CREATE UNIQUE INDEX IF NOT EXISTS "{table}_uk_event_biz" ON {tasks} (event_type, biz_key);

CREATE INDEX IF NOT EXISTS "{table}_ix_claim" ON {tasks} (status, next_run_at, id);

CREATE INDEX IF NOT EXISTS "{table}_ix_claim_type" ON {tasks} (status, event_type, next_run_at, id);

CREATE INDEX IF NOT EXISTS "{table}_ix_updated" ON {tasks} (status, updated_at);

CREATE TABLE IF NOT EXISTS {inbox} (
    consumer     TEXT    NOT NULL,
    message_id   TEXT    NOT NULL,
    processed_at INTEGER NOT NULL,
    PRIMARY KEY (consumer, message_id)
) WITHOUT ROWID;

CREATE INDEX IF NOT EXISTS "{table}_inbox_ix" ON {inbox} (processed_at);

CREATE TABLE IF NOT EXISTS {audit} (
    id       INTEGER PRIMARY KEY AUTOINCREMENT,
    task_id  INTEGER NOT NULL,
    action   TEXT    NOT NULL,
    operator TEXT    NOT NULL,
    reason   TEXT    NOT NULL,
    at       INTEGER NOT NULL
);

CREATE INDEX IF NOT EXISTS "{table}_audit_ix" ON {audit} (task_id, id);
