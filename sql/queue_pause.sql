-- queue_pause: pause a queue (pgq.pause, revision 0005): true if it was running, false if paused
-- already. Returns once no claim anywhere can take its jobs any more. A pause that changed the state
-- records `actor` (NULL: the role) and the role (pgq.paused_queues, pgq.control_audit; revision 0025).
SELECT pgq.pause(%(queue)s, %(actor)s::text) AS changed
