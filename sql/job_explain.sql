-- job_explain: why job `id` is not running now (pgq.explain, revision 0013: one statement, one
-- snapshot), with its status read in the same statement. No row: there is no such job.
SELECT j.status::text AS status, e.reason, e.detail, e.facts
FROM pgq.jobs j
CROSS JOIN LATERAL pgq.explain(j.id) e
WHERE j.id = %(id)s::bigint
