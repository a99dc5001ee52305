CREATE OR REPLACE FUNCTION pgq.next_run_at(queues text[]) RETURNS double precision
LANGUAGE plpgsql STABLE
SECURITY DEFINER SET search_path = pg_catalog, pg_temp
-- One plan for every call: custom plans of the statement below cost more to make (some 2 million
-- instructions) than the probes they run. And no JIT: the generic plan's estimate is over
-- jit_above_cost, and compiling it for each call took 90-280 ms.
SET plan_cache_mode = force_generic_plan
SET jit = off
AS $fn$
DECLARE
    scope   text[];
    seconds double precision;
BEGIN
    -- A worker of a scoped role set learns of its own queues only (revision 0021's rule): the queues
    -- asked for among them, all of them when none were. One probe of an empty table for everyone else.
    IF EXISTS (SELECT 1 FROM pgq.role_scopes) THEN
        SELECT c.queues INTO scope FROM pgq.caller_scope() c;
        IF scope IS NOT NULL THEN
            queues := ARRAY(SELECT g.name FROM unnest(coalesce(queues, scope)) AS g(name) WHERE g.name = ANY(scope));
        END IF;
    END IF;
    -- Loose index scans of live_jobs_claim_idx (queue, limited, priority, run_at, id): per queue and
    -- part (unlimited kinds, limited kinds), one probe per distinct priority, then one for the first
    -- run_at of each. A million jobs scheduled for later cost a handful of probes. It reads the live
    -- partition itself: a statement over pgq.jobs plans every day of the history first.
    WITH RECURSIVE
    every_queue AS (
        -- Distinct queues that have queued jobs; only evaluated when no queue list is given.
        (SELECT j.queue FROM pgq.live_jobs j WHERE j.status = 'queued' ORDER BY j.queue LIMIT 1)
        UNION ALL
        SELECT (SELECT j.queue FROM pgq.live_jobs j
                WHERE j.status = 'queued' AND j.queue > e.queue ORDER BY j.queue LIMIT 1)
        FROM every_queue e
        WHERE e.queue IS NOT NULL
    ),
    wanted_queue AS (
        SELECT q.name FROM unnest(queues) AS q(name)
        UNION
        SELECT e.queue FROM every_queue e WHERE queues IS NULL AND e.queue IS NOT NULL
    ),
    queue_priority AS (
        SELECT w.name AS queue, l.limited,
               (SELECT j.priority FROM pgq.live_jobs j
                WHERE j.status = 'queued' AND j.queue = w.name AND j.limited = l.limited
                ORDER BY j.priority LIMIT 1) AS priority
        FROM wanted_queue w CROSS JOIN (VALUES (false), (true)) AS l(limited)
        UNION ALL
        SELECT p.queue, p.limited,
               (SELECT j.priority FROM pgq.live_jobs j
                WHERE j.status = 'queued' AND j.queue = p.queue AND j.limited = p.limited AND j.priority > p.priority
                ORDER BY j.priority LIMIT 1)
        FROM queue_priority p
        WHERE p.priority IS NOT NULL
    )
    SELECT extract(epoch FROM min(
               (SELECT j.run_at FROM pgq.live_jobs j
                WHERE j.status = 'queued' AND j.queue = p.queue AND j.limited = p.limited AND j.priority = p.priority
                ORDER BY j.run_at LIMIT 1)) - now())::double precision
    INTO seconds
    FROM queue_priority p
    WHERE p.priority IS NOT NULL;
    RETURN seconds;
END;
$fn$;

COMMENT ON FUNCTION pgq.next_run_at(text[]) IS
    'Seconds (database clock) until the earliest queued job of the given queues (all queues when NULL; a '
    'scoped role set''s own queues only) is due, negative when one is due already; NULL when nothing is '
    'queued. What an idle worker asks after a claim came back short (revision 0035).';
