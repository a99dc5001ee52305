-- Reverts revision 0007: no dependencies, no waiting jobs. Refuses (and changes nothing) while jobs
-- wait for parents: cancel them (pgq.cancel) or let their parents finish first.
-- The enum value 'waiting' stays in pgq.job_status: Postgres cannot drop an enum value, and nothing
-- uses it once this has run (revision 0007 adds it only if missing).
-- queue_stats is recreated, which drops its grants: run `pgq roles` again after this downgrade.
DO $check$
DECLARE
    waiting bigint;
BEGIN
    SELECT count(*) INTO waiting FROM pgq.jobs j WHERE j.status::text = 'waiting';
    IF waiting > 0 THEN
        RAISE EXCEPTION 'cannot downgrade below revision 0007: % jobs wait for parents', waiting
            USING HINT = 'cancel them (SELECT pgq.cancel(id) FROM pgq.jobs WHERE status = ''waiting'') or let their parents finish';
    END IF;
END;
$check$;

DROP INDEX pgq.jobs_waiting_idx;

DROP VIEW pgq.queue_stats;
CREATE VIEW pgq.queue_stats AS
WITH counted AS (
    SELECT j.queue,
           count(*) FILTER (WHERE j.status = 'queued' AND j.run_at <= now())        AS ready,
           count(*) FILTER (WHERE j.status = 'queued' AND j.run_at > now())         AS scheduled,
           count(*) FILTER (WHERE j.status = 'running')                            AS running,
           count(*) FILTER (WHERE j.status = 'running' AND j.lease_expires_at < now()) AS expired_leases,
           count(*) FILTER (WHERE j.status = 'succeeded')                          AS succeeded,
           count(*) FILTER (WHERE j.status = 'failed')                             AS failed,
           count(*) FILTER (WHERE j.status = 'cancelled')                          AS cancelled,
           now() - min(j.run_at) FILTER (WHERE j.status = 'queued' AND j.run_at <= now()) AS oldest_ready_age,
           count(*) FILTER (WHERE j.finished_at > now() - interval '1 minute'
                              AND j.status = 'succeeded')                          AS succeeded_last_minute
    FROM pgq.jobs j
    GROUP BY j.queue
)
SELECT coalesce(c.queue, p.queue) AS queue,
       coalesce(c.ready, 0) AS ready,
       coalesce(c.scheduled, 0) AS scheduled,
       coalesce(c.running, 0) AS running,
       coalesce(c.expired_leases, 0) AS expired_leases,
       coalesce(c.succeeded, 0) AS succeeded,
       coalesce(c.failed, 0) AS failed,
       coalesce(c.cancelled, 0) AS cancelled,
       c.oldest_ready_age,
       coalesce(c.succeeded_last_minute, 0) AS succeeded_last_minute,
       p.queue IS NOT NULL AS paused,
       p.paused_at
FROM counted c
FULL JOIN pgq.paused_queues p ON p.queue = c.queue;
COMMENT ON VIEW pgq.queue_stats IS
    'Per queue: ready, scheduled (run_at in the future), running, expired leases, finished counts, '
    'age of the oldest ready job, jobs that succeeded in the last minute, and whether the queue is '
    'paused (since when). Scans pgq.jobs.';

DROP VIEW pgq.waiting_jobs;
DROP TRIGGER jobs_release_dependents ON pgq.jobs;
DROP FUNCTION pgq.jobs_release_dependents();

-- pgq:function cancel@previous

-- pgq:function mark_awaited@previous

-- pgq.enqueue as revisions 0001 and 0002 made it, its grants carried back.
-- pgq:function enqueue@previous
REVOKE EXECUTE ON FUNCTION pgq.enqueue(text, jsonb, text, integer, timestamptz, text, bigint, integer) FROM PUBLIC;
DO $grants$
DECLARE
    grantee text;
BEGIN
    FOR grantee IN
        SELECT a.grantee::regrole::text
        FROM pg_proc p, aclexplode(p.proacl) a
        WHERE p.oid = 'pgq.enqueue(text, jsonb, text, integer, timestamptz, text, bigint, integer, bigint[], text)'::regprocedure
          AND a.privilege_type = 'EXECUTE' AND a.grantee <> 0 AND a.grantee <> p.proowner
    LOOP
        EXECUTE format('GRANT EXECUTE ON FUNCTION pgq.enqueue(text, jsonb, text, integer, timestamptz, text, '
                       'bigint, integer) TO %s', grantee);
    END LOOP;
END;
$grants$;
DROP FUNCTION pgq.enqueue(text, jsonb, text, integer, timestamptz, text, bigint, integer, bigint[], text);
DROP FUNCTION pgq.enqueue_after(text[], jsonb[], text[], smallint[], timestamptz[], double precision[],
                                integer[], boolean[], integer[], bigint[]);

DROP TABLE pgq.job_dependencies;
ALTER TABLE pgq.jobs DROP COLUMN pending_parents;
ALTER TABLE pgq.jobs DROP COLUMN has_dependents;
