-- name: rate limits
--
-- A queue's rate limit (TaskStore::set_queue with QueueChange::Rate): at most
-- rate_limit of its tasks start in any rate_window_ms (0: no limit). Such a type is
-- claimed as a concurrency-limited one is (the batch claim, under the queue row's
-- lock); each of its claims adds a row to the ledger {rate} (the type, when, how many
-- started), whose rows of the last window are the starts it counts, and from which the
-- claim deletes the rows the window has passed.

ALTER TABLE {queues} ADD COLUMN rate_limit INTEGER NOT NULL DEFAULT 0;
ALTER TABLE {queues} ADD COLUMN rate_window_ms INTEGER NOT NULL DEFAULT 0;

CREATE TABLE IF NOT EXISTS {rate} (
    id         INTEGER PRIMARY KEY AUTOINCREMENT,
    event_type TEXT    NOT NULL,
    at         INTEGER NOT NULL,
    starts     INTEGER NOT NULL
);

CREATE INDEX IF NOT EXISTS "{table}_rate_ix" ON {rate} (event_type, at);
