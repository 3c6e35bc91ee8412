-- For jobStats: submissions in a time window, and the events that finished a job in one.
-- Timestamps are RFC 3339 text in UTC, which orders like time.
CREATE INDEX jobs_by_submitted_at ON jobs (submitted_at);
-- Partial: one row per finished job, not one per event.
CREATE INDEX events_finished_at ON events (at)
    WHERE phase IN ('SUCCEEDED', 'FAILED', 'CANCELLED');
