-- pgq schema, revision 0027: a claim that names its kinds reads no job of another kind (issue #42).
--
-- Workers claim only the kinds their app has tasks for (since revision 0023's release), but the claim
-- of unlimited work read jobs_claim_idx (queue, limited, priority, run_at, id) with `kind = ANY(kinds)`
-- as a filter: every queued job of another kind ahead of the known ones, at the same or a better
-- priority, was read (and its heap row fetched) on every claim: 1,000,000 of them made a claim of 16
-- cost about 0.8 s instead of 2 ms. jobs_claim_kind_idx orders the unlimited queued jobs per queue
-- and kind. pgq.claim of one kind runs its scans through it, in the same order; of several, it reads
-- each kind's head from it and merges them in claim order: a claim costs kinds x (probe + batch)
-- whatever other kinds wait. Claims that name no kinds (kinds NULL: tools, psql) read jobs_claim_idx
-- as before. One more index entry per enqueued job.
--
-- The index's condition says `limited IS NOT TRUE` (`limited` is NOT NULL: the same rows as NOT limited),
-- and so do the claim's statements that read it: a condition jobs_claim_idx cannot use as an index
-- condition, so a generic plan never reads these statements through jobs_claim_idx with the kind as
-- a filter. (With `NOT limited`, both indexes fitted, and where ANALYZE had seen one kind only, the
-- planner rated them equal and took jobs_claim_idx: 1,000,000 unknown rows read per claim again.)
CREATE INDEX jobs_claim_kind_idx ON pgq.jobs (queue, kind, priority, run_at, id)
    WHERE status = 'queued' AND limited IS NOT TRUE;
COMMENT ON INDEX pgq.jobs_claim_kind_idx IS
    'Queued unlimited jobs per queue and kind in claim order: the claim of the kinds a worker knows.';
-- pgq:function claim

-- pgq.explain's unknown_kind answer says what happens to such a job: it waits, untouched, until a
-- worker that knows its kind starts (workers claim only their kinds since issue #42).
-- pgq:function explain
