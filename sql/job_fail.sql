-- job_fail: record failed attempts (a batch); pgq.fail, revision 0011. Fenced like job_complete.
-- A job with attempts left (and not failed as `final`) goes back to queued, due after `retry_in`
-- seconds, or, when that is NULL, after an exponential backoff with jitter: 2^attempts seconds
-- times a random factor in [0.75, 1.25), never under 1 s nor over one hour. A job that used
-- its last attempt is terminally failed, which also frees its dedupe key.
-- `progress`, `lock_timeout`: as in job_complete (sent again through job_fail_skip.sql).
SELECT f.*
FROM pgq.fail(%(ids)b::bigint[], %(tokens)b::uuid[], %(errors)b::text[], %(retry_in)b::double precision[],
              %(finals)b::boolean[], %(progress)b::text[]::jsonb[], %(lock_timeout)s::text) f
