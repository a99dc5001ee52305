-- queue_resume: resume a paused queue and wake idle workers (pgq.resume, revision 0005): true if it
-- was paused, and then recorded in pgq.control_audit with `actor` (NULL: not named; revision 0025).
SELECT pgq.resume(%(queue)s, %(actor)s::text) AS changed
