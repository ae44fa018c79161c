-- name: saga state
--
-- One row per saga (SagaDef::start): its definition name and key (one
-- saga per name and key: the unique key is what makes a start
-- idempotent), its status code (0 running, 1 compensating, 2 completed,
-- 3 compensated, 4 parked), the group of steps it is at, its input
-- (JSON), why it compensates or is parked, and a version every change
-- bumps. Its steps are tasks of the event type saga:<name>. The status
-- index serves the search for sagas stuck in one status.

CREATE TABLE IF NOT EXISTS {saga} (
    id         BIGINT       NOT NULL AUTO_INCREMENT PRIMARY KEY,
    name       VARCHAR(48)  NOT NULL,
    saga_key   VARCHAR(64)  NOT NULL,
    status     SMALLINT     NOT NULL,
    grp        INT          NOT NULL,
    input      MEDIUMTEXT   NOT NULL,
    reason     TEXT         NULL,
    version    BIGINT       NOT NULL,
    created_at DATETIME(3)  NOT NULL,
    updated_at DATETIME(3)  NOT NULL,
    UNIQUE KEY uq_saga (name, saga_key),
    KEY ix_status (status, updated_at)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;
