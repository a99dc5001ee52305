-- concurrency_limit_lock: step 1 of a claim, in the claim's transaction. Locks the limit row of every
-- limited kind this claimer may take, so that only one transaction at a time counts and claims
-- jobs of a limited kind; job_claim (step 2, a new statement and so a new snapshot) then sees every
-- claim committed before the lock was granted. Counting and claiming in one statement without this
-- lock would let two claimers each see "2 of 3 running" and both take one.
-- SKIP LOCKED: a kind another claimer is busy with is simply not claimed this round (job_claim
-- leaves kinds it did not lock alone), so claimers never queue up behind each other here.
SELECT c.kind, c.max_running
FROM pgq.concurrency_limits c
WHERE %(kinds)s::text[] IS NULL OR c.kind = ANY(%(kinds)s::text[])
ORDER BY c.kind
FOR UPDATE SKIP LOCKED
