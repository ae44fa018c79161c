-- name: claim turns
--
-- A limited type's claims take turns on its queue row. On one server its row lock
-- does that; on a Galera cluster a row lock holds on its own node only, and only a
-- change to the row orders two transactions of two nodes (the one that commits second
-- fails certification, error 1213, and is run again). So on Galera every claim under a
-- limit first adds one to its queue row's `turns`.

ALTER TABLE {queues} ADD COLUMN turns BIGINT NOT NULL DEFAULT 0;
