-- worker_unregister: a worker that stops cleanly deletes its registry row (under its token).
SELECT pgq.worker_unregister(%(id)s::uuid, %(token)s::uuid) AS removed
