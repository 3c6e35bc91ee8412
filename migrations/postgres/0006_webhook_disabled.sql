-- Disabled webhook endpoints (see the SQLite migration 0011): never claimed again, with the
-- reason shown until the endpoint is deleted. Times are Unix milliseconds.
ALTER TABLE webhooks ADD COLUMN disabled_reason text;
ALTER TABLE webhooks ADD COLUMN disabled_at bigint;
