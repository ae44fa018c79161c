-- name: key lock writes its row
--
-- An order key's row in the keys table is the key's lock: each enqueue and each
-- release of the key first upserts it. On one server the upsert's row lock does that
-- even when it changes nothing. On a Galera cluster a lock holds on its own node only,
-- and an upsert that changes nothing writes nothing to replicate: two releases of one
-- key on two nodes both promoted a task (two tasks of the key ran at once). So the
-- upsert adds one to the row's `takes`: a change that is replicated (with each
-- statement, for a store spread over the nodes) and certified like any other.

ALTER TABLE {keys} ADD COLUMN takes BIGINT NOT NULL DEFAULT 0;
