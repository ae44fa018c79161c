-- name: claim token unindexed
--
-- The claim token tags the rows a statement changed, and is read back
-- (rarely: a mark some of whose rows did not apply) only among the ids
-- the statement named, through the primary key. Its index changed with
-- every claim and every mark, a write per task that cost the plain drain
-- about 10%.

ALTER TABLE {tasks} DROP INDEX ix_claim_token;
