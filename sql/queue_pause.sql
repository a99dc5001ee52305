-- queue_pause: pause a queue (pgq.pause, revision 0005): true if it was running, false if paused
-- already. Returns once no claim anywhere can take its jobs any more.
SELECT pgq.pause(%(queue)s) AS changed
