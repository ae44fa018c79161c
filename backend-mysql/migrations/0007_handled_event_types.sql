-- name: handled event types
--
-- The event types the fleet's engines have handlers for.

CREATE TABLE IF NOT EXISTS {handlers} (
    event_type    VARCHAR(64) NOT NULL,
    first_seen_at DATETIME(3) NOT NULL,
    last_seen_at  DATETIME(3) NOT NULL,
    PRIMARY KEY (event_type)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;
