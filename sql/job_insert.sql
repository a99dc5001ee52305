-- job_insert: enqueue a batch of jobs none of which has a dedupe key, as one plain INSERT (one
-- element per job in each array). pgq.enqueue_many (job_enqueue) gives the same result, but its
-- PL/pgSQL call, window and extra sorts cost the server about a quarter more per job; dedupe and
-- watermark rules, which only jobs with a dedupe key need, live there alone. Defaults as in
-- pgq.enqueue_many: run_at statement_timestamp() (plus delay), 25 attempts; `limited` when the kind has a
-- concurrency or rate limit, or the job a group key (revision 0014).
WITH ins AS (
    INSERT INTO pgq.jobs (kind, payload, queue, priority, run_at, max_attempts, input_watermark, limited, group_key)
    -- A column whose value is the same for the whole batch (kind, queue, priority: usually so) comes
    -- as one scalar with a NULL array, and a column that is NULL for every job as a NULL array: the
    -- client then encodes a few values instead of thousands. unnest pads a NULL array with NULLs.
    SELECT coalesce(i.kind, %(kind)s::text), i.payload::jsonb, coalesce(i.queue, %(queue)s::text),
           coalesce(i.priority, %(priority)s::smallint),
           coalesce(i.run_at, statement_timestamp() + make_interval(secs => i.delay), statement_timestamp()),
           coalesce(i.max_attempts, 25), i.watermark,
           -- Kinds with a limit, and jobs with a group key, are claimed through their own index (pgq.claim).
           i.group_key IS NOT NULL
           OR coalesce(i.kind, %(kind)s::text) IN (SELECT l.kind FROM pgq.concurrency_limits l
                                                   UNION ALL SELECT r.kind FROM pgq.rate_limits r),
           i.group_key
    FROM unnest(%(payloads)b::text[], %(kinds)b::text[], %(queues)b::text[], %(priorities)b::smallint[],
                %(run_ats)b::timestamptz[], %(delays)b::double precision[], %(watermarks)b::bigint[],
                %(max_attempts)b::integer[], %(group_keys)b::text[])
         WITH ORDINALITY AS i(payload, kind, queue, priority, run_at, delay, watermark, max_attempts, group_key, ord)
    -- Rows are inserted, and so take their ids from the sequence, in input order: the caller sorts
    -- the returned ids to match them with its input.
    ORDER BY i.ord
    RETURNING id, queue
),
woke AS (
    -- Wake idle workers: one notification per queue ('*' for a name too long for a payload).
    SELECT count(pg_notify('pgq', CASE WHEN octet_length(q.queue) <= 1000 THEN q.queue ELSE '*' END)) AS n
    FROM (SELECT DISTINCT ins.queue FROM ins) q
)
SELECT ins.id FROM ins, woke
