-- schema_check: is pgq migrated in this database? (to_regclass returns NULL for a missing table)
SELECT to_regclass('pgq.jobs') IS NOT NULL AS migrated
