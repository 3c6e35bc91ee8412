-- Job dependencies (`dependsOn`): one row an edge, "job_id runs only after depends_on
-- succeeded". Read by dependency when a job finishes, so indexed that way too.
-- A job waiting for its dependencies is held out of the launch outbox with `launched = -1`
-- (0: in the outbox, 1: handed to the executor).
CREATE TABLE job_dependencies (
    job_id     TEXT NOT NULL REFERENCES jobs (id),
    depends_on TEXT NOT NULL REFERENCES jobs (id),
    PRIMARY KEY (job_id, depends_on)
) WITHOUT ROWID;
CREATE INDEX job_dependencies_by_dependency ON job_dependencies (depends_on, job_id);
