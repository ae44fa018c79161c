-- name: stored key status
--
-- The order and partition indexes (migrations 9 and 20) read columns computed from
-- the status. As VIRTUAL columns their index entries are purged by opening the table
-- at the SQL layer (InnoDB's open_purge_table) to compute the old values; on MariaDB
-- 10.11 under a Galera cluster that purge was caught looping there, faulting in
-- anonymous memory at ~500 MB/s until the node was killed (perf samples, a run of the
-- conformance suite). STORED columns keep their values in the row, so purge never
-- opens the table; they cost a byte a row. A generated column cannot change from
-- VIRTUAL to STORED in place: each is dropped and added again, which rebuilds the
-- task table (writes to it wait for the rebuild). Running it twice is harmless.

ALTER TABLE {tasks}
    DROP INDEX ix_order,
    DROP COLUMN order_status,
    ADD COLUMN order_status TINYINT AS (IF(order_key IS NULL, NULL, status)) STORED,
    ADD KEY ix_order (order_key, order_status, id),
    DROP INDEX ix_partition,
    DROP COLUMN partition_status,
    ADD COLUMN partition_status TINYINT AS (IF(partition_key = '', NULL, status)) STORED,
    ADD KEY ix_partition (partition_status, event_type, partition_key, priority,
        next_run_at, id);
