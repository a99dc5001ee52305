-- job_dependencies: job `id` with its parents (the jobs it depends on) and its children (the jobs that
-- depend on it), in one statement, so one snapshot: `pgq jobs show`, the dashboard's job page and
-- Queue.dependencies read it.
--
--   relation 'job'    the job itself; no such row: there is no job `id`. `pending_parents` is the
--                     number of parents it still waits for (NULL: enqueued without depends_on);
--                     `parent_count` and `child_count` count all its parents and children.
--   relation 'parent' a job it depends on; relation 'child': a job that depends on it. Each with the
--                     other job's id, kind and status (NULL: that job was deleted: retention deletes
--                     a finished parent and keeps its rows, and pgq.job_dependencies has no foreign
--                     key, so a job deleted by hand leaves its rows too), whether the child needs the
--                     parent to succeed, and the parent's outcome as recorded when it finished (NULL:
--                     it has not finished yet). `sequence_hold`: NULL for an edge of depends_on, else a
--                     sequence edge (revision 0017) that holds the child if the parent fails (true).
--
-- At most `limit` parents and `limit` children, lowest ids first. Parents come from
-- job_dependencies_pkey (job_id, parent_id), already in id order; children from
-- job_dependencies_parent_idx (parent_id) and a top-`limit` sort, so their cost is the job's fan-out,
-- never the table's size. The counts read the same two indexes. Rows come by relation, then id.
SELECT 'job' AS relation, j.id, j.kind, j.status::text AS status, NULL::boolean AS needs_success,
       NULL::text AS parent_outcome, NULL::boolean AS sequence_hold, j.pending_parents,
       (SELECT count(*) FROM pgq.job_dependencies d WHERE d.job_id = j.id) AS parent_count,
       (SELECT count(*) FROM pgq.job_dependencies d WHERE d.parent_id = j.id) AS child_count
FROM pgq.jobs j
WHERE j.id = %(id)s::bigint
UNION ALL
(SELECT 'parent', d.parent_id, p.kind, p.status::text, d.needs_success, d.parent_outcome::text,
        d.sequence_hold, NULL, NULL, NULL
 FROM pgq.job_dependencies d
 LEFT JOIN pgq.jobs p ON p.id = d.parent_id
 WHERE d.job_id = %(id)s::bigint
 ORDER BY d.parent_id
 LIMIT %(limit)s)
UNION ALL
(SELECT 'child', d.job_id, c.kind, c.status::text, d.needs_success, d.parent_outcome::text,
        d.sequence_hold, NULL, NULL, NULL
 FROM pgq.job_dependencies d
 LEFT JOIN pgq.jobs c ON c.id = d.job_id
 WHERE d.parent_id = %(id)s::bigint
 ORDER BY d.job_id
 LIMIT %(limit)s)
ORDER BY 1, 2
