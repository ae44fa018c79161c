-- name: tasks, inbox and audit log
--
-- The schema before versioning, so a table made then is adopted as it
-- stands. utf8mb4_bin: keys compare byte for byte, as on the other
-- backends. The claim indexes match the claim's ORDER BY exactly, so no
-- filesort locks rows it would then skip.

CREATE TABLE IF NOT EXISTS {tasks} (
    id                    BIGINT       NOT NULL AUTO_INCREMENT,
    event_type            VARCHAR(64)  NOT NULL,
    biz_key               VARCHAR(128) NOT NULL,
    payload               MEDIUMTEXT   NOT NULL,
    status                TINYINT      NOT NULL DEFAULT 0,
    attempts              INT          NOT NULL DEFAULT 0,
    max_attempts          INT          NOT NULL,
    retry_strategy        VARCHAR(16)  NOT NULL,
    retry_interval_ms     BIGINT       NOT NULL,
    retry_max_interval_ms BIGINT       NOT NULL,
    next_run_at           DATETIME(3)  NOT NULL,
    owner                 VARCHAR(64)  NULL,
    lease                 BIGINT       NOT NULL DEFAULT 0,
    claim_token           BIGINT       NULL,
    last_error            TEXT         NULL,
    created_at            DATETIME(3)  NOT NULL,
    updated_at            DATETIME(3)  NOT NULL,
    PRIMARY KEY (id),
    UNIQUE KEY uk_event_biz (event_type, biz_key),
    KEY ix_claim_type (status, event_type, next_run_at, id),
    KEY ix_claim (status, next_run_at, id),
    KEY ix_updated (status, updated_at, id),
    KEY ix_claim_token (claim_token)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;

CREATE TABLE IF NOT EXISTS {inbox} (
    consumer     VARCHAR(128) NOT NULL,
    message_id   VARCHAR(191) NOT NULL,
    processed_at DATETIME(3)  NOT NULL,
    PRIMARY KEY (consumer, message_id),
    KEY ix_processed (processed_at)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;

CREATE TABLE IF NOT EXISTS {audit} (
    id       BIGINT       NOT NULL AUTO_INCREMENT,
    task_id  BIGINT       NOT NULL,
    action   VARCHAR(16)  NOT NULL,
    operator VARCHAR(64)  NOT NULL,
    reason   TEXT         NOT NULL,
    at       DATETIME(3)  NOT NULL,
    PRIMARY KEY (id),
    KEY ix_task (task_id, id)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;
