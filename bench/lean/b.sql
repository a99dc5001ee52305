-- Issue #43 prototype (bench/lean_prototype.py), not pgq's schema. Layout B (Solid Queue's and
-- Hatchet's shape): a job's definition is written once, to @schema@.jobs, and never updated on the
-- hot path; what can be claimed is a narrow row of @schema@.ready, which the claim deletes; what runs
-- is a narrow row of @schema@.running, which the claim inserts and heartbeats renew; a finished job
-- leaves jobs and running and enters history.sql's @schema@.job_history, in one statement.
-- A job's status is where it is: a ready row (queued), a running row (running), neither (waiting
-- for its parents), the history (finished).
-- The enqueue is sql/job_insert.sql with a second INSERT for the ready rows (the script builds it).

CREATE SEQUENCE @schema@.jobs_id_seq;

-- The job as enqueued (and what rare paths change: progress, the last error, the parents count).
CREATE TABLE @schema@.jobs (
@job_columns@
    progress         @schema@.job_json
) WITH (fillfactor = 100);
-- A key's active job: every row here but waiting ones.
CREATE UNIQUE INDEX jobs_dedupe_active_uq ON @schema@.jobs (queue, dedupe_key)
    WHERE dedupe_key IS NOT NULL AND pending_parents IS NULL;

-- Queued jobs: the claim's one index is all this table has. No primary key: the claim finds rows
-- through the index and deletes them where they are (ctid); an operator's change of one queued job
-- (cancel, run now) finds it by its full key, read from the jobs row.
CREATE TABLE @schema@.ready (
    id        bigint NOT NULL,
    queue     text NOT NULL,
    kind      text NOT NULL,
    priority  smallint NOT NULL,
    run_at    timestamptz NOT NULL,
    attempts  integer NOT NULL,
    limited   boolean NOT NULL,
    group_key text
) WITH (autovacuum_vacuum_scale_factor = 0, autovacuum_vacuum_threshold = 10000);
CREATE INDEX ready_claim_idx ON @schema@.ready (queue, kind, priority, run_at, id);
CREATE INDEX ready_group_idx ON @schema@.ready (queue, kind, group_key, priority, run_at, id) WHERE limited;
CREATE INDEX ready_retrying_idx ON @schema@.ready (queue) WHERE attempts > 0;

-- Running attempts: the fence (id, lease token) and the lease rescue reads.
CREATE TABLE @schema@.running (
    id               bigint NOT NULL PRIMARY KEY,
    queue            text NOT NULL,
    kind             text NOT NULL,
    attempts         integer NOT NULL,
    lease_token      uuid NOT NULL,
    lease_expires_at @schema@.lease_time NOT NULL,
    claimed_by       text NOT NULL,
    started_at       timestamptz NOT NULL,
    group_key        text
) WITH (autovacuum_vacuum_scale_factor = 0, autovacuum_vacuum_threshold = 10000);
CREATE INDEX running_lease_idx ON @schema@.running (lease_expires_at);
CREATE INDEX running_group_idx ON @schema@.running (kind, group_key) WHERE group_key IS NOT NULL;

-- The claim: as live_claim.sql's, on the ready rows; the job's columns come from its jobs row.
@claim_head@
    WHILE q_left > 0 LOOP
        SELECT r.priority INTO prio FROM @schema@.ready r
        WHERE r.queue = q AND r.kind = k AND r.priority > coalesce(prio, -32769)
        ORDER BY r.queue, r.kind, r.priority
        LIMIT 1;
        EXIT WHEN NOT FOUND;
        RETURN QUERY
        WITH picked AS (
            SELECT r.ctid AS tid FROM @schema@.ready r
            WHERE r.queue = q AND r.kind = k AND r.priority = prio AND r.run_at <= now() AND NOT r.limited
            ORDER BY r.queue, r.kind, r.priority, r.run_at, r.id
            LIMIT q_left
            FOR UPDATE SKIP LOCKED
        ),
        taken AS (
            DELETE FROM @schema@.ready r
            WHERE r.ctid = ANY(ARRAY(SELECT p.tid FROM picked p))
            RETURNING r.id, r.queue, r.kind, r.priority, r.run_at, r.attempts, r.group_key
        ),
        started AS (
            INSERT INTO @schema@.running (id, queue, kind, attempts, lease_token, lease_expires_at, claimed_by,
                                          started_at, group_key)
            SELECT t.id, t.queue, t.kind, t.attempts + 1, token, now() + make_interval(secs => lease_s),
                   worker, statement_timestamp(), t.group_key
            FROM taken t
            RETURNING running.id, running.attempts, running.lease_token, running.lease_expires_at,
                      running.claimed_by, running.started_at
        )
        SELECT j.id, j.queue::text, j.kind::text, j.payload::jsonb, t.priority, 'running', t.run_at, s.attempts,
               j.max_attempts::integer, j.dedupe_key, s.lease_token::text, s.lease_expires_at::timestamptz,
               s.claimed_by, j.last_error, NULL::jsonb,
               CASE WHEN j.dedupe_key IS NULL THEN j.input_watermark
                    ELSE greatest(j.input_watermark, pgq.key_raised(j.queue, j.dedupe_key)) END,
               j.done_watermark, j.created_at, s.started_at, NULL::timestamptz, j.progress::jsonb, j.group_key,
               j.sequence_key
        FROM started s
        JOIN taken t ON t.id = s.id
        JOIN @schema@.jobs j ON j.id = s.id
        ORDER BY t.run_at, t.id;
        GET DIAGNOSTICS got = ROW_COUNT;
        q_left := q_left - got;
    END LOOP;
END;
$fn$;

-- The acknowledgement: the running rows still held under their tokens go; a job that must run
-- again (a dirty re-run) gets a ready row, the others leave jobs for the history.
@ack_head@
    ended AS (
        DELETE FROM @schema@.running r
        USING done d
        WHERE r.id = ANY(p_ids) AND r.id = d.id AND r.lease_token = d.token
        RETURNING r.id, r.attempts, r.claimed_by, r.started_at, d.result, d.watermark, d.progress
    ),
    gone AS (
        DELETE FROM @schema@.jobs j
        USING ended e
        WHERE j.id = e.id AND NOT @schema@.rerun(j.input_watermark, e.watermark, j.queue, j.dedupe_key)
        -- (B's jobs rows have no attempts, claimed_by, started_at: the running row's take their names.)
        RETURNING j.*, e.attempts, e.claimed_by, e.started_at,
                  e.result AS new_result, e.watermark AS new_watermark, e.progress AS new_progress
    ),
    again AS (
        INSERT INTO @schema@.ready (id, queue, kind, priority, run_at, attempts, limited, group_key)
        SELECT j.id, j.queue, j.kind, j.priority, now(), 0, j.limited, j.group_key
        FROM ended e JOIN @schema@.jobs j ON j.id = e.id
        WHERE @schema@.rerun(j.input_watermark, e.watermark, j.queue, j.dedupe_key)
        RETURNING ready.id, ready.queue
    ),
@ack_tail@

@heartbeat_head@
    WITH renewed AS (
        UPDATE @schema@.running r
        SET lease_expires_at = now() + make_interval(secs => h.lease_s)
        FROM (SELECT u.* FROM unnest(p_ids, p_tokens, p_lease_s, p_progress) AS u(id, token, lease_s, progress)
              ORDER BY u.id) h
        WHERE r.id = ANY(p_ids) AND r.id = h.id AND r.lease_token = h.token
        RETURNING r.id, r.lease_expires_at, h.progress
    ),
    reported AS (
        -- Progress is the job's (kept across attempts): the jobs row, only when a handler reported any.
        UPDATE @schema@.jobs j SET progress = r.progress FROM renewed r WHERE j.id = r.id AND r.progress IS NOT NULL
    )
    SELECT r.id, r.lease_expires_at FROM renewed r
$fn$;

-- (No rescue: B is measured for its enqueue, claim and acknowledgement only.)

-- A job by id, wherever it is: its jobs row (running when it has a running row, waiting while it
-- has parents to wait for, else queued), else the history.
CREATE FUNCTION @schema@.get(p_id bigint)
RETURNS TABLE (id bigint, status text, queue text, attempts integer, result jsonb, finished_at timestamptz)
LANGUAGE sql STABLE SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $fn$
    (SELECT j.id,
            CASE WHEN r.id IS NOT NULL THEN 'running' WHEN j.pending_parents > 0 THEN 'waiting' ELSE 'queued' END,
            j.queue, r.attempts, NULL::jsonb, NULL::timestamptz
     FROM @schema@.jobs j LEFT JOIN @schema@.running r ON r.id = j.id
     WHERE j.id = p_id
     UNION ALL
     SELECT h.id, h.status::text, h.queue, h.attempts, h.result, h.finished_at
     FROM @schema@.job_history h WHERE h.id = p_id)
    LIMIT 1
$fn$;
