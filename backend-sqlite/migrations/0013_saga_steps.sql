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
    saga_id    INTEGER NOT NULL,
    position   INTEGER NOT NULL,
    step       TEXT    NOT NULL,
    grp        INTEGER NOT NULL,
    state      INTEGER NOT NULL,
    output     TEXT,
    updated_at INTEGER NOT NULL,
    PRIMARY KEY (saga_id, position)
) WITHOUT ROWID;

CREATE TABLE IF NOT EXISTS {saga_audit} (
    id       INTEGER PRIMARY KEY AUTOINCREMENT,
    saga_id  INTEGER NOT NULL,
    action   TEXT    NOT NULL,
    operator TEXT    NOT NULL,
    reason   TEXT    NOT NULL,
    at       INTEGER NOT NULL
);

CREATE INDEX IF NOT EXISTS "{table}_saga_audit_ix" ON {saga_audit} (saga_id, id);
