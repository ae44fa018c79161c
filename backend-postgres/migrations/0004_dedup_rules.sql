-- name: dedup rules
--
-- Dedup rules: the unique key gains `dedup_slot`, 0 for the task that
-- holds the key; a finished task's key is freed by moving it to a slot of
-- its own (its id) when a new enqueue's rule allows a new task.

ALTER TABLE {tasks}
    ADD COLUMN IF NOT EXISTS dedup_slot BIGINT NOT NULL DEFAULT 0,
    DROP CONSTRAINT "{table}_uk_event_biz",
    ADD CONSTRAINT "{table}_uk_event_biz"
        UNIQUE (biz_key, event_type, dedup_slot);
