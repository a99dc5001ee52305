-- worker_prune: delete the registry rows of workers gone for three leases (killed, partitioned
-- away); run by the rescue's leader in its transaction. Returns how many.
SELECT pgq.worker_prune() AS pruned
