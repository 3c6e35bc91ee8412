-- Schedules and their event log (see the SQLite migration 0013). Times are Unix milliseconds.
CREATE TABLE schedules (
    id text PRIMARY KEY,
    namespace text NOT NULL,
    name text NOT NULL,
    owner text NOT NULL,
    body text NOT NULL,
    revision bigint NOT NULL,
    last_tick bigint,
    last_fired bigint,
    blocked_reason text,
    UNIQUE (namespace, name)
);

CREATE TABLE schedule_events (
    seq bigserial PRIMARY KEY,
    schedule_id text NOT NULL,
    namespace text NOT NULL,
    kind text NOT NULL,
    at bigint NOT NULL,
    tick bigint,
    job_id text,
    message text,
    schedule text
);
CREATE INDEX schedule_events_by_schedule ON schedule_events (schedule_id, seq);
CREATE UNIQUE INDEX schedule_events_one_per_job ON schedule_events (job_id) WHERE job_id IS NOT NULL;
