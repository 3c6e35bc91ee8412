-- Where each source's lines (a run: a pod's name, a local run's `index-<i>-run-<n>`) are in
-- a job's archive: the cursors of its first and last archived line, written with the chunk
-- that holds them. Lines of other sources may lie between them (parallel runs). A job's
-- attempts read their own output from here, and a reader of the job's log jumps to it.
CREATE TABLE log_source_ranges (
    job_id     TEXT    NOT NULL,
    source     TEXT    NOT NULL,
    first_line INTEGER NOT NULL,
    last_line  INTEGER NOT NULL,
    PRIMARY KEY (job_id, source)
);
