-- A million jobs (issue 17; see the SQLite migration 0008): nothing a page, a count or a
-- restart reads may grow with the number of jobs stored.

-- Exact counts of jobs by namespace and phase, kept by a trigger in the transaction that
-- inserts a job or changes its phase (writers take the store's write lock, so they never
-- race on a row).
CREATE TABLE job_counts (
    namespace text   NOT NULL,
    phase     text   NOT NULL,
    n         bigint NOT NULL,
    PRIMARY KEY (namespace, phase)
);
INSERT INTO job_counts (namespace, phase, n)
SELECT namespace, phase, count(*) FROM jobs GROUP BY namespace, phase;

CREATE FUNCTION jobgate_count_jobs() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP IN ('UPDATE', 'DELETE') THEN
        UPDATE job_counts SET n = n - 1 WHERE namespace = OLD.namespace AND phase = OLD.phase;
    END IF;
    IF TG_OP IN ('INSERT', 'UPDATE') THEN
        INSERT INTO job_counts (namespace, phase, n) VALUES (NEW.namespace, NEW.phase, 1)
        ON CONFLICT (namespace, phase) DO UPDATE SET n = job_counts.n + 1;
    END IF;
    RETURN NULL;
END
$$;
CREATE TRIGGER job_counts_insert_delete AFTER INSERT OR DELETE ON jobs
    FOR EACH ROW EXECUTE FUNCTION jobgate_count_jobs();
CREATE TRIGGER job_counts_update AFTER UPDATE OF namespace, phase ON jobs
    FOR EACH ROW WHEN (OLD.phase IS DISTINCT FROM NEW.phase OR OLD.namespace IS DISTINCT FROM NEW.namespace)
    EXECUTE FUNCTION jobgate_count_jobs();

-- Pages filtered by namespace and phase read this index newest first (the old one, without
-- `seq`, could not give that order).
CREATE INDEX jobs_by_namespace_phase_seq ON jobs (namespace, phase, seq);
DROP INDEX jobs_by_namespace_phase;

-- Recovery at start reads the unfinished jobs oldest first, from this index alone.
CREATE INDEX jobs_unfinished ON jobs (seq) WHERE phase IN ('PENDING', 'RUNNING');

-- `nameContains` as `name LIKE '%…%'`: a trigram index, where the server has pg_trgm (a
-- contrib extension, trusted since PostgreSQL 13, so a database owner may create it). Without
-- it, name searches read the jobs the other filters select (jobgate logs nothing about it; the
-- migration says so in the server's log).
DO $$
BEGIN
    CREATE EXTENSION IF NOT EXISTS pg_trgm;
    CREATE INDEX jobs_by_name_trgm ON jobs USING gin (name gin_trgm_ops);
EXCEPTION WHEN OTHERS THEN
    RAISE WARNING 'jobgate: no trigram index for name searches (pg_trgm: %)', SQLERRM;
END
$$;
