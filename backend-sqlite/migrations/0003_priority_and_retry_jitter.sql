-- name: priority and retry jitter
--
-- Priorities and retry jitter; the claim index gains the priority.

ALTER TABLE {tasks} ADD COLUMN priority INTEGER NOT NULL DEFAULT 2;

ALTER TABLE {tasks} ADD COLUMN retry_jitter_pct INTEGER NOT NULL DEFAULT 0;

DROP INDEX IF EXISTS "{table}_ix_claim_type";

CREATE INDEX "{table}_ix_claim_type"
    ON {tasks} (status, event_type, priority, next_run_at, id);
