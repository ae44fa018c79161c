-- name: priority and retry jitter
--
-- Priorities and retry jitter. Adding a column with a constant default
-- rewrites nothing; the claim index gains the priority (built while the
-- migration holds the table).

ALTER TABLE {tasks}
    ADD COLUMN IF NOT EXISTS priority SMALLINT NOT NULL DEFAULT 2,
    ADD COLUMN IF NOT EXISTS retry_jitter_pct SMALLINT NOT NULL DEFAULT 0;

CREATE INDEX IF NOT EXISTS "{table}_ix_claim_pri"
    ON {tasks} (event_type, priority, next_run_at, id) WHERE status = 0;

DROP INDEX IF EXISTS "{schema}"."{table}_ix_claim";
