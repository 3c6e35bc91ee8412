-- A million jobs (issue 17): nothing a page, a count or a restart reads may grow with the
-- number of jobs stored.

-- Exact counts of jobs by namespace and phase, kept by triggers in the very transaction that
-- inserts a job or changes its phase, so they always agree with the jobs table. `jobStats`,
-- `jobs.totalCount`, `namespaces` and the quota read them instead of counting rows.
CREATE TABLE job_counts (
    namespace TEXT    NOT NULL,
    phase     TEXT    NOT NULL,
    n         INTEGER NOT NULL,
    PRIMARY KEY (namespace, phase)
) WITHOUT ROWID;
INSERT INTO job_counts (namespace, phase, n)
SELECT namespace, phase, count(*) FROM jobs GROUP BY namespace, phase;
CREATE TRIGGER job_counts_insert AFTER INSERT ON jobs BEGIN
    INSERT INTO job_counts (namespace, phase, n) VALUES (new.namespace, new.phase, 1)
    ON CONFLICT (namespace, phase) DO UPDATE SET n = n + 1;
END;
CREATE TRIGGER job_counts_update AFTER UPDATE OF namespace, phase ON jobs
WHEN old.phase IS NOT new.phase OR old.namespace IS NOT new.namespace BEGIN
    UPDATE job_counts SET n = n - 1 WHERE namespace = old.namespace AND phase = old.phase;
    INSERT INTO job_counts (namespace, phase, n) VALUES (new.namespace, new.phase, 1)
    ON CONFLICT (namespace, phase) DO UPDATE SET n = n + 1;
END;
CREATE TRIGGER job_counts_delete AFTER DELETE ON jobs BEGIN
    UPDATE job_counts SET n = n - 1 WHERE namespace = old.namespace AND phase = old.phase;
END;

-- `nameContains`: a trigram index of job names (FTS5, contentless: the names stay in `jobs`),
-- case-sensitive as the filter is. Its rowid is the job's `seq`, and FTS5 returns matches in
-- rowid order, so a search pages newest first without sorting. A phrase query of the text's
-- trigrams is an exact substring match for 3 characters or more; shorter text is matched by
-- scanning (see store/sqlite.rs).
CREATE VIRTUAL TABLE job_names USING fts5(
    name,
    content = '',
    contentless_delete = 1,
    tokenize = 'trigram case_sensitive 1'
);
INSERT INTO job_names (rowid, name) SELECT seq, name FROM jobs WHERE name IS NOT NULL;
CREATE TRIGGER job_names_insert AFTER INSERT ON jobs WHEN new.name IS NOT NULL BEGIN
    INSERT INTO job_names (rowid, name) VALUES (new.seq, new.name);
END;
CREATE TRIGGER job_names_delete AFTER DELETE ON jobs WHEN old.name IS NOT NULL BEGIN
    DELETE FROM job_names WHERE rowid = old.seq;
END;

-- Recovery at start reads the unfinished jobs oldest first: this index holds only them, in
-- that order (without it, SQLite sorted every PENDING and RUNNING row in a temporary b-tree:
-- 114 MiB at 100,000 unfinished jobs).
CREATE INDEX jobs_unfinished ON jobs (seq) WHERE phase IN ('PENDING', 'RUNNING');
