-- job_after_finish: release the children and tell the waiters of the finished jobs among `ids`
-- (pgq.after_finish, revision 0012), after a statement that finished them outside the functions that
-- do it themselves (a bulk cancel). Idempotent: jobs without open edges or waits cost a probe.
SELECT pgq.after_finish(%(ids)s::bigint[])
