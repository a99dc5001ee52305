"""The functions revisions 0020 and 0021 added, by who may call them: the claim's secret and the
internal helpers (the reservation key, a caller's scope, the queue check, the group walk) to no pgq
role, so that no client can learn the keys a claim reserves under (and squat them) or skip the scope
check; the leader lock and the lease check to the worker only."""

from __future__ import annotations

import pytest

from .conftest import Roles
from .test_roles import assert_refused, rows, table_state

INTERNAL = [
    "SELECT * FROM pgq.claim_secret",
    "SELECT pgq.claim_key('q', 1, 0, now())",
    "SELECT * FROM pgq.caller_scope()",
    "SELECT pgq.check_queues(ARRAY['q'], NULL::bigint[])",
    "SELECT pgq.claim_group_heads(ARRAY['q'], 'k', 'g', 0::smallint, 1, '{}'::bigint[], 'salt')",
]
WORKER_ONLY = [
    "SELECT pgq.lead('rescue')",
    "SELECT * FROM pgq.leases_lost(ARRAY[1]::bigint[], ARRAY[gen_random_uuid()])",
]


@pytest.mark.parametrize("statement", INTERNAL)
def test_no_pgq_role_may_read_the_claim_secret_or_call_the_internal_helpers(roles: Roles, statement: str) -> None:
    before = table_state(roles)
    for dsn in (roles.producer, roles.worker):
        assert_refused(dsn, statement)
    assert table_state(roles) == before


@pytest.mark.parametrize("statement", WORKER_ONLY)
def test_a_producer_may_not_take_a_leader_lock_or_probe_leases(roles: Roles, statement: str) -> None:
    assert_refused(roles.producer, statement)
    rows(roles.worker, statement)  # the worker may: it leads maintenance steps and checks its own leases
