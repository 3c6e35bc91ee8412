-- One row the writer rewrites to prove that commits work again after a failure (a full disk).
CREATE TABLE store_probe (
    id INTEGER PRIMARY KEY CHECK (id = 1),
    at TEXT NOT NULL
);

-- Cancellations whose workload is still to be stopped: written in the transaction that
-- records CANCELLED, deleted once the executor has stopped the workload, so that a restart in
-- between (the API server away, say) does not let a cancelled workload run to its end.
CREATE TABLE pending_cancellations (
    job_id TEXT PRIMARY KEY REFERENCES jobs (id) ON DELETE CASCADE,
    requested_at TEXT NOT NULL
);
