-- group_limits_delete: remove the per-group limits of `kind`; its groups are still claimed in turn,
-- without limits.
DELETE FROM pgq.group_limits g WHERE g.kind = %(kind)s
