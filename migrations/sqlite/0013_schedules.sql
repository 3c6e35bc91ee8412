-- Schedules: a job submitted on a cron rule. The definition is JSON (`body`); the ticker's
-- progress (`last_tick`, `last_fired`, Unix milliseconds) and why ticks are blocked are
-- columns of their own, written by ticks without touching the definition. Names are unique
-- per namespace.
CREATE TABLE schedules (
    id TEXT PRIMARY KEY,
    namespace TEXT NOT NULL,
    name TEXT NOT NULL,
    owner TEXT NOT NULL,
    body TEXT NOT NULL,
    revision INTEGER NOT NULL,
    last_tick INTEGER,
    last_fired INTEGER,
    blocked_reason TEXT,
    UNIQUE (namespace, name)
);

-- What happened to schedules, in cursor order: changes (CREATED, UPDATED, PAUSED, RESUMED,
-- DELETED) and ticks (FIRED, SKIPPED, with the job a tick, trigger or backfill started).
-- One row per job started, so that a tick fired again after a crash is recorded once.
CREATE TABLE schedule_events (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    schedule_id TEXT NOT NULL,
    namespace TEXT NOT NULL,
    kind TEXT NOT NULL,
    at INTEGER NOT NULL,
    tick INTEGER,
    job_id TEXT,
    message TEXT,
    schedule TEXT
);
CREATE INDEX schedule_events_by_schedule ON schedule_events (schedule_id, seq);
CREATE UNIQUE INDEX schedule_events_one_per_job ON schedule_events (job_id) WHERE job_id IS NOT NULL;
