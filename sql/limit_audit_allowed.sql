-- limit_audit_allowed: whether this role may write pgq.control_audit (pgq's admin): limit_audit.sql
-- runs only then, as its INSERT is refused at its start otherwise, whatever its WHERE says.
SELECT has_table_privilege('pgq.control_audit', 'INSERT') AS allowed
