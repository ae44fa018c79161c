-- name: per-task timeout
--
-- A task's own attempt timeout (NULL: its event type's).

ALTER TABLE {tasks} ADD COLUMN IF NOT EXISTS timeout_ms BIGINT;
