-- job_trace_context_get: the stored W3C trace contexts of claimed jobs (an instrumented worker reads
-- them once per claim, to parent each job's consumer span). Jobs without one are left out.
SELECT j.id, j.trace_context::text
FROM pgq.jobs j
WHERE j.id = ANY(%(ids)s::bigint[]) AND j.trace_context IS NOT NULL
  -- The jobs are running (claimed): this status lets PostgreSQL read only pgq.live_jobs, the
  -- partition of pgq.jobs they are in (revision 0033), not every day of the finished ones.
  AND j.status IN ('waiting', 'queued', 'running')
