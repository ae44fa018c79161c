-- name: oldest-due index out of reach of claims
--
-- The oldest-due index, `(next_run_at, id) WHERE status = 0`, matched a
-- claim's `ORDER BY next_run_at, id`: on a generic plan, with statistics
-- saying every row has the one event type and priority there are, the
-- planner walked it and filtered out the other priority levels' walks
-- row by row (a claim read the whole backlog). The index that reads the
-- oldest due task now has a predicate no claim implies (`dedup_slot >= 0`,
-- true of every row), so claims can only use the claim index.

CREATE INDEX IF NOT EXISTS "{table}_ix_oldest_due"
    ON {tasks} (next_run_at) WHERE status = 0 AND dedup_slot >= 0;

DROP INDEX IF EXISTS "{schema}"."{table}_ix_due";
