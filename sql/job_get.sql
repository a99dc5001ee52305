-- job_get: one job by id. `raised_watermark`: the highest watermark enqueued for an active keyed
-- job's key that is not applied to the row yet (pgq.key_raises, revision 0016: a keyed enqueue does
-- not write the active job; the claim, the completion and the settle apply it). The client shows
-- the greater of the two as the job's input watermark. The lease token is never read: no role but
-- the admin may read it (revision 0020), and only the claim's session needs it (Claim.token).
SELECT j.id, j.queue, j.kind, j.payload, j.priority, j.status, j.run_at, j.attempts, j.max_attempts, j.dedupe_key,
       NULL::uuid AS lease_token, j.lease_expires_at, j.claimed_by, j.last_error, j.result, j.input_watermark,
       j.done_watermark, j.created_at, j.started_at, j.finished_at, j.progress, j.group_key, j.sequence_key,
       (SELECT max(r.watermark) FROM pgq.key_raises r
        WHERE j.dedupe_key IS NOT NULL AND j.status IN ('queued', 'running')
          AND r.queue = j.queue AND r.dedupe_key = j.dedupe_key) AS raised_watermark
FROM pgq.jobs j WHERE j.id = %(id)s
