-- Retention: per namespace, the newest event cursor it deleted. A replay of a namespace's
-- events after a cursor below its horizon would have gaps, so it is refused
-- (CURSOR_EXPIRED) instead. A horizon never goes back.
CREATE TABLE retention_horizons (
    namespace text   PRIMARY KEY,
    seq       bigint NOT NULL
);
-- Retention scans finished jobs in (finish time, cursor) order.
CREATE INDEX events_finished_at_seq ON events (at, seq)
    WHERE phase IN ('SUCCEEDED', 'FAILED', 'CANCELLED');
