"""pgq.trace_context_set (revision 0015) as the roles see it: an instrumented producer stores the
trace context of the jobs it just enqueued, and can neither write pgq.jobs.trace_context directly
nor set or overwrite the context of a job another transaction enqueued."""

from __future__ import annotations

import json

import psycopg
from opentelemetry.sdk.trace import TracerProvider

import pgq
import pgq.otel

from .conftest import Roles
from .test_roles import assert_refused, rows, table_state

SETTER = "pgq.trace_context_set(bigint[], jsonb[])"
CONTEXT = json.dumps({"traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"})


def test_a_producer_sets_the_context_of_its_own_new_jobs_only(roles: Roles) -> None:
    with pgq.Queue(roles.producer) as traced:
        pgq.otel.instrument(traced, tracer_provider=TracerProvider())
        mine = traced.enqueue("k", {"n": 1})
    with pgq.Queue(roles.dsn) as admin:
        other = admin.enqueue("k", {"n": 2})  # enqueued untraced, by someone else
    [stored] = rows(roles.dsn, "SELECT trace_context FROM pgq.jobs WHERE id = %s", [mine])
    assert stored["trace_context"]["traceparent"].startswith("00-")
    before = table_state(roles)

    with psycopg.connect(roles.producer, autocommit=True) as conn:
        # Jobs of other transactions: neither set (other) nor overwritten (mine).
        set_now = conn.execute("SELECT pgq.trace_context_set(%s, ARRAY[%s, %s]::jsonb[])",
                               [[mine, other], CONTEXT, CONTEXT]).fetchone()
        assert set_now == (0,)
        with conn.transaction():
            [(new,)] = conn.execute("SELECT pgq.enqueue('k')").fetchall()
            once = conn.execute("SELECT pgq.trace_context_set(ARRAY[%s]::bigint[], ARRAY[%s]::jsonb[])",
                                [new, CONTEXT]).fetchone()
            twice = conn.execute("SELECT pgq.trace_context_set(ARRAY[%s]::bigint[], ARRAY['{}']::jsonb[])",
                                 [new]).fetchone()
        assert (once, twice) == ((1,), (0,))
    assert_refused(roles.producer, "UPDATE pgq.jobs SET trace_context = '{}'")
    assert_refused(roles.producer, "INSERT INTO pgq.jobs (kind, trace_context) VALUES ('direct', '{}')")
    after = table_state(roles)
    assert [r for r in after[0] if r["id"] != new] == before[0]
    [(public,)] = [tuple(r.values()) for r in rows(
        roles.dsn, f"SELECT has_function_privilege('public', '{SETTER}', 'EXECUTE') AS x")]
    assert public is False
