-- Issue #43 prototype (bench/lean_prototype.py), not pgq's schema: the claim and the heartbeat of
-- the layouts whose jobs stay in one row while they wait and run, @schema@.jobs (A: the live table;
-- C: today's one table with fewer indexes). Installed after the layout's own file.

-- The claim: pgq.claim's lone path (revision 0024) for one queue and one kind. Per priority with due
-- jobs, one statement locks them in claim order and takes them where they are.
@claim_head@
    WHILE q_left > 0 LOOP
        SELECT j.priority INTO prio FROM @schema@.jobs j
        WHERE j.status = 'queued' AND j.queue = q AND j.kind = k AND j.priority > coalesce(prio, -32769)
        ORDER BY j.queue, j.kind, j.priority
        LIMIT 1;
        EXIT WHEN NOT FOUND;
        RETURN QUERY
        WITH picked AS (
            SELECT j.ctid AS tid FROM @schema@.jobs j
            WHERE j.status = 'queued' AND j.queue = q AND j.kind = k AND j.priority = prio AND j.run_at <= now()
              AND NOT j.limited
            ORDER BY j.queue, j.kind, j.priority, j.run_at, j.id
            LIMIT q_left
            @row_lock@
        ),
        claimed AS (
            UPDATE @schema@.jobs j
            SET status = 'running',
                attempts = j.attempts + 1,
                lease_token = token,
                lease_expires_at = now() + make_interval(secs => lease_s),
                claimed_by = worker,
                started_at = statement_timestamp(),
                input_watermark = CASE WHEN j.dedupe_key IS NULL THEN j.input_watermark
                                       ELSE greatest(j.input_watermark, pgq.key_raised(j.queue, j.dedupe_key)) END
            WHERE j.ctid = ANY(ARRAY(SELECT p.tid FROM picked p))
            RETURNING j.id, j.queue, j.kind, j.payload, j.priority, j.run_at, j.attempts, j.max_attempts,
                      j.dedupe_key, j.lease_token, j.lease_expires_at, j.claimed_by, j.last_error,
                      j.input_watermark, j.done_watermark, j.created_at, j.started_at, j.progress, j.group_key,
                      j.sequence_key
        )
        -- (The casts: A's columns are domains over these types.)
        SELECT c.id, c.queue::text, c.kind::text, c.payload::jsonb, c.priority, 'running', c.run_at::timestamptz,
               c.attempts, c.max_attempts::integer, c.dedupe_key, c.lease_token::text,
               c.lease_expires_at::timestamptz, c.claimed_by, c.last_error, NULL::jsonb, c.input_watermark,
               c.done_watermark, c.created_at, c.started_at, NULL::timestamptz, c.progress::jsonb, c.group_key,
               c.sequence_key
        FROM claimed c
        ORDER BY c.run_at, c.id;
        GET DIAGNOSTICS got = ROW_COUNT;
        q_left := q_left - got;
    END LOOP;
END;
$fn$;

-- Heartbeats renew the leases of attempts still held, and store reported progress.
@heartbeat_head@
    UPDATE @schema@.jobs j
    SET lease_expires_at = now() + make_interval(secs => h.lease_s),
        progress = coalesce(h.progress, j.progress)
    FROM (SELECT u.* FROM unnest(p_ids, p_tokens, p_lease_s, p_progress) AS u(id, token, lease_s, progress)
          ORDER BY u.id) h
    WHERE j.id = ANY(p_ids) AND j.id = h.id AND j.lease_token = h.token
    RETURNING j.id, j.lease_expires_at
$fn$;

