-- Lines of a job's output jobgate could not read (a pod's log rotated or removed by the
-- kubelet before it read them): each stands in the archive as a marker line, and the
-- archive counts them, so that it never reads as whole. `loss` is the first reason lines
-- are missing (a gap's cause, or why the archive was truncated): `rotated`, `collected`,
-- `pod-gone`, `capped`, `unwritten`; NULL while none is known.
ALTER TABLE log_archives ADD COLUMN gaps INTEGER NOT NULL DEFAULT 0;
ALTER TABLE log_archives ADD COLUMN loss TEXT;
