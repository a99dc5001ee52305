-- job_rescue: take back up to `limit` attempts whose lease expired (their worker died or hung);
-- pgq.rescue, revision 0011. The expired attempt counts as failed: a job with attempts left is
-- queued again at once, one that used its last attempt is failed (freeing its dedupe key). Clearing
-- the lease token fences out the old worker should it come back. SKIP LOCKED: a row some transaction
-- holds is left for the next round instead of blocking the rescue of all the others.
SELECT r.id, r.status, r.queue, r.kind, r.woke
FROM pgq.rescue(%(limit)s::integer) r
