-- Webhook endpoints and their delivery state (see the SQLite migration 0006). Times are Unix
-- milliseconds, as in SQLite, so both stores share one row shape.
CREATE TABLE webhooks (
    id              text   PRIMARY KEY,
    owner           text   NOT NULL,
    url             text   NOT NULL,
    job_filter      text   NOT NULL,
    scope           text,
    secret          text   NOT NULL,
    created_at      bigint NOT NULL,
    delivered_seq   bigint NOT NULL,
    revision        bigint NOT NULL DEFAULT 0,
    attempts        bigint NOT NULL DEFAULT 0,
    failing_since   bigint,
    last_error      text,
    last_attempt_at bigint,
    next_attempt_at bigint,
    parked          bigint NOT NULL DEFAULT 0,
    claimed_by      text,
    claimed_until   bigint
);
CREATE INDEX webhooks_by_owner ON webhooks (owner, created_at);
