-- queue_exists: does any job, in any status, belong to this queue? pgq keeps no table of queues: a queue
-- exists while it holds jobs. `pgq jobs list --queue Q` asks this only after its filtered list came back
-- empty, to tell a mistyped queue name ("no such queue") from a queue with no job matching the other
-- filters. The first EXISTS is answered from the claim index (queued jobs, queue first) and usually
-- settles it; OR evaluates the second one, a scan that stops at the first row found, only when needed.
SELECT EXISTS (SELECT 1 FROM pgq.jobs j WHERE j.queue = %(queue)s::text AND j.status = 'queued')
    OR EXISTS (SELECT 1 FROM pgq.jobs j WHERE j.queue = %(queue)s::text) AS queue_exists
