-- queue_resume: resume a paused queue and wake idle workers (pgq.resume, revision 0005): true if it
-- was paused.
SELECT pgq.resume(%(queue)s) AS changed
