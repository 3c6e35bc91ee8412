-- Jobs: one row a job. `body` is the whole job as JSON; the other columns are copies of
-- its fields that queries filter, order or enforce uniqueness on.
CREATE TABLE jobs (
    seq             INTEGER PRIMARY KEY AUTOINCREMENT,
    id              TEXT    NOT NULL UNIQUE,
    name            TEXT,
    namespace       TEXT    NOT NULL,
    template        TEXT    NOT NULL,
    phase           TEXT    NOT NULL,
    submitted_at    TEXT    NOT NULL,
    idempotency_key TEXT    UNIQUE,
    fingerprint     TEXT    NOT NULL,
    -- The launch outbox: 0 until the executor has accepted the job.
    launched        INTEGER NOT NULL DEFAULT 0,
    body            TEXT    NOT NULL
);
CREATE INDEX jobs_by_phase ON jobs (phase, seq);
CREATE INDEX jobs_by_namespace ON jobs (namespace, seq);
CREATE INDEX jobs_unlaunched ON jobs (launched, seq) WHERE launched = 0;

-- Status events: append-only; `seq` is the cursor clients resume after.
CREATE TABLE events (
    seq            INTEGER PRIMARY KEY AUTOINCREMENT,
    job_id         TEXT    NOT NULL REFERENCES jobs (id),
    phase          TEXT    NOT NULL,
    previous_phase TEXT,
    at             TEXT    NOT NULL,
    reason         TEXT,
    message        TEXT,
    -- The job as it was right after this event, as JSON.
    job            TEXT    NOT NULL
);
CREATE INDEX events_by_job ON events (job_id, seq);
