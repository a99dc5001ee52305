-- pgq schema, revision 0011: a worker changes a job only through its lease.
--
-- Until now pgq_worker held column-level UPDATE on pgq.jobs (and INSERT/UPDATE on
-- pgq.key_watermarks) so that its plain acknowledgement statements could run. Those grants let a
-- hostile worker write any row: fail another worker's (or a queued) job, which cancels its
-- dependents; mark another's job succeeded; set a waiting job to queued; write any watermark. The
-- worker's writes now live in SECURITY DEFINER functions that change a row only under the lease
-- token presented (the claim, pgq.claim, already was one), and the roles script revokes the direct
-- grants. Each function keeps the exact statement it replaces (sql/job_*.sql name them; the client
-- still sends one statement per batch):
--   pgq.complete, pgq.fail, pgq.heartbeat, pgq.snooze      the plain acknowledgements, one write per
--                                                           row; `lock_timeout` (NULL: wait) bounds
--                                                           their wait for a row lock another
--                                                           transaction holds;
--   pgq.complete_skip, pgq.fail_skip, pgq.heartbeat_skip,  the same, locking rows first in id order,
--   pgq.snooze_skip                                         SKIP LOCKED unless `wait`, reporting the
--                                                           held ones as busy;
--   pgq.rescue                                              the rescue of expired leases (no token:
--                                                           only rows whose lease has expired);
--   pgq.error_set                                           last_error of an attempt, under its token.
-- The lock_timeout guard: the plain acknowledgements set lock_timeout with set_config(..., true)
-- before their UPDATE, as the statements did in a CTE. The functions' own SET clause names only
-- search_path, so the setting is not undone when the function returns: it lasts to the end of the
-- caller's transaction, which for the worker's guarded call is the one statement (pgq/_ops/jobs.py
-- sends it in a transaction of its own). The wait starts inside the function, after the set, so a
-- held row still ends it with lock_not_available after that long. PL/pgSQL (not SQL) so that each
-- session plans each body once and reuses the plan, as it reused the prepared statements before.

-- The common part of every function below: a row changes only while it runs under the presented
-- token (CHECK jobs_lease_iff_running: a token is set exactly while the job runs), matched by
-- `id = ANY(ids)` so that jobs_pkey is the way in whatever the statistics say (see
-- sql/job_complete.sql), and the rows of a batch are locked in id order.

CREATE FUNCTION pgq.complete(p_ids bigint[], p_tokens uuid[], p_results jsonb[], p_watermarks bigint[],
                             p_progress jsonb[], p_lock_timeout text)
RETURNS TABLE (id bigint, status text, woke bigint)
LANGUAGE plpgsql VOLATILE
SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $fn$
#variable_conflict use_column
BEGIN
    IF p_lock_timeout IS NOT NULL THEN
        PERFORM set_config('lock_timeout', p_lock_timeout, true);
    END IF;
    RETURN QUERY
    WITH done AS (
        SELECT d.id, d.token, d.result, d.watermark, d.progress
        FROM unnest(p_ids, p_tokens, p_results, p_watermarks, p_progress)
             AS d(id, token, result, watermark, progress)
        ORDER BY d.id
    ),
    finished AS (
        UPDATE pgq.jobs j
        SET status = CASE WHEN j.input_watermark > coalesce(d.watermark, j.input_watermark - 1)
                          THEN 'queued' ELSE 'succeeded' END::pgq.job_status,
            result = d.result,
            progress = coalesce(d.progress, j.progress),
            done_watermark = greatest(j.done_watermark, d.watermark),
            lease_token = NULL,
            lease_expires_at = NULL,
            attempts = CASE WHEN j.input_watermark > coalesce(d.watermark, j.input_watermark - 1)
                            THEN 0 ELSE j.attempts END,
            run_at = CASE WHEN j.input_watermark > coalesce(d.watermark, j.input_watermark - 1)
                          THEN now() ELSE j.run_at END,
            finished_at = CASE WHEN j.input_watermark > coalesce(d.watermark, j.input_watermark - 1)
                               THEN NULL ELSE now() END
        FROM done d
        WHERE j.id = ANY(p_ids) AND j.id = d.id AND j.lease_token = d.token
        RETURNING j.id, j.status, j.queue, j.dedupe_key, j.done_watermark
    ),
    marks AS (
        INSERT INTO pgq.key_watermarks AS w (queue, dedupe_key, done_watermark, job_id)
        SELECT f.queue, f.dedupe_key, f.done_watermark, f.id
        FROM finished f
        WHERE f.status = 'succeeded' AND f.dedupe_key IS NOT NULL AND f.done_watermark IS NOT NULL
        ON CONFLICT (queue, dedupe_key) DO UPDATE
        SET done_watermark = excluded.done_watermark, job_id = excluded.job_id, updated_at = now()
        WHERE w.done_watermark < excluded.done_watermark
    ),
    wake AS (
        SELECT count(pg_notify('pgq', CASE WHEN octet_length(q.queue) <= 1000 THEN q.queue ELSE '*' END)) AS n
        FROM (SELECT DISTINCT f.queue FROM finished f WHERE f.status = 'queued') q
    )
    SELECT f.id, f.status::text, (SELECT w.n FROM wake w)
    FROM finished f;
END;
$fn$;
COMMENT ON FUNCTION pgq.complete(bigint[], uuid[], jsonb[], bigint[], jsonb[], text) IS
    'Finish attempts successfully under their lease tokens (sql/job_complete.sql): one row per attempt '
    'still held, (id, new status, queues woken); lost leases are left out.';

CREATE FUNCTION pgq.complete_skip(p_ids bigint[], p_tokens uuid[], p_results jsonb[], p_watermarks bigint[],
                                  p_progress jsonb[], p_wait boolean)
RETURNS TABLE (id bigint, status text, woke bigint)
LANGUAGE plpgsql VOLATILE
SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $fn$
#variable_conflict use_column
BEGIN
    RETURN QUERY
    WITH done AS (
        SELECT d.id, d.token
        FROM unnest(p_ids, p_tokens) AS d(id, token)
    ),
    held AS (
        SELECT j.id
        FROM pgq.jobs j JOIN done d ON j.id = d.id AND j.lease_token = d.token
        WHERE j.id = ANY(p_ids)
    ),
    skipping AS (
        SELECT j.id
        FROM pgq.jobs j JOIN done d ON j.id = d.id AND j.lease_token = d.token
        WHERE j.id = ANY(p_ids) AND NOT p_wait
        ORDER BY j.id
        FOR NO KEY UPDATE OF j SKIP LOCKED
    ),
    waiting AS (
        SELECT j.id
        FROM pgq.jobs j JOIN done d ON j.id = d.id AND j.lease_token = d.token
        WHERE j.id = ANY(p_ids) AND p_wait
        ORDER BY j.id
        FOR NO KEY UPDATE OF j
    ),
    locked AS (
        SELECT l.id FROM skipping l UNION ALL SELECT l.id FROM waiting l
    ),
    busy AS (
        SELECT u.id
        FROM (SELECT b.id, 1 AS n FROM held b UNION ALL SELECT l.id, -1 FROM locked l) u
        GROUP BY u.id
        HAVING sum(u.n) > 0
    ),
    finished AS (
        UPDATE pgq.jobs j
        SET status = CASE WHEN j.input_watermark > coalesce(d.watermark, j.input_watermark - 1)
                          THEN 'queued' ELSE 'succeeded' END::pgq.job_status,
            result = d.result,
            progress = coalesce(d.progress, j.progress),
            done_watermark = greatest(j.done_watermark, d.watermark),
            lease_token = NULL,
            lease_expires_at = NULL,
            attempts = CASE WHEN j.input_watermark > coalesce(d.watermark, j.input_watermark - 1)
                            THEN 0 ELSE j.attempts END,
            run_at = CASE WHEN j.input_watermark > coalesce(d.watermark, j.input_watermark - 1)
                          THEN now() ELSE j.run_at END,
            finished_at = CASE WHEN j.input_watermark > coalesce(d.watermark, j.input_watermark - 1)
                               THEN NULL ELSE now() END
        FROM (SELECT u.* FROM unnest(p_ids, p_tokens, p_results, p_watermarks, p_progress)
                 AS u(id, token, result, watermark, progress)
              WHERE u.id = ANY(ARRAY(SELECT l.id FROM locked l))
              ORDER BY u.id) d
        WHERE j.id = ANY(p_ids) AND j.id = d.id AND j.lease_token = d.token
        RETURNING j.id, j.status, j.queue, j.dedupe_key, j.done_watermark
    ),
    marks AS (
        INSERT INTO pgq.key_watermarks AS w (queue, dedupe_key, done_watermark, job_id)
        SELECT f.queue, f.dedupe_key, f.done_watermark, f.id
        FROM finished f
        WHERE f.status = 'succeeded' AND f.dedupe_key IS NOT NULL AND f.done_watermark IS NOT NULL
        ON CONFLICT (queue, dedupe_key) DO UPDATE
        SET done_watermark = excluded.done_watermark, job_id = excluded.job_id, updated_at = now()
        WHERE w.done_watermark < excluded.done_watermark
    ),
    wake AS (
        SELECT count(pg_notify('pgq', CASE WHEN octet_length(q.queue) <= 1000 THEN q.queue ELSE '*' END)) AS n
        FROM (SELECT DISTINCT f.queue FROM finished f WHERE f.status = 'queued') q
    )
    SELECT f.id, f.status::text, (SELECT w.n FROM wake w)
    FROM finished f
    UNION ALL
    SELECT b.id, NULL::text, NULL::bigint FROM busy b
    WHERE NOT p_wait;
END;
$fn$;
COMMENT ON FUNCTION pgq.complete_skip(bigint[], uuid[], jsonb[], bigint[], jsonb[], boolean) IS
    'pgq.complete for rows another transaction may hold (sql/job_complete_skip.sql): locks first, in id '
    'order, SKIP LOCKED unless p_wait; rows skipped come back with a NULL status (busy).';

CREATE FUNCTION pgq.fail(p_ids bigint[], p_tokens uuid[], p_errors text[], p_retry_in double precision[],
                         p_finals boolean[], p_progress jsonb[], p_lock_timeout text)
RETURNS SETOF pgq.jobs
LANGUAGE plpgsql VOLATILE
SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $fn$
BEGIN
    IF p_lock_timeout IS NOT NULL THEN
        PERFORM set_config('lock_timeout', p_lock_timeout, true);
    END IF;
    RETURN QUERY
    UPDATE pgq.jobs j
    SET status = CASE WHEN f.final OR j.attempts >= j.max_attempts
                      THEN 'failed' ELSE 'queued' END::pgq.job_status,
        run_at = CASE WHEN f.final OR j.attempts >= j.max_attempts THEN j.run_at
                      ELSE now() + make_interval(secs => coalesce(
                          f.retry_in,
                          greatest(1.0, least(2.0 ^ least(j.attempts, 20) * (0.75 + random() * 0.5), 3600.0))))
                 END,
        last_error = f.error,
        progress = coalesce(f.progress, j.progress),
        lease_token = NULL,
        lease_expires_at = NULL,
        finished_at = CASE WHEN f.final OR j.attempts >= j.max_attempts THEN now() END
    FROM (SELECT u.* FROM unnest(p_ids, p_tokens, p_errors, p_retry_in, p_finals, p_progress)
             AS u(id, token, error, retry_in, final, progress)
          ORDER BY u.id) f
    WHERE j.id = ANY(p_ids) AND j.id = f.id AND j.lease_token = f.token
    RETURNING j.*;
END;
$fn$;
COMMENT ON FUNCTION pgq.fail(bigint[], uuid[], text[], double precision[], boolean[], jsonb[], text) IS
    'Record failed attempts under their lease tokens (sql/job_fail.sql): the jobs still held, as updated.';

CREATE FUNCTION pgq.fail_skip(p_ids bigint[], p_tokens uuid[], p_errors text[], p_retry_in double precision[],
                              p_finals boolean[], p_progress jsonb[], p_wait boolean)
RETURNS TABLE (job pgq.jobs, busy boolean)
LANGUAGE plpgsql VOLATILE
SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $fn$
#variable_conflict use_column
BEGIN
    RETURN QUERY
    WITH sent AS (
        SELECT s.id, s.token FROM unnest(p_ids, p_tokens) AS s(id, token)
    ),
    held AS (
        SELECT j.id
        FROM pgq.jobs j JOIN sent s ON j.id = s.id AND j.lease_token = s.token
        WHERE j.id = ANY(p_ids)
    ),
    skipping AS (
        SELECT j.id
        FROM pgq.jobs j JOIN sent s ON j.id = s.id AND j.lease_token = s.token
        WHERE j.id = ANY(p_ids) AND NOT p_wait
        ORDER BY j.id
        FOR NO KEY UPDATE OF j SKIP LOCKED
    ),
    waiting AS (
        SELECT j.id
        FROM pgq.jobs j JOIN sent s ON j.id = s.id AND j.lease_token = s.token
        WHERE j.id = ANY(p_ids) AND p_wait
        ORDER BY j.id
        FOR NO KEY UPDATE OF j
    ),
    locked AS (
        SELECT l.id FROM skipping l UNION ALL SELECT l.id FROM waiting l
    ),
    held_busy AS (
        SELECT u.id
        FROM (SELECT b.id, 1 AS n FROM held b UNION ALL SELECT l.id, -1 FROM locked l) u
        GROUP BY u.id
        HAVING sum(u.n) > 0
    ),
    failed AS (
        UPDATE pgq.jobs j
        SET status = CASE WHEN f.final OR j.attempts >= j.max_attempts
                          THEN 'failed' ELSE 'queued' END::pgq.job_status,
            run_at = CASE WHEN f.final OR j.attempts >= j.max_attempts THEN j.run_at
                          ELSE now() + make_interval(secs => coalesce(
                              f.retry_in,
                              greatest(1.0, least(2.0 ^ least(j.attempts, 20) * (0.75 + random() * 0.5), 3600.0))))
                     END,
            last_error = f.error,
            progress = coalesce(f.progress, j.progress),
            lease_token = NULL,
            lease_expires_at = NULL,
            finished_at = CASE WHEN f.final OR j.attempts >= j.max_attempts THEN now() END
        FROM (SELECT u.* FROM unnest(p_ids, p_tokens, p_errors, p_retry_in, p_finals, p_progress)
                 AS u(id, token, error, retry_in, final, progress)
              WHERE u.id = ANY(ARRAY(SELECT l.id FROM locked l))
              ORDER BY u.id) f
        WHERE j.id = ANY(p_ids) AND j.id = f.id AND j.lease_token = f.token
        RETURNING j
    )
    SELECT x.j, false FROM failed x
    UNION ALL
    SELECT j, true
    FROM pgq.jobs j
    WHERE NOT p_wait AND j.id = ANY(p_ids)
      AND j.id = ANY(ARRAY(SELECT b.id FROM held_busy b));
END;
$fn$;
COMMENT ON FUNCTION pgq.fail_skip(bigint[], uuid[], text[], double precision[], boolean[], jsonb[], boolean) IS
    'pgq.fail for rows another transaction may hold (sql/job_fail_skip.sql): locks first, in id order, SKIP '
    'LOCKED unless p_wait; rows skipped come back unchanged with busy true.';

CREATE FUNCTION pgq.heartbeat(p_ids bigint[], p_tokens uuid[], p_lease_s double precision[], p_progress jsonb[],
                              p_lock_timeout text)
RETURNS TABLE (id bigint, lease_expires_at timestamptz)
LANGUAGE plpgsql VOLATILE
SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $fn$
#variable_conflict use_column
BEGIN
    IF p_lock_timeout IS NOT NULL THEN
        PERFORM set_config('lock_timeout', p_lock_timeout, true);
    END IF;
    RETURN QUERY
    UPDATE pgq.jobs j
    SET lease_expires_at = now() + make_interval(secs => h.lease_s),
        progress = coalesce(h.progress, j.progress)
    FROM (SELECT u.* FROM unnest(p_ids, p_tokens, p_lease_s, p_progress) AS u(id, token, lease_s, progress)
          ORDER BY u.id) h
    WHERE j.id = ANY(p_ids) AND j.id = h.id AND j.lease_token = h.token
    RETURNING j.id, j.lease_expires_at;
END;
$fn$;
COMMENT ON FUNCTION pgq.heartbeat(bigint[], uuid[], double precision[], jsonb[], text) IS
    'Renew leases under their tokens (sql/job_heartbeat.sql): (id, new expiry) per lease still held.';

CREATE FUNCTION pgq.heartbeat_skip(p_ids bigint[], p_tokens uuid[], p_lease_s double precision[],
                                   p_progress jsonb[], p_wait boolean)
RETURNS TABLE (id bigint, lease_expires_at timestamptz)
LANGUAGE plpgsql VOLATILE
SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $fn$
#variable_conflict use_column
BEGIN
    RETURN QUERY
    WITH sent AS (
        SELECT h.id, h.token FROM unnest(p_ids, p_tokens) AS h(id, token)
    ),
    held AS (
        SELECT j.id
        FROM pgq.jobs j JOIN sent h ON j.id = h.id AND j.lease_token = h.token
        WHERE j.id = ANY(p_ids)
    ),
    skipping AS (
        SELECT j.id
        FROM pgq.jobs j JOIN sent h ON j.id = h.id AND j.lease_token = h.token
        WHERE j.id = ANY(p_ids) AND NOT p_wait
        ORDER BY j.id
        FOR NO KEY UPDATE OF j SKIP LOCKED
    ),
    waiting AS (
        SELECT j.id
        FROM pgq.jobs j JOIN sent h ON j.id = h.id AND j.lease_token = h.token
        WHERE j.id = ANY(p_ids) AND p_wait
        ORDER BY j.id
        FOR NO KEY UPDATE OF j
    ),
    locked AS (
        SELECT l.id FROM skipping l UNION ALL SELECT l.id FROM waiting l
    ),
    busy AS (
        SELECT u.id
        FROM (SELECT b.id, 1 AS n FROM held b UNION ALL SELECT l.id, -1 FROM locked l) u
        GROUP BY u.id
        HAVING sum(u.n) > 0
    ),
    renewed AS (
        UPDATE pgq.jobs j
        SET lease_expires_at = CASE WHEN p_wait THEN clock_timestamp() ELSE now() END
                               + make_interval(secs => h.lease_s),
            progress = coalesce(h.progress, j.progress)
        FROM (SELECT u.* FROM unnest(p_ids, p_tokens, p_lease_s, p_progress) AS u(id, token, lease_s, progress)
              WHERE u.id = ANY(ARRAY(SELECT l.id FROM locked l))
              ORDER BY u.id) h
        WHERE j.id = ANY(p_ids) AND j.id = h.id AND j.lease_token = h.token
        RETURNING j.id, j.lease_expires_at
    )
    SELECT r.id, r.lease_expires_at FROM renewed r
    UNION ALL
    SELECT b.id, NULL::timestamptz FROM busy b
    WHERE NOT p_wait;
END;
$fn$;
COMMENT ON FUNCTION pgq.heartbeat_skip(bigint[], uuid[], double precision[], jsonb[], boolean) IS
    'pgq.heartbeat for rows another transaction may hold (sql/job_heartbeat_skip.sql): rows skipped come '
    'back with a NULL expiry (busy).';

CREATE FUNCTION pgq.snooze(p_ids bigint[], p_tokens uuid[], p_delays double precision[], p_progress jsonb[],
                           p_lock_timeout text)
RETURNS TABLE (job pgq.jobs, woke bigint)
LANGUAGE plpgsql VOLATILE
SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $fn$
#variable_conflict use_column
BEGIN
    IF p_lock_timeout IS NOT NULL THEN
        PERFORM set_config('lock_timeout', p_lock_timeout, true);
    END IF;
    RETURN QUERY
    WITH snoozed AS (
        UPDATE pgq.jobs j
        SET status = 'queued',
            run_at = now() + make_interval(secs => s.delay_s),
            attempts = greatest(j.attempts - 1, 0),
            lease_token = NULL,
            lease_expires_at = NULL,
            progress = coalesce(s.progress, j.progress)
        FROM (SELECT u.* FROM unnest(p_ids, p_tokens, p_delays, p_progress) AS u(id, token, delay_s, progress)
              ORDER BY u.id) s
        WHERE j.id = ANY(p_ids) AND j.id = s.id AND j.lease_token = s.token
        RETURNING j
    ),
    wake AS (
        SELECT count(pg_notify('pgq', CASE WHEN octet_length(q.queue) <= 1000 THEN q.queue ELSE '*' END)) AS n
        FROM (SELECT DISTINCT (z.j).queue FROM snoozed z WHERE (z.j).run_at <= now()) q
    )
    SELECT z.j, (SELECT w.n FROM wake w)
    FROM snoozed z;
END;
$fn$;
COMMENT ON FUNCTION pgq.snooze(bigint[], uuid[], double precision[], jsonb[], text) IS
    'Requeue running attempts under their tokens without spending an attempt (sql/job_snooze.sql).';

CREATE FUNCTION pgq.snooze_skip(p_ids bigint[], p_tokens uuid[], p_delays double precision[], p_progress jsonb[],
                                p_wait boolean)
RETURNS TABLE (job pgq.jobs, woke bigint, busy boolean)
LANGUAGE plpgsql VOLATILE
SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $fn$
#variable_conflict use_column
BEGIN
    RETURN QUERY
    WITH sent AS (
        SELECT s.id, s.token FROM unnest(p_ids, p_tokens) AS s(id, token)
    ),
    held AS (
        SELECT j.id
        FROM pgq.jobs j JOIN sent s ON j.id = s.id AND j.lease_token = s.token
        WHERE j.id = ANY(p_ids)
    ),
    skipping AS (
        SELECT j.id
        FROM pgq.jobs j JOIN sent s ON j.id = s.id AND j.lease_token = s.token
        WHERE j.id = ANY(p_ids) AND NOT p_wait
        ORDER BY j.id
        FOR NO KEY UPDATE OF j SKIP LOCKED
    ),
    waiting AS (
        SELECT j.id
        FROM pgq.jobs j JOIN sent s ON j.id = s.id AND j.lease_token = s.token
        WHERE j.id = ANY(p_ids) AND p_wait
        ORDER BY j.id
        FOR NO KEY UPDATE OF j
    ),
    locked AS (
        SELECT l.id FROM skipping l UNION ALL SELECT l.id FROM waiting l
    ),
    held_busy AS (
        SELECT u.id
        FROM (SELECT b.id, 1 AS n FROM held b UNION ALL SELECT l.id, -1 FROM locked l) u
        GROUP BY u.id
        HAVING sum(u.n) > 0
    ),
    snoozed AS (
        UPDATE pgq.jobs j
        SET status = 'queued',
            run_at = now() + make_interval(secs => s.delay_s),
            attempts = greatest(j.attempts - 1, 0),
            lease_token = NULL,
            lease_expires_at = NULL,
            progress = coalesce(s.progress, j.progress)
        FROM (SELECT u.* FROM unnest(p_ids, p_tokens, p_delays, p_progress) AS u(id, token, delay_s, progress)
              WHERE u.id = ANY(ARRAY(SELECT l.id FROM locked l))
              ORDER BY u.id) s
        WHERE j.id = ANY(p_ids) AND j.id = s.id AND j.lease_token = s.token
        RETURNING j
    ),
    wake AS (
        SELECT count(pg_notify('pgq', CASE WHEN octet_length(q.queue) <= 1000 THEN q.queue ELSE '*' END)) AS n
        FROM (SELECT DISTINCT (z.j).queue FROM snoozed z WHERE (z.j).run_at <= now()) q
    )
    SELECT z.j, (SELECT w.n FROM wake w), false
    FROM snoozed z
    UNION ALL
    SELECT j, NULL::bigint, true
    FROM pgq.jobs j
    WHERE NOT p_wait AND j.id = ANY(p_ids)
      AND j.id = ANY(ARRAY(SELECT b.id FROM held_busy b));
END;
$fn$;
COMMENT ON FUNCTION pgq.snooze_skip(bigint[], uuid[], double precision[], jsonb[], boolean) IS
    'pgq.snooze for rows another transaction may hold (sql/job_snooze_skip.sql): rows skipped come back '
    'unchanged with busy true.';

CREATE FUNCTION pgq.rescue(p_limit integer)
RETURNS TABLE (id bigint, status text, queue text, kind text, woke bigint)
LANGUAGE plpgsql VOLATILE
SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $fn$
#variable_conflict use_column
BEGIN
    RETURN QUERY
    WITH expired AS (
        SELECT j.id
        FROM pgq.jobs j
        WHERE j.status = 'running' AND j.lease_expires_at < now()
        ORDER BY j.lease_expires_at
        LIMIT p_limit
        FOR UPDATE SKIP LOCKED
    ),
    rescued AS (
        UPDATE pgq.jobs j
        SET status = CASE WHEN j.attempts >= j.max_attempts THEN 'failed' ELSE 'queued' END::pgq.job_status,
            run_at = now(),
            last_error = 'lease expired at ' || j.lease_expires_at::text
                         || ' (attempt ' || j.attempts::text || ', worker ' || coalesce(j.claimed_by, '?') || ')',
            lease_token = NULL,
            lease_expires_at = NULL,
            finished_at = CASE WHEN j.attempts >= j.max_attempts THEN now() END
        FROM expired e
        WHERE j.id = e.id
        RETURNING j.id, j.status, j.queue, j.kind
    ),
    wake AS (
        SELECT count(pg_notify('pgq', CASE WHEN octet_length(q.queue) <= 1000 THEN q.queue ELSE '*' END)) AS n
        FROM (SELECT DISTINCT r.queue FROM rescued r WHERE r.status = 'queued') q
    )
    SELECT r.id, r.status::text, r.queue, r.kind, (SELECT w.n FROM wake w)
    FROM rescued r;
END;
$fn$;
COMMENT ON FUNCTION pgq.rescue(integer) IS
    'Take back up to p_limit attempts whose lease expired (sql/job_rescue.sql): requeued, or failed when '
    'they used their last attempt. Touches no row whose lease still runs.';

CREATE FUNCTION pgq.error_set(p_id bigint, p_token uuid, p_error text)
RETURNS TABLE (id bigint)
LANGUAGE plpgsql VOLATILE
SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $fn$
#variable_conflict use_column
BEGIN
    RETURN QUERY
    UPDATE pgq.jobs j
    SET last_error = p_error
    WHERE j.id = p_id AND j.lease_token = p_token
    RETURNING j.id;
END;
$fn$;
COMMENT ON FUNCTION pgq.error_set(bigint, uuid, text) IS
    'Store last_error of a running attempt under its lease token (sql/job_error_set.sql).';

REVOKE EXECUTE ON FUNCTION
    pgq.complete(bigint[], uuid[], jsonb[], bigint[], jsonb[], text),
    pgq.complete_skip(bigint[], uuid[], jsonb[], bigint[], jsonb[], boolean),
    pgq.fail(bigint[], uuid[], text[], double precision[], boolean[], jsonb[], text),
    pgq.fail_skip(bigint[], uuid[], text[], double precision[], boolean[], jsonb[], boolean),
    pgq.heartbeat(bigint[], uuid[], double precision[], jsonb[], text),
    pgq.heartbeat_skip(bigint[], uuid[], double precision[], jsonb[], boolean),
    pgq.snooze(bigint[], uuid[], double precision[], jsonb[], text),
    pgq.snooze_skip(bigint[], uuid[], double precision[], jsonb[], boolean),
    pgq.rescue(integer),
    pgq.error_set(bigint, uuid, text)
FROM PUBLIC;
