-- Webhook endpoints (Standard Webhooks): one row an endpoint, with its delivery state. The
-- event log is the outbox: `delivered_seq` is the last event seq delivered (or skipped as not
-- matching), so a restart resumes after it and skips nothing. Times are Unix milliseconds.
CREATE TABLE webhooks (
    id              TEXT    PRIMARY KEY,
    -- The creator's principal: only they list, delete or replay it.
    owner           TEXT    NOT NULL,
    url             TEXT    NOT NULL,
    -- The JobFilter as JSON, and the creator's scope as a JSON array of namespaces (NULL:
    -- every namespace).
    job_filter      TEXT    NOT NULL,
    scope           TEXT,
    -- `whsec_<base64>`: needed in clear to sign.
    secret          TEXT    NOT NULL,
    created_at      INTEGER NOT NULL,
    delivered_seq   INTEGER NOT NULL,
    -- Bumped by a replay, so that a delivery in flight cannot move the cursor it reset.
    revision        INTEGER NOT NULL DEFAULT 0,
    attempts        INTEGER NOT NULL DEFAULT 0,
    failing_since   INTEGER,
    last_error      TEXT,
    last_attempt_at INTEGER,
    next_attempt_at INTEGER,
    parked          INTEGER NOT NULL DEFAULT 0,
    -- The process delivering it, until when (renewed while it delivers).
    claimed_by      TEXT,
    claimed_until   INTEGER
);
CREATE INDEX webhooks_by_owner ON webhooks (owner, created_at);
