-- worker_register: a worker's row in the registry (pgq.worker_register, revision 0013), written at
-- its start; returns its id and the secret token that its refreshes and its removal present.
SELECT r.id, r.token
FROM pgq.worker_register(%(claimed_by)s::text, %(host)s::text, %(pid)s::integer, %(queues)s::text[],
                         %(kinds)s::text[], %(slots)s::integer, %(lease_s)s::double precision,
                         %(refresh_s)s::double precision, %(version)s::text) r
