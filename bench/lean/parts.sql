-- Issue #43 prototype (bench/lean_prototype.py), not pgq's schema: pieces of functions that more
-- than one layout's file shares, each put in place of its @name@ line there (the script does it).
-- claim_head: the start of a claim of one queue and one kind (live_claim.sql, b.sql), up to the
--   loop over priorities: what it returns, its variables, pgq.claim's checks before its lone path.
-- ack_head: the start of an acknowledgement (a.sql, b.sql): its signature and `done`, the input.
-- job_columns: the columns a job's row has in A's live table and B's jobs table, as enqueued.
-- heartbeat_head: the signature of a heartbeat (live_claim.sql, b.sql).
-- ack_tail: its end, to the function's (a.sql, b.sql). Before it, the layout's own CTEs: `gone` (the finished jobs'
--   rows, deleted, with the run's result, processed watermark and progress as new_result,
--   new_watermark, new_progress) and `again` (the dirty re-runs, id and queue). The finished jobs
--   enter the history, the keys' processed watermarks advance, the re-runs' queues are woken.

-- part: claim_head
CREATE FUNCTION @schema@.claim(queues text[], kinds text[], lim integer, lease_s double precision, worker text)
RETURNS SETOF @schema@.claimed
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp SET jit = off
SET plan_cache_mode = force_generic_plan
AS $fn$
#variable_conflict use_column
DECLARE
    q      text := queues[1];
    k      text := kinds[1];
    prio   smallint;
    q_left integer := least(lim, 1024);
    got    integer;
    -- One lease token per claim statement, shared by the jobs it takes: the fence is (id, token),
    -- and every attempt of a job comes from another claim, so a token still tells one attempt
    -- from the next; gen_random_uuid() per row costs about 8,000 instructions a job (RAND_bytes).
    token  uuid := gen_random_uuid();
BEGIN
    -- The queue's claim key, exclusive: no other claim of the queue is under way. pgq.claim then
    -- locks rows FOR NO KEY UPDATE SKIP LOCKED (the layouts that keep that have it in `picked`
    -- below), which writes a WAL record per row on top of the update's. A lone claim needs no row
    -- lock against other claims; without it, the update waits for a row an operator's transaction
    -- holds (a producer's FOR KEY SHARE does not conflict with it). The prototype's lock-free
    -- layouts claim one at a time per queue; pgq would keep the locked statement for claims that
    -- share a queue.
    IF NOT @schema@.claim_may_run(queues, kinds, '@row_lock@' = '') THEN
        RETURN;
    END IF;

-- part: ack_head
CREATE FUNCTION @schema@.complete(p_ids bigint[], p_tokens uuid[], p_results jsonb[], p_watermarks bigint[],
                                  p_progress jsonb[])
RETURNS TABLE (id bigint, status text, woke bigint)
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp SET jit = off
AS $fn$
#variable_conflict use_column
BEGIN
    RETURN QUERY
    WITH done AS (
        SELECT d.id, d.token, d.result, d.watermark, d.progress
        FROM unnest(p_ids, p_tokens, p_results, p_watermarks, p_progress) AS d(id, token, result, watermark, progress)
        ORDER BY d.id
    ),

-- part: ack_tail
    finished AS (
        INSERT INTO @schema@.job_history
            (id, queue, kind, payload, priority, status, run_at, attempts, max_attempts, dedupe_key,
             lease_token, lease_expires_at, claimed_by, last_error, result, input_watermark, done_watermark,
             created_at, started_at, finished_at, progress, awaited, pending_parents, has_dependents,
             limited, group_key, trace_context, sequence_key)
        SELECT g.id, g.queue, g.kind, g.payload, g.priority, 'succeeded', g.run_at, g.attempts, g.max_attempts,
               g.dedupe_key, NULL, NULL, g.claimed_by, g.last_error, g.new_result,
               CASE WHEN g.dedupe_key IS NULL THEN g.input_watermark
                    ELSE greatest(g.input_watermark, pgq.key_raised(g.queue, g.dedupe_key)) END,
               greatest(g.done_watermark, g.new_watermark), g.created_at, g.started_at, now(),
               coalesce(g.new_progress, g.progress), g.awaited, g.pending_parents, g.has_dependents,
               g.limited, g.group_key, g.trace_context, g.sequence_key
        FROM gone g
        RETURNING job_history.id, job_history.queue, job_history.dedupe_key, job_history.done_watermark,
                  job_history.has_dependents
    ),
    marks AS (
        INSERT INTO pgq.key_watermarks AS w (queue, dedupe_key, done_watermark, job_id)
        SELECT f.queue, f.dedupe_key, f.done_watermark, f.id
        FROM finished f
        WHERE f.dedupe_key IS NOT NULL AND f.done_watermark IS NOT NULL
        ON CONFLICT (queue, dedupe_key) DO UPDATE
        SET done_watermark = excluded.done_watermark, job_id = excluded.job_id, updated_at = now()
        WHERE w.done_watermark < excluded.done_watermark
    ),
    wake AS (
        SELECT count(pg_notify('pgq', a.queue)) AS n FROM (SELECT DISTINCT a.queue FROM again a) a
    )
    SELECT f.id, 'succeeded'::text, (SELECT w.n FROM wake w) FROM finished f
    UNION ALL
    SELECT a.id, 'queued'::text, (SELECT w.n FROM wake w) FROM again a;
    PERFORM @schema@.after_finish(p_ids, '@schema@.jobs');
END;
$fn$;

-- part: job_columns
    id               bigint NOT NULL DEFAULT nextval('@schema@.jobs_id_seq') PRIMARY KEY,
    queue            @schema@.label NOT NULL DEFAULT 'default',
    kind             @schema@.label NOT NULL,
    payload          @schema@.job_json NOT NULL DEFAULT '{}',
    priority         smallint NOT NULL DEFAULT 0,
    run_at           @schema@.due_time NOT NULL DEFAULT statement_timestamp(),
    max_attempts     @schema@.attempt_limit NOT NULL DEFAULT 25,
    dedupe_key       text,
    last_error       text,
    input_watermark  bigint,
    done_watermark   bigint,
    created_at       timestamptz NOT NULL DEFAULT now(),
    awaited          boolean,
    pending_parents  integer,
    has_dependents   boolean,
    limited          boolean NOT NULL DEFAULT false,
    group_key        text,
    trace_context    @schema@.trace_json,
    sequence_key     text,

-- part: heartbeat_head
CREATE FUNCTION @schema@.heartbeat(p_ids bigint[], p_tokens uuid[], p_lease_s double precision[], p_progress jsonb[])
RETURNS TABLE (id bigint, lease_expires_at timestamptz)
LANGUAGE sql SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $fn$
