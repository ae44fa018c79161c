-- name: saga steps
--
-- One row per step of a saga that has finished its action or its
-- compensation, keyed by the saga and the step's position in its
-- definition: its name, its group, its state (1 done, 2 refused,
-- 3 compensated, 4 action failed, 5 compensation failed) and its
-- action's output (JSON), which later steps read. Written with the
-- step's task's completion and the next steps' tasks, in one
-- transaction, under the saga row's lock.

CREATE TABLE IF NOT EXISTS {saga_step} (
    saga_id    BIGINT       NOT NULL,
    position   INTEGER      NOT NULL,
    step       VARCHAR(48)  NOT NULL,
    grp        INTEGER      NOT NULL,
    state      SMALLINT     NOT NULL,
    output     TEXT,
    updated_at TIMESTAMPTZ  NOT NULL,
    PRIMARY KEY (saga_id, position)
);
