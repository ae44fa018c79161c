-- name: order index untouched by tasks without a key
--
-- InnoDB has no partial index: `ix_order (order_key, status, id)` held an
-- entry for every task, keyed or not, and every claim and mark rewrote it
-- (a status change), a sixth index write per change that cost the plain
-- drain 15–25%. The index now reads a virtual column that is NULL for a
-- task without an order key, so its entry never changes; for a keyed task
-- it is the status, and the key queries read it instead.

ALTER TABLE {tasks}
    ADD COLUMN order_status TINYINT
        AS (IF(order_key IS NULL, NULL, status)) VIRTUAL,
    DROP INDEX ix_order,
    ADD KEY ix_order (order_key, order_status, id);
