-- Retention: per namespace, the newest event cursor it deleted. A replay of a namespace's
-- events after a cursor below its horizon would have gaps, so it is refused
-- (CURSOR_EXPIRED) instead. A horizon never goes back.
CREATE TABLE retention_horizons (
    namespace TEXT    PRIMARY KEY,
    seq       INTEGER NOT NULL
) WITHOUT ROWID;
-- Retention scans finished jobs in (finish time, cursor) order: `events_finished_at` (at)
-- already holds the cursor (the rowid), so it serves that order as it is.
