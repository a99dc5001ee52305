"""Bounded JSON at the door (revision 0019): a producer's nested or oversized payload or trace
context is refused through every function granted to it and its direct INSERT, a worker's result
and progress likewise, and nothing is written; values within the bounds pass."""

from __future__ import annotations

import json
from typing import Any

import psycopg
import pytest

from .conftest import Roles
from .test_roles import rows, table_state

DEEP = "[" * 5000 + "]" * 5000  # what made the worker's json.loads raise RecursionError
JUST_TOO_DEEP = "[" * 65 + "1" + "]" * 65  # a value at level 65
DEEPEST_ALLOWED = "[" * 64 + "1" + "]" * 64  # a value at level 64
HUGE = json.dumps({"s": "x" * (8 * 1024 * 1024)})
TRACEPARENT = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
BAD_CONTEXTS = [
    json.dumps({"traceparent": json.loads("[" * 60 + "]" * 60)}),  # not a string
    '{"traceparent": ' + DEEP + "}",
    json.dumps({"traceparent": TRACEPARENT, "baggage": "k=v"}),  # a key pgq never writes
    json.dumps({"traceparent": TRACEPARENT, "tracestate": "a=" + "b" * 600}),  # too long
    json.dumps({"traceparent": "0" * 300}),
    json.dumps({"tracestate": "a=b"}),  # no traceparent
]

# Every way a producer writes a payload: (SQL with one %s for the payload, params after it).
PAYLOAD_PATHS: dict[str, str] = {
    "enqueue": "SELECT pgq.enqueue('k', %s::jsonb)",
    "enqueue dedupe": "SELECT pgq.enqueue('k', %s::jsonb, dedupe_key => 'dk')",
    "enqueue_many": "SELECT pgq.enqueue_many(ARRAY['k'], ARRAY[%s::jsonb], ARRAY['default'], ARRAY[0::smallint], "
                    "NULL, NULL, NULL, NULL, NULL, NULL)",
    "enqueue_unique": "SELECT pgq.enqueue_unique(ARRAY['k'], ARRAY[%s::jsonb], ARRAY['default'], "
                      "ARRAY[0::smallint], NULL, NULL, ARRAY['uk'], NULL, NULL, NULL, ARRAY[true], NULL)",
    "enqueue_after": "SELECT pgq.enqueue_after(ARRAY['k'], ARRAY[%s::jsonb], ARRAY['default'], ARRAY[0::smallint], "
                     "NULL, NULL, NULL, NULL, '{}'::integer[], '{}'::bigint[], NULL, ARRAY['s1'], NULL)",
    "insert": "INSERT INTO pgq.jobs (kind, payload) VALUES ('k', %s::jsonb)",
}


def _refused(dsn: str, statement: str, params: list[Any]) -> str:
    with pytest.raises(psycopg.errors.CheckViolation) as info:
        rows(dsn, statement, params)
    return str(info.value)


@pytest.mark.parametrize("path", sorted(PAYLOAD_PATHS))
def test_a_producer_cannot_store_a_nested_or_huge_payload(roles: Roles, path: str) -> None:
    before = table_state(roles)
    for payload in (DEEP, JUST_TOO_DEEP, HUGE):
        message = _refused(roles.producer, PAYLOAD_PATHS[path], [payload])
        assert "64 levels" in message
    assert table_state(roles) == before
    rows(roles.producer, PAYLOAD_PATHS[path], [DEEPEST_ALLOWED])
    [stored] = rows(roles.dsn, "SELECT payload::text AS p FROM pgq.jobs WHERE kind = 'k'")
    assert json.loads(stored["p"]) == json.loads(DEEPEST_ALLOWED)


def test_a_keyed_raise_with_a_nested_payload_is_refused(roles: Roles) -> None:
    rows(roles.producer, "SELECT pgq.enqueue('k', '{}', dedupe_key => 'key', watermark => 1)")
    rows(roles.dsn, "UPDATE pgq.jobs SET status = 'running', lease_token = gen_random_uuid(), "
                    "lease_expires_at = now() + interval '1 minute' WHERE kind = 'k'")
    before = rows(roles.dsn, "SELECT count(*) AS n FROM pgq.key_raises")
    _refused(roles.producer, "SELECT pgq.enqueue('k', %s::jsonb, dedupe_key => 'key', watermark => 2)", [DEEP])
    assert rows(roles.dsn, "SELECT count(*) AS n FROM pgq.key_raises") == before


@pytest.mark.parametrize("context", BAD_CONTEXTS)
def test_a_producer_cannot_store_a_bad_trace_context(roles: Roles, context: str) -> None:
    with psycopg.connect(roles.producer) as conn:
        [(job,)] = conn.execute("SELECT pgq.enqueue('k')").fetchall()
        with pytest.raises(psycopg.errors.CheckViolation) as info:
            conn.execute("SELECT pgq.trace_context_set(ARRAY[%s]::bigint[], ARRAY[%s]::jsonb[])", [job, context])
        assert info.value.diag.constraint_name == "jobs_trace_context_valid"
    [stored] = rows(roles.dsn, "SELECT count(*) AS n FROM pgq.jobs")
    assert stored["n"] == 0


def test_a_valid_trace_context_is_stored(roles: Roles) -> None:
    context = json.dumps({"traceparent": TRACEPARENT, "tracestate": "a=b"})
    with psycopg.connect(roles.producer) as conn:
        [(job,)] = conn.execute("SELECT pgq.enqueue('k')").fetchall()
        [(n,)] = conn.execute("SELECT pgq.trace_context_set(ARRAY[%s]::bigint[], ARRAY[%s]::jsonb[])",
                              [job, context]).fetchall()
    assert n == 1
    [stored] = rows(roles.dsn, "SELECT trace_context FROM pgq.jobs")
    assert stored["trace_context"] == json.loads(context)


def _claimed(roles: Roles) -> tuple[int, str]:
    rows(roles.producer, "SELECT pgq.enqueue('w')")
    [claim] = rows(roles.worker, "SELECT id, lease_token::text AS t FROM pgq.claim(NULL, NULL, 1, 30, 'w1')")
    return claim["id"], claim["t"]


@pytest.mark.parametrize("call", [
    "SELECT pgq.complete(ARRAY[%(id)s]::bigint[], ARRAY[%(t)s]::uuid[], ARRAY[%(v)s]::jsonb[], NULL, NULL, NULL)",
    "SELECT pgq.complete(ARRAY[%(id)s]::bigint[], ARRAY[%(t)s]::uuid[], NULL, NULL, ARRAY[%(v)s]::jsonb[], NULL)",
    "SELECT pgq.heartbeat(ARRAY[%(id)s]::bigint[], ARRAY[%(t)s]::uuid[], ARRAY[30.0], ARRAY[%(v)s]::jsonb[], NULL)",
    "SELECT pgq.fail(ARRAY[%(id)s]::bigint[], ARRAY[%(t)s]::uuid[], ARRAY['e'], ARRAY[1.0], ARRAY[false], "
    "ARRAY[%(v)s]::jsonb[], NULL)",
    "SELECT pgq.snooze(ARRAY[%(id)s]::bigint[], ARRAY[%(t)s]::uuid[], ARRAY[1.0], ARRAY[%(v)s]::jsonb[], NULL)",
], ids=["result", "complete progress", "heartbeat progress", "fail progress", "snooze progress"])
def test_a_worker_cannot_store_a_nested_result_or_progress(roles: Roles, call: str) -> None:
    job, token = _claimed(roles)
    before = table_state(roles)
    with pytest.raises(psycopg.errors.CheckViolation):
        rows(roles.worker, call, {"id": job, "t": token, "v": DEEP})
    assert table_state(roles) == before


def test_every_role_may_run_the_bound_checks_its_writes_call(roles: Roles) -> None:
    for dsn in (roles.producer, roles.worker, roles.admin):
        [row] = rows(dsn, "SELECT pgq.json_bounded(%s::jsonb) AS deep, pgq.json_bounded('[1]') AS flat, "
                          "pgq.trace_context_valid('{\"traceparent\": \"00-x\"}') AS context", [JUST_TOO_DEEP])
        assert row == {"deep": False, "flat": True, "context": True}
