-- dashboard_job_states: the state of the jobs `ids` (at most a few dozen: the parents, holders or
-- sequence head that explain names as blocking a job), so that the job page shows each blocker's
-- state beside its id. Reads jobs_pkey.
SELECT j.id, j.status::text AS status, j.run_at, j.started_at, j.finished_at
FROM pgq.jobs j
WHERE j.id = ANY(%(ids)s::bigint[])
