-- A webhook endpoint can be disabled: its owner no longer exists (a token removed from the
-- tokens file, anonymous access turned off), or its owner or an admin disabled it. A disabled
-- endpoint is never claimed, so nothing more is delivered; the reason stays for `webhooks` to
-- show until the endpoint is deleted. Times are Unix milliseconds.
ALTER TABLE webhooks ADD COLUMN disabled_reason TEXT;
ALTER TABLE webhooks ADD COLUMN disabled_at INTEGER;
