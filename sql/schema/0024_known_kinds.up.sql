-- pgq schema, revision 0024: a claim that names its kinds reads no job of another kind (issue #42).
--
-- Workers claim only the kinds their app has tasks for (since revision 0023's release), but the claim
-- of unlimited work read jobs_claim_idx (queue, limited, priority, run_at, id) with `kind = ANY(kinds)`
-- as a filter: every queued job of another kind ahead of the known ones, at the same or a better
-- priority, was read (and its heap row fetched) on every claim: 1,000,000 of them made a claim of 16
-- cost about 0.8 s instead of 2 ms. jobs_claim_kind_idx orders the unlimited queued jobs per queue
-- and kind; pgq.claim reads each asked kind's head from it and merges them in claim order, so a
-- claim costs kinds x (probe + batch) whatever other kinds wait. Claims that name no kinds
-- (kinds NULL: tools, psql) read jobs_claim_idx as before. One more index entry per enqueued job.
CREATE INDEX jobs_claim_kind_idx ON pgq.jobs (queue, kind, priority, run_at, id)
    WHERE status = 'queued' AND NOT limited;
COMMENT ON INDEX pgq.jobs_claim_kind_idx IS
    'Queued unlimited jobs per queue and kind in claim order: the claim of the kinds a worker knows.';
-- pgq:function claim

-- pgq.explain's unknown_kind answer says what happens to such a job: it waits, untouched, until a
-- worker that knows its kind starts (workers claim only their kinds since issue #42).
-- pgq:function explain
