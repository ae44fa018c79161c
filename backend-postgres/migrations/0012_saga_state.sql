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
    id         BIGSERIAL    PRIMARY KEY,
    name       VARCHAR(48)  NOT NULL,
    saga_key   VARCHAR(64)  NOT NULL,
    status     SMALLINT     NOT NULL,
    grp        INTEGER      NOT NULL,
    input      TEXT         NOT NULL,
    reason     TEXT,
    version    BIGINT       NOT NULL,
    created_at TIMESTAMPTZ  NOT NULL,
    updated_at TIMESTAMPTZ  NOT NULL,
    CONSTRAINT "{table}_saga_key" UNIQUE (name, saga_key)
);

CREATE INDEX IF NOT EXISTS "{table}_saga_status_ix" ON {saga} (status, updated_at);
