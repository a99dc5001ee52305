-- dashboard_job_audit: the audit of job `id` for its page: every pgq.job_audit row (single and bulk
-- actions) naming it, newest first, at most 20. Reads job_audit_job_ids_idx (GIN on job_ids).
SELECT a.at, a.action, a.actor, a.db_role, cardinality(a.job_ids) AS jobs
FROM pgq.job_audit a
WHERE a.job_ids @> ARRAY[%(id)s::bigint]
ORDER BY a.id DESC
LIMIT 20
