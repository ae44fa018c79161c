-- name: snoozes
--
-- How many times a handler snoozed the task (HandlerError::snooze): a snooze gives
-- its attempt back, up to a bound, and counts here.

ALTER TABLE {tasks} ADD COLUMN IF NOT EXISTS snoozes INTEGER NOT NULL DEFAULT 0;
