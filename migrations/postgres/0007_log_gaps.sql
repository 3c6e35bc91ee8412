-- Gaps in a job's archived output and the first reason lines are missing (see the SQLite
-- migration 0012).
ALTER TABLE log_archives ADD COLUMN gaps bigint NOT NULL DEFAULT 0;
ALTER TABLE log_archives ADD COLUMN loss text;
