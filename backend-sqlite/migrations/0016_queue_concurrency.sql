-- name: queue concurrency limits
--
-- A queue's global concurrency limit (TaskStore::set_queue with
-- QueueChange::Concurrency): at most that many of its tasks run at once across
-- every instance; 0 is no limit. A limited type is claimed only by the batch
-- claim, which locks the queue's row, then counts the type's running tasks and
-- claims at most the room left. The operators' log's actions grow to name the
-- limit they set.

ALTER TABLE {queues} ADD COLUMN concurrency INTEGER NOT NULL DEFAULT 0;
