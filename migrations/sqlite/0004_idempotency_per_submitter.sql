-- Idempotency keys are per submitter: the stored key is the submitter, a unit separator
-- (U+001F), then the client's key, so that one caller's key can neither find nor reveal
-- another caller's job. The job's body keeps the client's key as it was sent.
UPDATE jobs
SET idempotency_key = coalesce(json_extract(body, '$.submitter'), '') || char(31) || idempotency_key
WHERE idempotency_key IS NOT NULL;
-- Tenancy: counting a namespace's active jobs (the quota) and listing a caller's namespaces.
CREATE INDEX jobs_by_namespace_phase ON jobs (namespace, phase);
