-- name: status index only where it serves
--
-- The index (status, next_run_at, id) served one statement, the oldest-due
-- gauge, and changed at every claim and every mark of every task (InnoDB has
-- no partial index: a row moves in it from pending to running to succeeded).
-- The gauge now reads the claim index a group at a time (a loose index scan:
-- one dive per event type and priority level with pending tasks).

ALTER TABLE {tasks} DROP INDEX ix_claim;
