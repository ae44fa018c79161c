-- name: per-task timeout
--
-- A task's own attempt timeout (NULL: its event type's).

ALTER TABLE {tasks} ADD COLUMN timeout_ms BIGINT NULL;
