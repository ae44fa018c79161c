-- name: order keys
--
-- Order keys: tasks of one key run one at a time, in order. Status 5
-- (waiting) for the tasks queued behind the key's current one; a table
-- of keys with work left (the write lock serializes their releases).

ALTER TABLE {tasks} ADD COLUMN order_key TEXT;

ALTER TABLE {tasks} ADD COLUMN order_block INTEGER NOT NULL DEFAULT 1;

CREATE INDEX "{table}_ix_order" ON {tasks} (order_key, status, id)
    WHERE order_key IS NOT NULL;

CREATE TABLE IF NOT EXISTS {keys} (order_key TEXT PRIMARY KEY) WITHOUT ROWID;
