-- dashboard_job_audit_insert: record a single action of the dashboard on job `id` (cancel or retry)
-- in pgq.job_audit, as the bulk actions record theirs: `actor` is the dashboard's user, db_role the
-- session's role by default. Run in the action's own transaction, after it succeeded, so that an
-- action and its record commit together or not at all.
INSERT INTO pgq.job_audit (action, actor, filters, job_ids)
VALUES (%(action)s::text, %(actor)s::text, jsonb_build_object('id', %(id)s::bigint), ARRAY[%(id)s::bigint])
