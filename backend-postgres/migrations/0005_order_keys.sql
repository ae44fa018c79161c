-- name: order keys
--
-- Order keys: tasks of one key run one at a time, in order. Status 5
-- (waiting) for the tasks queued behind the key's current one; a table
-- of keys with work left, whose rows are the keys' locks.

ALTER TABLE {tasks}
    ADD COLUMN IF NOT EXISTS order_key VARCHAR(128),
    ADD COLUMN IF NOT EXISTS order_block SMALLINT NOT NULL DEFAULT 1;

CREATE INDEX IF NOT EXISTS "{table}_ix_order"
    ON {tasks} (order_key, status, id) WHERE order_key IS NOT NULL;

CREATE TABLE IF NOT EXISTS {keys} (
    order_key VARCHAR(128) PRIMARY KEY
);
