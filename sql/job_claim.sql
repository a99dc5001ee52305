-- job_claim: claim up to `limit` ready jobs of the given queues (all queues when `queues` is NULL)
-- and kinds (any when NULL), in priority, run_at, id order, each with a new attempt under a fresh
-- lease token expiring `lease_s` seconds from now (database clock). One round trip: the rules
-- (reserve before locking, pauses, concurrency, rate and group limits, groups' turns, sequences)
-- live in pgq.claim (sql/functions/claim.sql), which a DBA can call from psql too.
SELECT c.id, c.queue, c.kind, c.payload, c.priority, c.status, c.run_at, c.attempts, c.max_attempts,
       c.dedupe_key, c.lease_token, c.lease_expires_at, c.claimed_by, c.last_error, c.result,
       c.input_watermark, c.done_watermark, c.created_at, c.started_at, c.finished_at, c.progress,
       c.group_key, c.sequence_key
FROM pgq.claim(%(queues)s::text[], %(kinds)s::text[], %(limit)s::integer, %(lease_s)s::double precision,
               %(worker)s::text) AS c
