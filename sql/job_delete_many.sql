-- job_delete_many: delete the finished jobs among `ids` (one batch of a bulk delete), with their rows
-- of pgq.job_dependencies as a purge does; rows another transaction holds are skipped (a later run
-- deletes them). One pgq.job_audit row keeps the ids deleted. Returns how many.
WITH doomed AS (
    SELECT j.id, j.pending_parents IS NOT NULL AS dependent
    FROM pgq.jobs j
    WHERE j.id = ANY(%(ids)s::bigint[]) AND j.status IN ('succeeded', 'failed', 'cancelled')
      -- A failed job that holds its sequence (an open held edge, revision 0017) stays until it is
      -- retried or cancelled: its successors would wait forever. One probe of
      -- job_dependencies_open_idx per failed candidate.
      AND NOT (j.status = 'failed'
               AND EXISTS (SELECT 1 FROM pgq.job_dependencies h
                           WHERE h.parent_id = j.id AND h.parent_outcome IS NULL AND h.sequence_hold))
    ORDER BY j.id
    FOR UPDATE SKIP LOCKED
),
edges AS (
    DELETE FROM pgq.job_dependencies e
    USING doomed d
    WHERE d.dependent AND e.job_id = d.id
),
gone AS (
    DELETE FROM pgq.jobs j
    USING doomed d
    WHERE j.id = d.id
    RETURNING j.id
),
audit AS (
    INSERT INTO pgq.job_audit (action, actor, filters, job_ids)
    SELECT 'delete', %(actor)s::text, %(filters)s::jsonb, array_agg(g.id ORDER BY g.id)
    FROM gone g
    HAVING count(*) > 0
)
SELECT count(*)::integer AS changed FROM gone
