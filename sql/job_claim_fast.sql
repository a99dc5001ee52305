-- job_claim_fast: job_claim for a single queue (the parameter `queue`), kept for the benchmarks and
-- tools that claim from one queue; the same function, pgq.claim, does the work.
SELECT c.id, c.queue, c.kind, c.payload, c.priority, c.status, c.run_at, c.attempts, c.max_attempts,
       c.dedupe_key, c.lease_token, c.lease_expires_at, c.claimed_by, c.last_error, c.result,
       c.input_watermark, c.done_watermark, c.created_at, c.started_at, c.finished_at, c.progress,
       c.group_key, c.sequence_key
FROM pgq.claim(ARRAY[%(queue)s::text], %(kinds)s::text[], %(limit)s::integer, %(lease_s)s::double precision,
               %(worker)s::text) AS c
