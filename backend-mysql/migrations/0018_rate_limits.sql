-- name: rate limits
--
-- A queue's rate limit (TaskStore::set_queue with QueueChange::Rate): at most
-- rate_limit of its tasks start in any rate_window_ms (0: no limit). Such a type is
-- claimed as a concurrency-limited one is (the batch claim, under the queue row's
-- lock); each of its claims adds a row to the ledger {rate} (the type, when, how many
-- started), whose rows of the last window are the starts it counts, and from which the
-- claim deletes the rows the window has passed.

ALTER TABLE {queues} ADD COLUMN rate_limit INT NOT NULL DEFAULT 0,
    ADD COLUMN rate_window_ms BIGINT NOT NULL DEFAULT 0;

CREATE TABLE IF NOT EXISTS {rate} (
    id         BIGINT       NOT NULL AUTO_INCREMENT,
    event_type VARCHAR(64)  NOT NULL,
    at         DATETIME(3)  NOT NULL,
    starts     INT          NOT NULL,
    PRIMARY KEY (id),
    KEY ix_rate (event_type, at)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;
