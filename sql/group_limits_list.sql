-- group_limits_list: each kind's per-group limits (pgq.group_limits; NULL: no such limit, and a
-- row with neither only keeps the kind's turn, added by the claim for a grouped kind without
-- limits), with its grouped jobs running now and the groups they belong to (jobs_running_group_idx),
-- and the group after which the kind's next claim starts its walk (turn_after).
SELECT g.kind, g.max_running, g.max_starts, g.per_s, g.turn_after, g.updated_at,
       r.running, r.groups AS running_groups
FROM pgq.group_limits g
CROSS JOIN LATERAL (
    SELECT count(*) AS running, count(DISTINCT j.group_key) AS groups
    FROM pgq.jobs j
    WHERE j.status = 'running' AND j.kind = g.kind AND j.group_key IS NOT NULL
) r
ORDER BY g.kind
