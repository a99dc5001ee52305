-- job_purge: delete one bounded batch of jobs that finished more than `older_than_s` seconds ago.
-- The caller repeats it, each batch its own short transaction, until a batch deletes nothing: no
-- long-held locks, and vacuum can keep up. SKIP LOCKED keeps it out of other transactions' way.
-- Processed watermarks survive in pgq.key_watermarks.
WITH doomed AS (
    SELECT j.id, j.pending_parents IS NOT NULL AS dependent
    FROM pgq.jobs j
    WHERE j.status IN ('succeeded', 'failed', 'cancelled')
      AND j.finished_at < now() - make_interval(secs => %(older_than_s)s)
      -- A failed job that holds its sequence (an open held edge, revision 0017) stays until it is
      -- retried or cancelled: its successors would wait forever. One probe of
      -- job_dependencies_open_idx per failed candidate.
      AND NOT (j.status = 'failed'
               AND EXISTS (SELECT 1 FROM pgq.job_dependencies h
                           WHERE h.parent_id = j.id AND h.parent_outcome IS NULL AND h.sequence_hold))
    ORDER BY j.finished_at
    LIMIT %(batch)s
    FOR UPDATE SKIP LOCKED
),
edges AS (
    -- A purged job that had parents takes its rows of pgq.job_dependencies along.
    DELETE FROM pgq.job_dependencies e
    USING doomed d
    WHERE d.dependent AND e.job_id = d.id
)
DELETE FROM pgq.jobs j
USING doomed d
WHERE j.id = d.id
