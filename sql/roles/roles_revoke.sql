-- roles_revoke: `pgq roles --prefix P --revoke`: the role set P keeps no right in this database
-- (its roles stay: they are cluster-wide, other databases may use them). {roles} are its roles that
-- exist. Refused (by pgq.roles) while P's admin owns schema pgq.
REVOKE ALL ON ALL TABLES IN SCHEMA pgq FROM {roles};
REVOKE ALL ON ALL SEQUENCES IN SCHEMA pgq FROM {roles};
REVOKE ALL ON ALL ROUTINES IN SCHEMA pgq FROM {roles};
REVOKE ALL ON SCHEMA pgq FROM {roles};
DROP POLICY IF EXISTS {policy} ON pgq.jobs;
DROP POLICY IF EXISTS {policy} ON pgq.key_raises;
DELETE FROM pgq.role_scopes WHERE prefix = {prefix_name};
DELETE FROM pgq.leaders WHERE step IN ('rescue:' || {prefix_name}, 'periodic:' || {prefix_name});
