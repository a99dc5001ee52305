"""A hostile pgq_worker cannot forge a job's outcome (issue 30). Connected as a member of the worker
role, it tries to finish, fail or release jobs it does not hold, and to write processed watermarks,
both with plain SQL and through the worker functions with tokens it does not have: Postgres refuses
the first (no UPDATE on pgq.jobs, no INSERT or UPDATE on pgq.key_watermarks), and the functions
change nothing without the lease token of the attempt."""

from __future__ import annotations

import uuid

import pytest

import pgq

from .conftest import Roles
from .test_roles import assert_refused, rows, table_state


def _setup(roles: Roles) -> dict[str, int]:
    """As the superuser: a queued job with a dependent (waiting), another worker's running job, and
    a processed watermark of key `k`."""
    with pgq.Queue(roles.dsn) as q:
        keyed = q.enqueue("k", queue="keys", dedupe_key="k", watermark=1)
        [keyed_claim] = q.claim(worker="other", queues=["keys"], limit=1)
        q.complete(keyed_claim)
        running = q.enqueue("k", queue="run")
        [claim] = q.claim(worker="other", queues=["run"], limit=1)
        assert claim.id == running
        queued = q.enqueue("k", queue="q")
        waiting = q.enqueue("k", queue="q", depends_on=[queued])
    return {"queued": queued, "waiting": waiting, "running": running, "keyed": keyed}


FORGERIES = (
    # Fail someone else's queued job, which would cancel its dependents.
    "UPDATE pgq.jobs SET status = 'failed', finished_at = now(), last_error = 'forged' WHERE id = %(queued)s",
    # Mark another worker's running job succeeded.
    "UPDATE pgq.jobs SET status = 'succeeded', finished_at = now(), lease_token = NULL, lease_expires_at = NULL "
    "WHERE id = %(running)s",
    # Release a job still waiting for its parents.
    "UPDATE pgq.jobs SET status = 'queued' WHERE id = %(waiting)s",
    # Any other column a worker's acknowledgements used to write.
    "UPDATE pgq.jobs SET lease_expires_at = now() + interval '1 day' WHERE id = %(running)s",
    "UPDATE pgq.jobs SET result = '{\"forged\": true}', progress = '{}' WHERE id = %(running)s",
    # Processed watermarks of any key.
    "UPDATE pgq.key_watermarks SET done_watermark = 999",
    "INSERT INTO pgq.key_watermarks (queue, dedupe_key, done_watermark, job_id) VALUES ('keys', 'other', 5, 1)",
    "INSERT INTO pgq.key_watermarks (queue, dedupe_key, done_watermark, job_id) VALUES ('keys', 'k', 9, 1) "
    "ON CONFLICT (queue, dedupe_key) DO UPDATE SET done_watermark = 9",
)


@pytest.mark.parametrize("forgery", FORGERIES)
def test_a_worker_cannot_write_jobs_or_watermarks_directly(roles: Roles, forgery: str) -> None:
    ids = _setup(roles)
    before = table_state(roles)
    assert_refused(roles.worker, forgery, ids)
    assert table_state(roles) == before


def test_worker_functions_change_nothing_without_the_lease_token(roles: Roles) -> None:
    ids = _setup(roles)
    before = table_state(roles)
    forged = str(uuid.uuid4())
    every = [[ids["queued"], ids["waiting"], ids["running"], ids["keyed"]]]
    tokens = [[forged] * 4]
    for call, params in (
        ("pgq.complete(%s, %s, NULL::jsonb[], NULL::bigint[], NULL::jsonb[], NULL)", every + tokens),
        ("pgq.complete_skip(%s, %s, NULL::jsonb[], NULL::bigint[], NULL::jsonb[], false)", every + tokens),
        ("pgq.complete_skip(%s, %s, NULL::jsonb[], NULL::bigint[], NULL::jsonb[], true)", every + tokens),
        ("pgq.fail(%s, %s, NULL::text[], NULL::float8[], ARRAY[true, true, true, true], NULL::jsonb[], NULL)",
         every + tokens),
        ("pgq.fail_skip(%s, %s, NULL::text[], NULL::float8[], ARRAY[true, true, true, true], NULL::jsonb[], false)",
         every + tokens),
        ("pgq.heartbeat(%s, %s, ARRAY[1e6, 1e6, 1e6, 1e6], NULL::jsonb[], NULL)", every + tokens),
        ("pgq.heartbeat_skip(%s, %s, ARRAY[1e6, 1e6, 1e6, 1e6], NULL::jsonb[], true)", every + tokens),
        ("pgq.snooze(%s, %s, ARRAY[0.0, 0.0, 0.0, 0.0], NULL::jsonb[], NULL)", every + tokens),
        ("pgq.snooze_skip(%s, %s, ARRAY[0.0, 0.0, 0.0, 0.0], NULL::jsonb[], false)", every + tokens),
        # A NULL token matches no row either (a queued job has none).
        ("pgq.fail(%s, %s, NULL::text[], NULL::float8[], ARRAY[true, true, true, true], NULL::jsonb[], NULL)",
         [*every, [None] * 4]),
        ("pgq.error_set(%s, %s, 'forged')", [ids["running"], forged]),
        # The rescue takes only expired leases: the other worker's lease runs.
        ("pgq.rescue(1000)", None),
    ):
        assert rows(roles.worker, f"SELECT * FROM {call}", params) == [], call
    assert table_state(roles) == before


def test_worker_functions_are_not_executable_by_producers_or_public(roles: Roles) -> None:
    ids = _setup(roles)
    before = table_state(roles)
    assert_refused(roles.producer, "SELECT * FROM pgq.rescue(10)")
    assert_refused(roles.producer, "SELECT * FROM pgq.error_set(%s, gen_random_uuid(), 'x')", [ids["running"]])
    assert_refused(roles.producer, "SELECT * FROM pgq.complete(ARRAY[%s]::bigint[], ARRAY[gen_random_uuid()], "
                                   "NULL, NULL, NULL, NULL)", [ids["running"]])
    public = rows(roles.dsn, "SELECT p.oid::regprocedure::text AS f FROM pg_proc p "
                             "WHERE p.pronamespace = 'pgq'::regnamespace AND p.proname = ANY(%s) "
                             "AND has_function_privilege('public', p.oid, 'EXECUTE')",
                  [["complete", "complete_skip", "fail", "fail_skip", "heartbeat", "heartbeat_skip", "snooze",
                    "snooze_skip", "rescue", "error_set"]])
    assert public == []
    assert table_state(roles) == before
