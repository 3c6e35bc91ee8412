-- The name index (0008) deleted with tombstones (`contentless_delete = 1`): FTS5 keeps, per
-- index segment, a hash table of deleted rowids, and when one fills it rebuilds the whole
-- table at twice the size inside the deleting transaction. On a large segment (the million
-- names of a big store) a rebuild wrote megabytes in one commit, so retention's batches
-- stalled every writer for up to a second (BENCHMARKS.md, issue 17, retention).
--
-- Now the index reads its text from `jobs` (external content, rowid = `seq`), so a delete is
-- an ordinary FTS5 delete of the old name's trigrams: small, written with the batch, and merged
-- away by FTS5's incremental merging, a bounded amount of work per commit. Pages still read
-- only rowids from the index. Rebuilding takes a few seconds at a million jobs, once.
DROP TRIGGER job_names_insert;
DROP TRIGGER job_names_delete;
DROP TABLE job_names;
CREATE VIRTUAL TABLE job_names USING fts5(
    name,
    content = 'jobs',
    content_rowid = 'seq',
    tokenize = 'trigram case_sensitive 1'
);
INSERT INTO job_names (job_names) VALUES ('rebuild');
CREATE TRIGGER job_names_insert AFTER INSERT ON jobs WHEN new.name IS NOT NULL BEGIN
    INSERT INTO job_names (rowid, name) VALUES (new.seq, new.name);
END;
-- An external-content delete must be given the very text that was indexed: a job's name
-- never changes after it is inserted (no statement updates it, and the trigger below refuses
-- one that would).
CREATE TRIGGER job_names_delete AFTER DELETE ON jobs WHEN old.name IS NOT NULL BEGIN
    INSERT INTO job_names (job_names, rowid, name) VALUES ('delete', old.seq, old.name);
END;
CREATE TRIGGER job_names_fixed BEFORE UPDATE OF name ON jobs WHEN old.name IS NOT new.name BEGIN
    SELECT RAISE(ABORT, 'a job''s name never changes: the name index relies on it');
END;
