-- claim_limits_lock: step 1 of a claim, in the claim's transaction. Locks the limit rows (concurrency
-- and rate) of every limited kind this claimer may take, so that only one transaction at a time
-- counts and claims jobs of a limited kind; job_claim (step 2, a new statement and so a new
-- snapshot) then sees every claim committed before the locks were granted. Counting and claiming in
-- one statement without this lock would let two claimers each see "2 of 3 running" (or "9 of 10
-- starts this second") and both take one.
-- SKIP LOCKED: a kind another claimer is busy with is simply not claimed this round (job_claim
-- leaves kinds it did not lock alone), so claimers never queue up behind each other here. A kind
-- with both limits is claimed only when both rows were locked.
WITH concurrency AS (
    SELECT c.kind, c.max_running
    FROM pgq.concurrency_limits c
    WHERE %(kinds)s::text[] IS NULL OR c.kind = ANY(%(kinds)s::text[])
    ORDER BY c.kind
    FOR UPDATE SKIP LOCKED
),
rate AS (
    SELECT r.kind, r.max_starts, r.per_s
    FROM pgq.rate_limits r
    WHERE %(kinds)s::text[] IS NULL OR r.kind = ANY(%(kinds)s::text[])
    ORDER BY r.kind
    FOR UPDATE SKIP LOCKED
)
SELECT coalesce(c.kind, r.kind) AS kind, c.max_running, r.max_starts, r.per_s
FROM concurrency c
FULL JOIN rate r ON r.kind = c.kind
-- Both limits exist but only one row was locked: leave the kind for this round.
WHERE (c.kind IS NOT NULL OR NOT EXISTS (SELECT 1 FROM pgq.concurrency_limits x WHERE x.kind = r.kind))
  AND (r.kind IS NOT NULL OR NOT EXISTS (SELECT 1 FROM pgq.rate_limits y WHERE y.kind = c.kind))
ORDER BY 1
