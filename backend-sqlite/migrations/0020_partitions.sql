-- name: partitions
--
-- Limits per partition (QueueChange::Partition): a task's partition_key
-- (NewTask::partition; '' for none) names the partition its queue's limits count it
-- in when the queue is partitioned; the rate ledger's rows carry the key of the
-- claims they count. A partitioned claim finds the keys with a due task one index
-- dive each and walks each key's due tasks in claim order, on the index below.
-- Tasks without a key are not in the index (most tasks: it costs them nothing); their
-- partition is walked on the claim index.

ALTER TABLE {tasks} ADD COLUMN partition_key TEXT NOT NULL DEFAULT '';
ALTER TABLE {queues} ADD COLUMN partitioned INTEGER NOT NULL DEFAULT 0;
ALTER TABLE {rate} ADD COLUMN partition_key TEXT NOT NULL DEFAULT '';

CREATE INDEX IF NOT EXISTS "{table}_partition_ix"
    ON {tasks} (event_type, partition_key, priority, next_run_at, id)
    WHERE status = 0 AND partition_key <> '';
