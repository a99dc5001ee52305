-- worker_seen: refresh a worker's registry row, and set its state unless `state` is NULL (a worker
-- that starts draining). `seen` is false when the row was pruned meanwhile: the worker registers
-- again. Used where no maintenance run refreshes the row (maintenance_lock_seen does otherwise).
SELECT pgq.worker_seen(%(id)s::uuid, %(token)s::uuid, %(state)s::text) AS seen
