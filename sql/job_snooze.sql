-- job_snooze: put running attempts back to queued, due `delay_s` seconds from now, without spending
-- an attempt (the claim's increment is given back). Used by jobs that poll an external system, and
-- by a worker handing unfinished jobs back at shutdown (delay 0), which wakes the other workers.
-- pgq.snooze, revision 0011. Fenced like job_complete. `progress`, `lock_timeout`: as in
-- job_complete (sent again through job_snooze_skip.sql).
SELECT (s.job).*, s.woke
FROM pgq.snooze(%(ids)b::bigint[], %(tokens)b::uuid[], %(delays)b::double precision[],
                %(progress)b::text[]::jsonb[], %(lock_timeout)s::text) s
