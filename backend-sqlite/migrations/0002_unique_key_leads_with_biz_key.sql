-- name: unique key leads with biz_key
--
-- The unique key leads with biz_key, so it also finds every task of a
-- business key (an operator's search) with no index of its own. Rebuilt
-- unconditionally: a table made just before versioning may already have
-- this order, and the rebuild is then only its cost.

DROP INDEX IF EXISTS "{table}_uk_event_biz";

CREATE UNIQUE INDEX "{table}_uk_event_biz" ON {tasks} (biz_key, event_type);
