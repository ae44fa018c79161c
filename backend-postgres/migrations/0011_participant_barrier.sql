-- name: participant barrier
--
-- One row per call of a branch of a global transaction (a saga step's
-- action or compensation, a TCC try, confirm or cancel), written on the
-- participant's own transaction: the unique key is what refuses a second
-- delivery, and the row a compensation writes for its forward call is
-- what refuses that call when it arrives late. reason: the operation
-- that wrote the row.

CREATE TABLE IF NOT EXISTS {barrier} (
    gid        VARCHAR(128) NOT NULL,
    branch_id  VARCHAR(128) NOT NULL,
    op         VARCHAR(16)  NOT NULL,
    reason     VARCHAR(16)  NOT NULL,
    created_at TIMESTAMPTZ  NOT NULL,
    PRIMARY KEY (gid, branch_id, op)
);

CREATE INDEX IF NOT EXISTS "{table}_barrier_ix" ON {barrier} (created_at);
