-- limit_audit: record in pgq.control_audit that `actor` (NULL: not named) sets the `limit`
-- (concurrency_limit, rate_limit or group_limits) of `kind` to `new` (jsonb of the limits that are
-- set; NULL: removed), with the limits it had ("was", NULL: none), when that changes them. Runs first
-- in the change's transaction, and only for a role that may write the audit (limit_audit_allowed:
-- pgq's admin; a worker setting its tasks' limits at start-up is not recorded).
WITH old AS (
    SELECT jsonb_build_object('max_running', c.max_running) AS v
    FROM pgq.concurrency_limits c WHERE %(limit)s::text = 'concurrency_limit' AND c.kind = %(kind)s::text
    UNION ALL
    SELECT jsonb_build_object('max_starts', r.max_starts, 'per_s', r.per_s)
    FROM pgq.rate_limits r WHERE %(limit)s::text = 'rate_limit' AND r.kind = %(kind)s::text
    UNION ALL
    -- A row with neither limit only keeps a grouped kind's turn (the claim adds it): no limit.
    SELECT nullif(jsonb_strip_nulls(jsonb_build_object('max_running', g.max_running, 'max_starts', g.max_starts,
                                                       'per_s', g.per_s)), '{}')
    FROM pgq.group_limits g WHERE %(limit)s::text = 'group_limits' AND g.kind = %(kind)s::text
)
INSERT INTO pgq.control_audit (action, target, actor, details)
SELECT %(limit)s::text, %(kind)s::text, %(actor)s::text,
       jsonb_build_object('was', (SELECT o.v FROM old o), 'now', %(new)s::jsonb)
WHERE (SELECT o.v FROM old o) IS DISTINCT FROM %(new)s::jsonb
