-- name: partitions
--
-- Limits per partition (QueueChange::Partition): a task's partition_key
-- (NewTask::partition; '' for none) names the partition its queue's limits count it
-- in when the queue is partitioned; the rate ledger's rows carry the key of the
-- claims they count. A partitioned claim finds the keys with a due task one index
-- dive each and walks each key's due tasks in claim order, on the index below.
-- InnoDB has no partial index: as the order index (migration 9), the index reads a
-- virtual column, partition_status, that is NULL for a task without a key, so claims
-- and marks of those tasks (most tasks) never rewrite its entry; for a keyed task it is
-- the status. The tasks without a key are walked on the claim index.

ALTER TABLE {tasks} ADD COLUMN partition_key VARCHAR(128) NOT NULL DEFAULT '',
    ADD COLUMN partition_status TINYINT
        AS (IF(partition_key = '', NULL, status)) VIRTUAL,
    ADD KEY ix_partition (partition_status, event_type, partition_key, priority,
        next_run_at, id);
ALTER TABLE {queues} ADD COLUMN partitioned SMALLINT NOT NULL DEFAULT 0;
ALTER TABLE {rate} ADD COLUMN partition_key VARCHAR(128) NOT NULL DEFAULT '';
