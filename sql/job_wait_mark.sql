-- job_wait_mark: mark a job awaited (Queue.wait), so that finishing it notifies channel
-- pgq_finished; the caller listens on that channel before it runs this. Returns the job if this
-- statement marked it (queued or running, not marked yet); no row otherwise, and the caller then
-- reads the job in a new statement: one whose row lock the marking waited for may have finished it,
-- and only a newer snapshot than this statement's shows that.
SELECT * FROM pgq.mark_awaited(%(id)s)
