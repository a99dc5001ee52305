-- job_audit_add: record in pgq.job_audit that `actor` cancelled or retried one job: the dashboard's
-- single-job actions, in the transaction of the action itself, attributed to the user the
-- application that embeds the dashboard named (the Django mount: the Django user).
INSERT INTO pgq.job_audit (action, actor, job_ids)
VALUES (%(action)s, %(actor)s, ARRAY[%(id)s::bigint])
