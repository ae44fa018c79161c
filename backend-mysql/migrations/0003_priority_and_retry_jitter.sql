-- name: priority and retry jitter
--
-- Priorities and retry jitter; the claim index gains the priority. One
-- ALTER: the columns are added in place, the index is rebuilt.

ALTER TABLE {tasks}
    ADD COLUMN priority TINYINT NOT NULL DEFAULT 2,
    ADD COLUMN retry_jitter_pct TINYINT NOT NULL DEFAULT 0,
    DROP INDEX ix_claim_type,
    ADD KEY ix_claim_type (status, event_type, priority, next_run_at, id);
