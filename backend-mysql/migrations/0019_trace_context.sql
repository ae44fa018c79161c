-- name: trace context
--
-- The W3C traceparent of the span that enqueued a task (NewTask::traceparent; captured
-- with the feature otel), so each attempt's span links to it. NULL when none; not
-- indexed.

ALTER TABLE {tasks} ADD COLUMN traceparent VARCHAR(55) NULL;
