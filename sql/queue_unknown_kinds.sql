-- queue_unknown_kinds: per queue and kind, the queued jobs that a worker handed back because no task
-- of its app has their kind (a rolling deploy, or a kind served by workers not started yet). They
-- are recognised by the last_error the worker stored with them (sql/job_error_set.sql,
-- pgq/worker/runner.py UNKNOWN_KIND_ERROR); once a worker that knows the kind runs them they leave
-- this count. Reads queued jobs with a last_error only, through the partial index jobs_retrying_idx,
-- so its cost follows the retry backlog, not the size of the table.
SELECT j.queue, j.kind, count(*) AS jobs
FROM pgq.jobs j
WHERE j.status = 'queued' AND j.last_error IS NOT NULL
  AND j.last_error LIKE 'no worker of queue %% knows kind %%'
GROUP BY j.queue, j.kind
ORDER BY j.queue, j.kind
