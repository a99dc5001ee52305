-- job_insert_one: enqueue a single job that has no dedupe key, the most common enqueue of all, as one
-- plain INSERT. pgq.enqueue_many (job_enqueue, job_enqueue_one) gives the same result, but a call of
-- a PL/pgSQL function with nine one-element arrays costs the server about as much again as the insert
-- itself. Only a job without a dedupe key may come here: dedupe and watermark rules live in
-- pgq.enqueue_many alone. The defaults are those of pgq.enqueue_many (queue 'default', priority 0,
-- run_at statement_timestamp() plus delay, 25 attempts); the producer role may insert exactly these
-- columns.
WITH ins AS (
    INSERT INTO pgq.jobs (kind, payload, queue, priority, run_at, max_attempts, input_watermark, limited, group_key)
    VALUES (%(kind)s, %(payload)s::text::jsonb, %(queue)s, %(priority)s,
            coalesce(%(run_at)s::timestamptz,
                     statement_timestamp() + make_interval(secs => %(delay)s::double precision), statement_timestamp()),
            coalesce(%(max_attempts)s::integer, 25), %(watermark)s::bigint,
            -- Kinds with a limit, and jobs with a group key, are claimed through their own index (pgq.claim).
            %(group_key)s::text IS NOT NULL
            OR EXISTS (SELECT 1 FROM pgq.concurrency_limits l WHERE l.kind = %(kind)s)
            OR EXISTS (SELECT 1 FROM pgq.rate_limits r WHERE r.kind = %(kind)s),
            %(group_key)s::text)
    RETURNING id, queue
)
-- Wake idle workers of the queue, as pgq.enqueue_many does ('*' for a name too long for a payload).
SELECT ins.id, pg_notify('pgq', CASE WHEN octet_length(ins.queue) <= 1000 THEN ins.queue ELSE '*' END)
FROM ins
