-- The prefix of the pgq roles whose grants `pgq migrate` keeps current (pgq.roles.sync_grants), or
-- no row when there are none to keep. Candidates, first match wins:
-- 1. the prefix asked for (%(prefix)s, NULL when none);
-- 2. the one of schema pgq's owner when it is named '<prefix>admin' (`pgq roles` ran on this database).
-- A candidate counts only when its three roles all exist: creating roles is `pgq roles`' job. Roles
-- are cluster-wide: a set that exists for other databases only (even one of pgq's default names) is
-- never granted here unasked (issue 40, finding 7); `pgq migrate` names it and the command.
WITH candidate(prefix, rank) AS (
    SELECT %(prefix)s::text, 1
    UNION ALL
    SELECT left(r.rolname, -length('admin')), 2
    FROM pg_catalog.pg_namespace n
    JOIN pg_catalog.pg_roles r ON r.oid = n.nspowner
    WHERE n.nspname = 'pgq' AND right(r.rolname, length('admin')) = 'admin'
)
SELECT c.prefix
FROM candidate c
WHERE c.prefix IS NOT NULL
  AND (SELECT count(*) FROM pg_catalog.pg_roles r
       WHERE r.rolname IN (c.prefix || 'producer', c.prefix || 'worker', c.prefix || 'admin')) = 3
ORDER BY c.rank
LIMIT 1;
