-- role_sets: every role set of the cluster (a role <prefix>producer with a role <prefix>worker;
-- `pgq roles` names them so) and what it holds in this database: whether its admin role owns schema
-- pgq (`pgq roles --apply` ran here: `pgq migrate` keeps its grants current), whether its producer
-- has USAGE on schema pgq (any rights here at all), and its queues when it is a scoped set
-- (pgq.role_scopes, `pgq roles --queues`). Roles are cluster-wide: a set may exist for other
-- databases only (granted false). Needs a migrated database; reads the catalog and pgq.role_scopes.
WITH sets AS (
    SELECT left(p.rolname, -length('producer')) AS prefix, p.oid AS producer
    FROM pg_catalog.pg_roles p
    WHERE right(p.rolname, length('producer')) = 'producer' AND length(p.rolname) > length('producer')
      AND EXISTS (SELECT 1 FROM pg_catalog.pg_roles w
                  WHERE w.rolname = left(p.rolname, -length('producer')) || 'worker')
)
SELECT s.prefix,
       a.oid IS NOT NULL AS has_admin,
       coalesce(n.nspowner = a.oid, false) AS owns_pgq,
       EXISTS (SELECT 1 FROM pg_catalog.aclexplode(n.nspacl) x
               WHERE x.grantee = s.producer AND x.privilege_type = 'USAGE') AS granted,
       (SELECT r.queues FROM pgq.role_scopes r WHERE r.prefix = s.prefix) AS queues
FROM sets s
LEFT JOIN pg_catalog.pg_roles a ON a.rolname = s.prefix || 'admin'
LEFT JOIN pg_catalog.pg_namespace n ON n.nspname = 'pgq'
ORDER BY s.prefix
