-- dashboard_job_bounds: the highest and the lowest job id, where the dashboard's newest-first job
-- search (dashboard_jobs.sql) starts and where it ends. Two probes of the ends of jobs_pkey.
SELECT (SELECT max(j.id) FROM pgq.jobs j) AS max_id,
       (SELECT min(j.id) FROM pgq.jobs j) AS min_id
