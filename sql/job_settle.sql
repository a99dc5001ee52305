-- job_settle: release the waiting children and tell the waiters that a finish could not see, because
-- the producer of the edge or the wait committed after it (pgq.settle, revision 0012). At most one
-- settle runs at a time (a transaction advisory lock inside; the others return 0 at once). Returns how
-- many parents and waits it settled.
SELECT pgq.settle(%(limit)s::integer) AS settled
