-- The PostgreSQL schema: the SQLite schema's final shape (migrations/sqlite/), for replicas
-- that share one database. Later changes are new files here and in migrations/sqlite/.

-- Jobs: one row a job. `body` is the whole job as JSON text (decoded by jobgate, never by
-- SQL); the other columns are copies of its fields that queries filter, order or enforce
-- uniqueness on.
CREATE TABLE jobs (
    seq             bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    id              text        NOT NULL UNIQUE,
    name            text,
    namespace       text        NOT NULL,
    template        text        NOT NULL,
    phase           text        NOT NULL,
    submitted_at    timestamptz NOT NULL,
    -- The submitter, a unit separator (U+001F), then the client's key: keys are per submitter.
    idempotency_key text        UNIQUE,
    fingerprint     text        NOT NULL,
    -- The launch outbox: -1 held for its dependencies, 0 waiting, 1 handed to the executor.
    launched        smallint    NOT NULL DEFAULT 0,
    -- A replica's claim on an unlaunched job: it launches it alone until the claim expires
    -- (a replica that died with a claim leaves the job to another after that).
    claimed_by      text,
    claimed_until   timestamptz,
    body            text        NOT NULL
);
CREATE INDEX jobs_by_phase ON jobs (phase, seq);
CREATE INDEX jobs_by_namespace ON jobs (namespace, seq);
CREATE INDEX jobs_by_namespace_phase ON jobs (namespace, phase);
CREATE INDEX jobs_unlaunched ON jobs (seq) WHERE launched = 0;
CREATE INDEX jobs_by_submitted_at ON jobs (submitted_at);

-- Status events: append-only; `seq` is the cursor clients resume after. It is assigned by
-- jobgate from `event_cursor` while the writer holds the store's write lock, so cursors
-- commit in order (a sequence's values may commit out of order, which would let a reader
-- pass a cursor before an older one becomes visible).
CREATE TABLE events (
    seq            bigint      PRIMARY KEY,
    job_id         text        NOT NULL REFERENCES jobs (id),
    phase          text        NOT NULL,
    previous_phase text,
    at             timestamptz NOT NULL,
    reason         text,
    message        text,
    -- The job as it was right after this event, as JSON text.
    job            text        NOT NULL
);
CREATE INDEX events_by_job ON events (job_id, seq);
-- One row per finished job, not one per event (jobStats).
CREATE INDEX events_finished_at ON events (at)
    WHERE phase IN ('SUCCEEDED', 'FAILED', 'CANCELLED');

-- The last event cursor handed out; never goes back, even if events are deleted.
CREATE TABLE event_cursor (
    id   smallint PRIMARY KEY CHECK (id = 1),
    last bigint   NOT NULL
);
INSERT INTO event_cursor (id, last) VALUES (1, 0);

-- Job dependencies (`dependsOn`): one row an edge, "job_id runs only after depends_on
-- succeeded".
CREATE TABLE job_dependencies (
    job_id     text NOT NULL REFERENCES jobs (id),
    depends_on text NOT NULL REFERENCES jobs (id),
    PRIMARY KEY (job_id, depends_on)
);
CREATE INDEX job_dependencies_by_dependency ON job_dependencies (depends_on, job_id);

-- One row the writer rewrites to prove that commits work again after a failure.
CREATE TABLE store_probe (
    id smallint    PRIMARY KEY CHECK (id = 1),
    at timestamptz NOT NULL
);

-- Cancellations whose workload is still to be stopped (see the SQLite migration 0005).
CREATE TABLE pending_cancellations (
    job_id       text        PRIMARY KEY REFERENCES jobs (id) ON DELETE CASCADE,
    requested_at timestamptz NOT NULL
);
