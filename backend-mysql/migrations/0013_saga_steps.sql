-- name: saga steps and operators log
--
-- One row per step of a saga that has finished its action or its
-- compensation, keyed by the saga and the step's position in its
-- definition: its name, its group, its state (1 done, 2 refused,
-- 3 compensated, 4 action failed, 5 compensation failed) and its
-- action's output (JSON), which later steps read. Written with the
-- step's task's completion and the next steps' tasks, in one
-- transaction, under the saga row's lock. And the operators' log of
-- sagas: each retry, compensation and resolution, by whom and why.

CREATE TABLE IF NOT EXISTS {saga_step} (
    saga_id    BIGINT       NOT NULL,
    position   INT          NOT NULL,
    step       VARCHAR(48)  NOT NULL,
    grp        INT          NOT NULL,
    state      SMALLINT     NOT NULL,
    output     MEDIUMTEXT   NULL,
    updated_at DATETIME(3)  NOT NULL,
    PRIMARY KEY (saga_id, position)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;

CREATE TABLE IF NOT EXISTS {saga_audit} (
    id       BIGINT       NOT NULL AUTO_INCREMENT,
    saga_id  BIGINT       NOT NULL,
    action   VARCHAR(16)  NOT NULL,
    operator VARCHAR(64)  NOT NULL,
    reason   TEXT         NOT NULL,
    at       DATETIME(3)  NOT NULL,
    PRIMARY KEY (id),
    KEY ix_saga (saga_id, id)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;
