-- name: queue settings
--
-- One row per event type an operator has set something for
-- (TaskStore::set_queue): whether its tasks are paused (1: no claim takes
-- them; enqueues go on). A type without a row runs. Every claim reads its
-- type's row by the primary key, in the statement that claims. And the
-- operators' log of those changes: each pause and resume, by whom and why.

CREATE TABLE IF NOT EXISTS {queues} (
    event_type VARCHAR(64)  NOT NULL,
    paused     SMALLINT     NOT NULL DEFAULT 0,
    updated_at DATETIME(3)  NOT NULL,
    PRIMARY KEY (event_type)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;

CREATE TABLE IF NOT EXISTS {queue_audit} (
    id         BIGINT       NOT NULL AUTO_INCREMENT,
    event_type VARCHAR(64)  NOT NULL,
    action     VARCHAR(16)  NOT NULL,
    operator   VARCHAR(64)  NOT NULL,
    reason     TEXT         NOT NULL,
    at         DATETIME(3)  NOT NULL,
    PRIMARY KEY (id),
    KEY ix_queue (event_type, id)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;
