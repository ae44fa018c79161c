-- name: dedup rules
--
-- Dedup rules: the unique key gains `dedup_slot`, 0 for the task that
-- holds the key; a finished task's key is freed by moving it to a slot of
-- its own (its id) when a new enqueue's rule allows a new task.

ALTER TABLE {tasks}
    ADD COLUMN dedup_slot BIGINT NOT NULL DEFAULT 0,
    DROP INDEX uk_event_biz,
    ADD UNIQUE KEY uk_event_biz (biz_key, event_type, dedup_slot);
