"""Uniqueness variants (revision 0018) and the roles: pgq.key_finishes is written only by the purge
trigger, never by a producer or a worker, while a producer enqueues with unique_for, replace and
debounce through Queue.enqueue and the SQL API pgq.enqueue (pgq.enqueue_unique in its grant)."""

from __future__ import annotations

import datetime as dt

import psycopg
import pytest

import pgq

from .conftest import Roles
from .test_roles import rows

_WRITES = [
    "INSERT INTO pgq.key_finishes (queue, dedupe_key, job_id, finished_at) VALUES ('default', 'u', 1, now())",
    "UPDATE pgq.key_finishes SET finished_at = now()",
    "DELETE FROM pgq.key_finishes",
]


@pytest.mark.parametrize("who", ["producer", "worker"])
def test_no_role_writes_key_finishes(roles: Roles, who: str) -> None:
    login = getattr(roles, who)
    for statement in _WRITES:
        with psycopg.connect(login, autocommit=True) as conn, pytest.raises(psycopg.errors.InsufficientPrivilege):
            conn.execute(statement.encode())


def test_a_producer_enqueues_every_variant(roles: Roles) -> None:
    with pgq.Queue(roles.producer) as q:
        u = q.enqueue("k", dedupe_key="u", unique_for=dt.timedelta(hours=1))
        assert q.enqueue("k", dedupe_key="u", unique_for=dt.timedelta(hours=1)) == u
        r = q.enqueue("k", {"v": 1}, dedupe_key="r", on_conflict="replace")
        assert q.enqueue("k", {"v": 2}, dedupe_key="r", on_conflict="replace") == r
        d = q.enqueue("k", {"v": 1}, dedupe_key="d", debounce=5)
    got = rows(roles.producer,
               "SELECT pgq.enqueue('k', dedupe_key => 'u', unique_for => interval '1 hour') AS u, "
               "       pgq.enqueue('k', '{\"v\": 3}', dedupe_key => 'r', on_conflict => 'replace') AS r, "
               "       pgq.enqueue('k', '{\"v\": 2}', dedupe_key => 'd', debounce => interval '5 seconds') AS d")
    assert got == [{"u": u, "r": r, "d": d}]
    assert rows(roles.dsn, "SELECT dedupe_key, payload FROM pgq.jobs ORDER BY id") == [
        {"dedupe_key": "u", "payload": {}}, {"dedupe_key": "r", "payload": {"v": 3}},
        {"dedupe_key": "d", "payload": {"v": 2}}]
