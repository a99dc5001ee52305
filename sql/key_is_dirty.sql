-- key_is_dirty: does (queue, dedupe_key) have input that no successful run has processed yet, i.e.
-- an active (queued or running) job? Served by the partial unique index live_jobs_dedupe_active_uq
-- (revision 0033: the status lets PostgreSQL read pgq.live_jobs alone, where that index is).
SELECT EXISTS (
    SELECT 1 FROM pgq.jobs j
    WHERE j.queue = %(queue)s AND j.dedupe_key = %(dedupe_key)s AND j.status IN ('queued', 'running')
) AS dirty
