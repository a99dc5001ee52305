-- job_retry: give a failed or cancelled job a new series of attempts, due now (pgq.retry, revision
-- 0025: the one implementation, also the SQL API; read it for the how). Fails with a unique
-- violation on jobs_dedupe_active_uq if another active job holds its dedupe key meanwhile.
-- A retry is recorded in pgq.job_audit with `actor` (NULL: not named) and the role.
SELECT * FROM pgq.retry(%(id)s, %(actor)s::text)
