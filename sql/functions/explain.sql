CREATE OR REPLACE FUNCTION pgq.explain(p_job_id bigint)
RETURNS TABLE (reason text, detail text, facts jsonb)
LANGUAGE sql STABLE
SET search_path = pg_catalog, pg_temp
AS $fn$
WITH job AS (
    -- status as text: the enum's value 'waiting' is new in this transaction when the migrations run
    -- in one (revision 0007 adds it), and a body may not name it as an enum literal then.
    SELECT j.id, j.queue, j.kind, j.status::text AS status, j.run_at, j.priority, j.pending_parents, j.attempts,
           j.max_attempts, j.last_error, j.finished_at, j.claimed_by, j.started_at, j.lease_expires_at,
           j.sequence_key, j.group_key
    FROM pgq.jobs j
    WHERE j.id = p_job_id
),
active AS (
    SELECT * FROM job a WHERE a.status IN ('queued', 'waiting')
),
serving AS (
    SELECT w.claimed_by, w.kinds
    FROM pgq.workers w, active a
    WHERE w.state = 'running' AND pgq.worker_live(w.last_seen, w.refresh_s)
      AND (w.queues IS NULL OR a.queue = ANY(w.queues))
),
blockers AS (
    -- Revision 0025: a cancelled job says who cancelled it, from its newest audited cancel at or
    -- after it finished (none: cancelled as a dependent, or before cancels were audited).
    SELECT 1 AS ord, 'finished' AS reason,
           format('finished: %s at %s%s after %s attempt(s)%s', j.status, j.finished_at,
                  CASE WHEN c.db_role IS NULL THEN ''
                       WHEN c.actor IS NULL THEN format(' by role %s', c.db_role)
                       WHEN c.actor = c.db_role THEN format(' by %s', c.actor)
                       ELSE format(' by %s (via role %s)', c.actor, c.db_role) END,
                  j.attempts,
                  CASE WHEN j.last_error IS NOT NULL THEN ': ' || split_part(j.last_error, E'\n', 1) ELSE '' END)
               AS detail,
           jsonb_build_object('status', j.status, 'finished_at', j.finished_at, 'attempts', j.attempts,
                              'last_error', j.last_error)
           || CASE WHEN c.db_role IS NULL THEN '{}'::jsonb
                   ELSE jsonb_build_object('cancelled_by', c.actor, 'cancelled_role', c.db_role,
                                           'cancelled_at', c.at) END AS facts
    FROM job j
    LEFT JOIN LATERAL (SELECT a.actor, a.db_role, a.at FROM pgq.job_audit a
                       WHERE j.status = 'cancelled' AND a.job_ids @> ARRAY[j.id] AND a.action = 'cancel'
                         AND a.at >= j.finished_at
                       ORDER BY a.id DESC LIMIT 1) c ON true
    WHERE j.status IN ('succeeded', 'failed', 'cancelled')
    UNION ALL
    SELECT 2, 'running', format('running on %s since %s (lease until %s)', j.claimed_by, j.started_at,
                                j.lease_expires_at),
           jsonb_build_object('claimed_by', j.claimed_by, 'started_at', j.started_at,
                              'lease_expires_at', j.lease_expires_at, 'attempts', j.attempts)
    FROM job j WHERE j.status = 'running'
    UNION ALL
    SELECT 3, 'scheduled', format('scheduled for %s', a.run_at), jsonb_build_object('run_at', a.run_at)
    FROM active a WHERE a.run_at > now()
    UNION ALL
    -- Revision 0017: the job's sequence predecessor has not finished, or failed and holds it.
    SELECT 4, 'sequence_held',
           format('held by job %s (sequence %s, %s)', h.parent_id, a.sequence_key,
                  CASE WHEN h.status = 'failed' THEN 'which failed: retry or cancel it'
                       ELSE coalesce(h.status, 'deleted') END),
           jsonb_build_object('held_by', h.parent_id, 'sequence_key', a.sequence_key, 'held_by_status', h.status)
    FROM active a
    JOIN LATERAL (SELECT d.parent_id, p.status::text AS status
                  FROM pgq.job_dependencies d LEFT JOIN pgq.jobs p ON p.id = d.parent_id
                  WHERE d.job_id = a.id AND d.parent_outcome IS NULL AND d.sequence_hold IS NOT NULL) h ON true
    WHERE a.status = 'waiting'
    UNION ALL
    SELECT 5, 'waiting_for_parents',
           format('waits for parent(s) %s', array_to_string(p.ids, ', ')),
           jsonb_build_object('parents', to_jsonb(p.ids), 'pending_parents', a.pending_parents)
    FROM active a
    CROSS JOIN LATERAL (SELECT coalesce(array_agg(d.parent_id ORDER BY d.parent_id), '{}') AS ids
                        FROM pgq.job_dependencies d
                        WHERE d.job_id = a.id AND d.parent_outcome IS NULL AND d.sequence_hold IS NULL) p
    WHERE a.status = 'waiting'
      AND (cardinality(p.ids) > 0
           OR NOT EXISTS (SELECT 1 FROM pgq.job_dependencies s
                          WHERE s.job_id = a.id AND s.parent_outcome IS NULL AND s.sequence_hold IS NOT NULL))
    UNION ALL
    -- Revision 0025: who paused it (the actor named) and through which role (NULL: paused before 0025).
    SELECT 6, 'queue_paused',
           format('queue %s is paused (by %s since %s)', p.queue,
                  CASE WHEN p.paused_role IS NULL OR p.paused_role = p.paused_by THEN p.paused_by
                       ELSE format('%s via role %s', p.paused_by, p.paused_role) END,
                  p.paused_at),
           jsonb_build_object('queue', p.queue, 'paused_by', p.paused_by, 'paused_role', p.paused_role,
                              'paused_at', p.paused_at)
    FROM active a JOIN pgq.paused_queues p ON p.queue = a.queue
    UNION ALL
    SELECT 7, 'concurrency_limit_full',
           format('concurrency limit of %s is full: %s of %s running (jobs %s)', c.kind, h.n, c.max_running,
                  array_to_string(h.ids, ', ')),
           jsonb_build_object('kind', c.kind, 'max_running', c.max_running, 'running', h.n,
                              'holders', to_jsonb(h.ids))
    FROM active a
    JOIN pgq.concurrency_limits c ON c.kind = a.kind
    CROSS JOIN LATERAL (SELECT count(*) AS n, coalesce((array_agg(r.id ORDER BY r.id))[1:20], '{}') AS ids
                        FROM pgq.jobs r WHERE r.status = 'running' AND r.kind = a.kind) h
    WHERE h.n >= c.max_running
    UNION ALL
    -- The window has room again once enough of its oldest starts left it: `until` is when the
    -- start that brings the count below max_starts leaves (at + per_s).
    SELECT 8, 'rate_limit_full',
           format('rate limit of %s (%s per %s s) is full until %s', r.kind, r.max_starts, r.per_s, s.until),
           jsonb_build_object('kind', r.kind, 'max_starts', r.max_starts, 'per_s', r.per_s, 'starts', s.total,
                              'until', s.until)
    FROM active a
    JOIN pgq.rate_limits r ON r.kind = a.kind
    CROSS JOIN LATERAL (
        SELECT max(x.total) AS total,
               min(x.at + make_interval(secs => r.per_s)) FILTER (WHERE x.cum >= x.total - r.max_starts + 1) AS until
        FROM (SELECT st.at, sum(st.starts) OVER (ORDER BY st.at ROWS UNBOUNDED PRECEDING) AS cum,
                     sum(st.starts) OVER () AS total
              FROM pgq.rate_limit_starts st
              WHERE st.kind = a.kind AND st.at > now() - make_interval(secs => r.per_s)) x
    ) s
    WHERE s.total >= r.max_starts
    UNION ALL
    -- Revision 0014's per-group limits, for a job with a group key (the others are not limited by
    -- them): its group's running jobs of the kind, and its group's starts in the window.
    SELECT 9, 'group_concurrency_limit_full',
           format('group concurrency limit of %s is full for group %s: %s of %s running (jobs %s)', g.kind,
                  a.group_key, h.n, g.max_running, array_to_string(h.ids, ', ')),
           jsonb_build_object('kind', g.kind, 'group_key', a.group_key, 'max_running', g.max_running,
                              'running', h.n, 'holders', to_jsonb(h.ids))
    FROM active a
    JOIN pgq.group_limits g ON g.kind = a.kind AND g.max_running IS NOT NULL
    CROSS JOIN LATERAL (SELECT count(*) AS n, coalesce((array_agg(r.id ORDER BY r.id))[1:20], '{}') AS ids
                        FROM pgq.jobs r
                        WHERE r.status = 'running' AND r.kind = a.kind AND r.group_key = a.group_key) h
    WHERE a.group_key IS NOT NULL AND h.n >= g.max_running
    UNION ALL
    SELECT 10, 'group_rate_limit_full',
           format('group rate limit of %s (%s per %s s) is full for group %s until %s', g.kind, g.max_starts,
                  g.per_s, a.group_key, s.until),
           jsonb_build_object('kind', g.kind, 'group_key', a.group_key, 'max_starts', g.max_starts,
                              'per_s', g.per_s, 'starts', s.total, 'until', s.until)
    FROM active a
    JOIN pgq.group_limits g ON g.kind = a.kind AND g.max_starts IS NOT NULL
    CROSS JOIN LATERAL (
        SELECT max(x.total) AS total,
               min(x.at + make_interval(secs => g.per_s)) FILTER (WHERE x.cum >= x.total - g.max_starts + 1) AS until
        FROM (SELECT st.at, sum(st.starts) OVER (ORDER BY st.at ROWS UNBOUNDED PRECEDING) AS cum,
                     sum(st.starts) OVER () AS total
              FROM pgq.group_rate_starts st
              WHERE st.kind = a.kind AND st.group_key = a.group_key
                AND st.at > now() - make_interval(secs => g.per_s)) x
    ) s
    WHERE a.group_key IS NOT NULL AND s.total >= g.max_starts
    UNION ALL
    SELECT 11, 'no_live_worker', format('no live worker claims from queue %s', a.queue),
           jsonb_build_object('queue', a.queue)
    FROM active a WHERE NOT EXISTS (SELECT 1 FROM serving)
    UNION ALL
    SELECT 12, 'unknown_kind',
           format('no live worker claiming from queue %s knows kind %s (workers there: %s); the job waits, '
                  'untouched, and runs when a worker whose app has the task starts', a.queue, a.kind,
                  (SELECT string_agg(DISTINCT s.claimed_by, ', ' ORDER BY s.claimed_by) FROM serving s)),
           jsonb_build_object('queue', a.queue, 'kind', a.kind,
                              'workers', (SELECT jsonb_agg(DISTINCT s.claimed_by ORDER BY s.claimed_by) FROM serving s))
    FROM active a
    WHERE EXISTS (SELECT 1 FROM serving) AND NOT EXISTS (SELECT 1 FROM serving s WHERE a.kind = ANY(s.kinds))
)
SELECT b.reason, b.detail, b.facts
FROM (SELECT * FROM blockers
      UNION ALL
      -- Claim order within the queue: priority, run_at, id (jobs_claim_idx).
      SELECT 13, 'ready', format('ready: position %s in queue %s', pos.n + 1, a.queue),
             jsonb_build_object('queue', a.queue, 'position', pos.n + 1)
      FROM active a
      CROSS JOIN LATERAL (SELECT count(*) AS n FROM pgq.jobs o
                          WHERE o.status = 'queued' AND o.queue = a.queue AND o.run_at <= now()
                            AND (o.priority, o.run_at, o.id) < (a.priority, a.run_at, a.id)) pos
      WHERE a.status = 'queued' AND a.run_at <= now() AND NOT EXISTS (SELECT 1 FROM blockers)) b
ORDER BY b.ord
$fn$;

COMMENT ON FUNCTION pgq.explain(bigint) IS
    'Why job p_job_id is not running now: one row per reason (finished, running, scheduled, '
    'sequence_held, waiting_for_parents, queue_paused, concurrency_limit_full, rate_limit_full, '
    'group_concurrency_limit_full, group_rate_limit_full, no_live_worker, unknown_kind) with its facts, or ready with its position in the queue; no row: no such job.';
