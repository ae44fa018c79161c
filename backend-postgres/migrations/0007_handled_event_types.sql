-- name: handled event types
--
-- The event types the fleet's engines have handlers for.

CREATE TABLE IF NOT EXISTS {handlers} (
    event_type    VARCHAR(64) PRIMARY KEY,
    first_seen_at TIMESTAMPTZ NOT NULL,
    last_seen_at  TIMESTAMPTZ NOT NULL
);
