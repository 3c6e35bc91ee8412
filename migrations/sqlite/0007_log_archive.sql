-- The archive of every job's output (issue 17): its whole output survives the pods (a Job's
-- TTL), log rotation and restarts. Cursors are line offsets, from 0.
--
-- One row a job: how many lines and bytes (uncompressed) are archived, and whether the
-- archive was closed before the output ended (the per-job cap, or lines lost while the store
-- refused writes; its last line says which).
CREATE TABLE log_archives (
    job_id    TEXT    PRIMARY KEY,
    lines     INTEGER NOT NULL DEFAULT 0,
    bytes     INTEGER NOT NULL DEFAULT 0,
    truncated INTEGER NOT NULL DEFAULT 0
);
-- The lines, one chunk an append: `line_count` lines from `first_line`, each `source TAB text
-- LF`, deflate-compressed.
CREATE TABLE log_chunks (
    job_id     TEXT    NOT NULL,
    first_line INTEGER NOT NULL,
    line_count INTEGER NOT NULL,
    bytes      INTEGER NOT NULL,
    data       BLOB    NOT NULL,
    PRIMARY KEY (job_id, first_line)
);
-- Where each follower of a job's output (a pod's log stream) stopped, written with its lines:
-- a follow cut short, or a restarted jobgate, resumes from here without repeating or skipping.
CREATE TABLE log_sources (
    job_id   TEXT NOT NULL,
    source   TEXT NOT NULL,
    position TEXT NOT NULL,
    PRIMARY KEY (job_id, source)
);
