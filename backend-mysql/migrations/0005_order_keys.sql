-- name: order keys
--
-- Order keys: tasks of one key run one at a time, in order. Status 5
-- (waiting) for the tasks queued behind the key's current one; a table
-- of keys with work left, whose rows are the keys' locks.

ALTER TABLE {tasks}
    ADD COLUMN order_key VARCHAR(128) NULL,
    ADD COLUMN order_block TINYINT NOT NULL DEFAULT 1,
    ADD KEY ix_order (order_key, status, id);

CREATE TABLE IF NOT EXISTS {keys} (
    order_key VARCHAR(128) NOT NULL,
    PRIMARY KEY (order_key)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;
