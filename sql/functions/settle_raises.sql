CREATE OR REPLACE FUNCTION pgq.settle_raises(lim integer, wait_ms integer DEFAULT 100) RETURNS integer
LANGUAGE plpgsql VOLATILE
SECURITY DEFINER SET search_path = pg_catalog, pg_temp
-- No JIT (revision 0035): its reads of the live partition read a few rows by index, but on a big live table a plan's
-- estimate passes jit_above_cost, and it would be compiled again at every call (pgq.next_run_at's took
-- 90-280 ms).
SET jit = off
AS $fn$
DECLARE
    n       integer := 0;
    m       integer;
    k       record;
    new_id  bigint;
    timeout text := current_setting('lock_timeout');
BEGIN
    -- Revision 0035: nothing raised, nothing to plan (the statements below read the live partition,
    -- whose index ends the planner reads over every dead entry a drain leaves there).
    IF NOT EXISTS (SELECT 1 FROM pgq.key_raises) THEN
        RETURN 0;
    END IF;
    WITH gone AS (
        DELETE FROM pgq.key_raises x
        WHERE x.id = ANY(ARRAY(SELECT r.id FROM pgq.key_raises r
                               JOIN pgq.key_watermarks w ON w.queue = r.queue AND w.dedupe_key = r.dedupe_key
                               WHERE w.done_watermark >= r.watermark
                               LIMIT lim))
        RETURNING 1
    )
    SELECT count(*) INTO m FROM gone;
    n := n + m;

    WITH raised AS (
        SELECT r.queue, r.dedupe_key, max(r.watermark) AS watermark
        FROM pgq.key_raises r
        WHERE EXISTS (SELECT 1 FROM pgq.live_jobs a
                      WHERE a.queue = r.queue AND a.dedupe_key = r.dedupe_key AND a.status IN ('queued', 'running'))
        GROUP BY r.queue, r.dedupe_key
        ORDER BY r.queue, r.dedupe_key
        LIMIT lim
    ),
    target AS (
        SELECT a.id, x.watermark
        FROM pgq.live_jobs a JOIN raised x ON a.queue = x.queue AND a.dedupe_key = x.dedupe_key
        WHERE a.status IN ('queued', 'running')
        ORDER BY a.id
        FOR NO KEY UPDATE OF a SKIP LOCKED
    ),
    folded AS (
        UPDATE pgq.live_jobs j SET input_watermark = greatest(j.input_watermark, t.watermark)
        FROM target t
        WHERE j.id = t.id AND j.status IN ('queued', 'running')
        RETURNING j.queue, j.dedupe_key, j.input_watermark
    ),
    gone AS (
        DELETE FROM pgq.key_raises x
        USING folded f
        WHERE x.queue = f.queue AND x.dedupe_key = f.dedupe_key AND x.watermark <= f.input_watermark
        RETURNING 1
    )
    SELECT count(*) INTO m FROM gone;
    n := n + m;

    FOR k IN
        SELECT r.queue, r.dedupe_key, array_agg(r.id) AS ids,
               max(r.watermark) FILTER (WHERE NOT r.absorbed) AS watermark,
               (array_agg(r.id ORDER BY r.watermark DESC, r.id DESC) FILTER (WHERE NOT r.absorbed))[1] AS top_id
        FROM (SELECT x.id, x.queue, x.dedupe_key, x.watermark,
                     coalesce((SELECT f.status IN ('failed', 'cancelled') AND x.at < f.finished_at
                               FROM pgq.jobs f WHERE f.id = x.job_id), false) AS absorbed
              FROM pgq.key_raises x
              WHERE NOT EXISTS (SELECT 1 FROM pgq.live_jobs a
                                WHERE a.queue = x.queue AND a.dedupe_key = x.dedupe_key
                                  AND a.status IN ('queued', 'running'))) r
        GROUP BY r.queue, r.dedupe_key
        ORDER BY r.queue, r.dedupe_key
        LIMIT lim
    LOOP
        BEGIN
            PERFORM set_config('lock_timeout', wait_ms::text || 'ms', true);
            IF k.top_id IS NOT NULL THEN
                -- A new job, unless a run covered the watermark by now or a job of the key became
                -- active (then the next settle folds the raises into it: nothing is deleted here).
                WITH ins AS (
                    INSERT INTO pgq.live_jobs AS j (kind, payload, queue, priority, run_at, dedupe_key, input_watermark,
                                               max_attempts, limited, group_key)
                    SELECT t.kind, t.payload, t.queue, t.priority, t.run_at, t.dedupe_key, k.watermark,
                           t.max_attempts,
                           t.group_key IS NOT NULL
                           OR t.kind IN (SELECT l.kind FROM pgq.concurrency_limits l
                                         UNION ALL SELECT r.kind FROM pgq.rate_limits r),
                           t.group_key
                    FROM pgq.key_raises t
                    WHERE t.id = k.top_id
                      AND NOT EXISTS (SELECT 1 FROM pgq.key_watermarks w
                                      WHERE w.queue = t.queue AND w.dedupe_key = t.dedupe_key
                                        AND w.done_watermark >= k.watermark)
                    ON CONFLICT (queue, dedupe_key) WHERE dedupe_key IS NOT NULL AND status IN ('queued', 'running')
                    DO NOTHING
                    RETURNING j.id, j.queue
                )
                SELECT count(pg_notify('pgq', CASE WHEN octet_length(i.queue) <= 1000 THEN i.queue ELSE '*' END)),
                       max(i.id)
                INTO m, new_id FROM ins i;
                -- The run whose completion the insert's conflict check waited for (or that committed
                -- after this statement's snapshot) may have covered the watermark: this statement's
                -- newer snapshot sees it, and the new job is taken back, as pgq.enqueue_many does.
                IF new_id IS NOT NULL AND EXISTS (SELECT 1 FROM pgq.key_watermarks w
                                                  WHERE w.queue = k.queue AND w.dedupe_key = k.dedupe_key
                                                    AND w.done_watermark >= k.watermark) THEN
                    DELETE FROM pgq.live_jobs j WHERE j.id = new_id;
                END IF;
                IF m = 0 AND NOT EXISTS (SELECT 1 FROM pgq.key_watermarks w
                                         WHERE w.queue = k.queue AND w.dedupe_key = k.dedupe_key
                                           AND w.done_watermark >= k.watermark) THEN
                    CONTINUE;
                END IF;
            END IF;
            DELETE FROM pgq.key_raises x
            WHERE x.id = ANY(k.ids);  -- those read above: one committed since is left to the next settle
            GET DIAGNOSTICS m = ROW_COUNT;
            n := n + m;
        EXCEPTION WHEN lock_not_available THEN
            NULL;  -- another transaction is inserting the key: the next settle sees what it did
        END;
    END LOOP;
    PERFORM set_config('lock_timeout', timeout, true);
    RETURN n;
END;
$fn$;

COMMENT ON FUNCTION pgq.settle_raises(integer, integer) IS
    'Apply the raises (pgq.key_raises) of up to lim keys: delete those a run covered, fold the others into '
    'the key''s active job, or enqueue the run a finished job did not make. Called by pgq.settle; '
    'internal: granted to no role.';
