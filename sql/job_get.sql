-- job_get: one job by id. `raised_watermark`: the highest watermark enqueued for an active keyed
-- job's key that is not applied to the row yet (pgq.key_raises, revision 0016: a keyed enqueue does
-- not write the active job; the claim, the completion and the settle apply it). The client shows
-- the greater of the two as the job's input watermark.
SELECT j.*,
       (SELECT max(r.watermark) FROM pgq.key_raises r
        WHERE j.dedupe_key IS NOT NULL AND j.status IN ('queued', 'running')
          AND r.queue = j.queue AND r.dedupe_key = j.dedupe_key) AS raised_watermark
FROM pgq.jobs j WHERE j.id = %(id)s
