-- name: handled event types
--
-- The event types the fleet's engines have handlers for.

CREATE TABLE IF NOT EXISTS {handlers} (
    event_type    TEXT    PRIMARY KEY,
    first_seen_at INTEGER NOT NULL,
    last_seen_at  INTEGER NOT NULL
) WITHOUT ROWID;
