-- key_is_dirty: does (queue, dedupe_key) have input that no successful run has processed yet, i.e.
-- an active (queued or running) job? Served by the partial unique index jobs_dedupe_active_uq.
SELECT EXISTS (
    SELECT 1 FROM pgq.jobs j
    WHERE j.queue = %(queue)s AND j.dedupe_key = %(dedupe_key)s AND j.status IN ('queued', 'running')
) AS dirty
