-- name: unique key leads with biz_key
--
-- The unique key leads with biz_key, so it also finds every task of a
-- business key (an operator's search) with no index of its own. Rebuilt
-- unconditionally (one atomic ALTER): a table made just before
-- versioning may already have this order, and the rebuild is then only
-- its cost.

ALTER TABLE {tasks} DROP INDEX uk_event_biz,
    ADD UNIQUE KEY uk_event_biz (biz_key, event_type);
