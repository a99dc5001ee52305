-- limits_changed: after a limit of `kind` was created or removed, mark its queued and waiting jobs
-- limited or not (pgq.limits_changed), so that claims find them in the right index at once.
SELECT pgq.limits_changed(%(kind)s::text) AS changed
