-- Where each source's lines are in a job's archive (see the SQLite migration 0014).
CREATE TABLE log_source_ranges (
    job_id     text   NOT NULL,
    source     text   NOT NULL,
    first_line bigint NOT NULL,
    last_line  bigint NOT NULL,
    PRIMARY KEY (job_id, source)
);
