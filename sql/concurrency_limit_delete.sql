-- concurrency_limit_delete: remove the limit of `kind`; its jobs are claimed without a limit again.
DELETE FROM pgq.concurrency_limits c WHERE c.kind = %(kind)s
