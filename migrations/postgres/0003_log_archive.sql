-- The archive of every job's output (see the SQLite migration 0007).
CREATE TABLE log_archives (
    job_id    text    PRIMARY KEY,
    lines     bigint  NOT NULL DEFAULT 0,
    bytes     bigint  NOT NULL DEFAULT 0,
    truncated bigint  NOT NULL DEFAULT 0
);
CREATE TABLE log_chunks (
    job_id     text   NOT NULL,
    first_line bigint NOT NULL,
    line_count bigint NOT NULL,
    bytes      bigint NOT NULL,
    data       bytea  NOT NULL,
    PRIMARY KEY (job_id, first_line)
);
CREATE TABLE log_sources (
    job_id   text NOT NULL,
    source   text NOT NULL,
    position text NOT NULL,
    PRIMARY KEY (job_id, source)
);
