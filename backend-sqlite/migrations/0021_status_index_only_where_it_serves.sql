-- name: status index only where it serves
--
-- The index (status, next_run_at, id) served one statement, the oldest-due
-- gauge, and changed at every claim and every mark of every task (a row
-- moves from pending to running to succeeded). A partial index of the pending
-- rows serves the gauge and changes only when a row leaves or enters pending:
-- a claim of 24 tasks took 200 µs with the old index and 116 µs with this one.

DROP INDEX IF EXISTS "{table}_ix_claim";

CREATE INDEX IF NOT EXISTS "{table}_ix_oldest_due" ON {tasks} (next_run_at) WHERE status = 0;
