-- name: queue settings
--
-- One row per event type an operator has set something for
-- (TaskStore::set_queue): whether its tasks are paused (1: no claim takes
-- them; enqueues go on). A type without a row runs. Every claim reads its
-- type's row by the primary key, in the statement that claims. And the
-- operators' log of those changes: each pause and resume, by whom and why.

CREATE TABLE IF NOT EXISTS {queues} (
    event_type TEXT    PRIMARY KEY,
    paused     INTEGER NOT NULL DEFAULT 0,
    updated_at INTEGER NOT NULL
) WITHOUT ROWID;

CREATE TABLE IF NOT EXISTS {queue_audit} (
    id         INTEGER PRIMARY KEY AUTOINCREMENT,
    event_type TEXT    NOT NULL,
    action     TEXT    NOT NULL,
    operator   TEXT    NOT NULL,
    reason     TEXT    NOT NULL,
    at         INTEGER NOT NULL
);

CREATE INDEX IF NOT EXISTS "{table}_queue_audit_ix" ON {queue_audit} (event_type, id);
