"""Every write through a function (issue 40, finding 8): a worker used to INSERT, UPDATE and DELETE
the limit tables and pgq.rate_limit_starts directly (an 'infinity' start blocked a kind for good; a
DELETE reset every rate window). Now it sets its tasks' limits through pgq.concurrency_limit_set,
pgq.rate_limit_set and pgq.group_limits_set, which check their input, and writes no pgq table but
the INSERT of a job; the claim keeps the windows itself."""

from __future__ import annotations

import psycopg
import pytest

import pgq
from pgq.cli import main

from .conftest import Roles
from .test_roles import assert_refused, rows

TABLES = ("concurrency_limits", "rate_limits", "rate_limit_starts", "group_limits", "group_rate_starts")


def _state(roles: Roles) -> list[list[dict[str, object]]]:
    return [rows(roles.dsn, f"SELECT * FROM pgq.{t} ORDER BY 1, 2") for t in TABLES]


def _limited(roles: Roles) -> None:
    """As a worker: a rate-limited kind with one start in its window."""
    with pgq.Queue(roles.worker) as w:
        w.set_rate_limit("k", "1/h")
        w.set_concurrency_limit("k", 5)
        w.set_group_limits("g", concurrency=1, rate="2/s")
        with pgq.Queue(roles.producer) as p:
            p.enqueue("k", queue="q")
            p.enqueue("k", queue="q")
        assert len(w.claim(worker="w", queues=["q"], limit=5)) == 1


@pytest.mark.parametrize("statement", [
    "INSERT INTO pgq.rate_limit_starts (kind, at, starts) VALUES ('k', 'infinity', 1)",
    "DELETE FROM pgq.rate_limit_starts",
    "UPDATE pgq.rate_limit_starts SET at = at - interval '1 day'",
    "INSERT INTO pgq.rate_limits (kind, max_starts, per_s) VALUES ('other', 1, 86400)",
    "UPDATE pgq.rate_limits SET max_starts = 1000000",
    "INSERT INTO pgq.concurrency_limits (kind, max_running) VALUES ('other', 1)",
    "UPDATE pgq.concurrency_limits SET max_running = 1000000",
    "INSERT INTO pgq.group_limits (kind, max_running) VALUES ('other', 1)",
    "UPDATE pgq.group_limits SET max_running = 1000000",
    "INSERT INTO pgq.group_rate_starts VALUES ('g', 'x', 'infinity', 1)",
    "DELETE FROM pgq.concurrency_limits",
])
def test_a_worker_writes_no_limit_table_directly(roles: Roles, statement: str) -> None:
    _limited(roles)
    before = _state(roles)
    assert_refused(roles.worker, statement)
    assert _state(roles) == before


@pytest.mark.parametrize("call", [
    "pgq.concurrency_limit_set('', 1)",
    "pgq.concurrency_limit_set('k', 0)",
    "pgq.concurrency_limit_set(NULL, 1)",
    "pgq.rate_limit_set('k', 1, 'NaN')",
    "pgq.rate_limit_set('k', 1, 'Infinity')",
    "pgq.rate_limit_set('k', 0, 1)",
    "pgq.rate_limit_set('k', 1, 1e12)",
    "pgq.group_limits_set('g', 1, 1, NULL)",
    "pgq.group_limits_set('g', 0, NULL, NULL)",
    "pgq.group_limits_set('g', NULL, 1, 'NaN')",
])
def test_the_limit_functions_check_their_input(roles: Roles, call: str) -> None:
    _limited(roles)
    before = _state(roles)
    with pytest.raises(psycopg.errors.InvalidParameterValue):
        rows(roles.worker, f"SELECT {call}")
    assert _state(roles) == before


def test_producers_may_not_set_limits(roles: Roles) -> None:
    _limited(roles)
    before = _state(roles)
    for call in ("pgq.concurrency_limit_set('k', 1)", "pgq.rate_limit_set('k', 1, 1)",
                 "pgq.group_limits_set('g', 1, NULL, NULL)"):
        assert_refused(roles.producer, f"SELECT {call}")
    assert _state(roles) == before


def test_no_pgq_role_but_the_admin_writes_a_table_beyond_inserting_jobs(roles: Roles) -> None:
    """The grants themselves: INSERT, UPDATE, DELETE or TRUNCATE on any table of schema pgq, for the
    producer and the worker role, is only INSERT on pgq.jobs (its input columns): none on its partitions
    (revision 0033), which are tables of their own."""
    found = rows(roles.dsn, """
        SELECT r.rolname AS role, c.relname AS rel, p.priv
        FROM pg_roles r, pg_class c,
             unnest(ARRAY['INSERT', 'UPDATE', 'DELETE', 'TRUNCATE']) AS p(priv)
        WHERE r.rolname IN (%s, %s) AND c.relnamespace = 'pgq'::regnamespace AND c.relkind IN ('r', 'p')
          AND (has_table_privilege(r.oid, c.oid, p.priv)
               OR (p.priv IN ('INSERT', 'UPDATE') AND has_any_column_privilege(r.oid, c.oid, p.priv)))
        ORDER BY 1, 2, 3""", [roles.names.producer, roles.names.worker])
    assert found == [{"role": who, "rel": "jobs", "priv": "INSERT"}
                     for who in sorted([roles.names.producer, roles.names.worker])]


def test_limits_too_large_for_the_database_are_refused_before_sending(
    roles: Roles, capsys: pytest.CaptureFixture[str],
) -> None:
    with pgq.Queue(roles.admin) as a:
        for call in (lambda: a.set_concurrency_limit("k", 2**31), lambda: a.set_group_limits("k", concurrency=2**40),
                     lambda: a.set_rate_limit("k", (2**31, 1.0))):
            with pytest.raises(pgq.InvalidJob):
                call()
    assert main(["queue", "group-limits", "k", "--concurrency", "99999999999", "--dsn", roles.admin]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "at most 2147483647" in err
