"""Sequences (revision 0017) and the roles: a sequenced job is enqueued through pgq.enqueue_after
alone, which chains it to its key's tail. Neither a producer nor a worker can write
pgq.sequence_tails or set pgq.jobs.sequence_key by a plain INSERT (a job outside its chain, or a
tail that skips one), but a producer enqueues sequenced jobs through the functions of its grant."""

from __future__ import annotations

import psycopg
import pytest

import pgq
from pgq.models import JobStatus

from .conftest import Roles
from .test_roles import rows

_WRITES = [
    "INSERT INTO pgq.sequence_tails (queue, sequence_key, job_id) VALUES ('default', 's', 1)",
    "UPDATE pgq.sequence_tails SET job_id = NULL",
    "DELETE FROM pgq.sequence_tails",
    "INSERT INTO pgq.jobs (kind, sequence_key) VALUES ('k', 's')",
    "UPDATE pgq.jobs SET sequence_key = 'other'",
]


@pytest.mark.parametrize("who", ["producer", "worker"])
def test_only_the_enqueue_functions_write_a_sequence(roles: Roles, who: str) -> None:
    login = getattr(roles, who)
    with pgq.Queue(login) as q:
        first = q.enqueue("k", sequence_key="s")
        second = q.enqueue("k", sequence_key="s")
        (third,) = rows(login, "SELECT pgq.enqueue('k', sequence_key => 's') AS id")
        assert [q.get(i).status for i in (first, second, third["id"])] == [
            JobStatus.QUEUED, JobStatus.WAITING, JobStatus.WAITING]
    for statement in _WRITES:
        with psycopg.connect(login, autocommit=True) as conn, pytest.raises(psycopg.errors.InsufficientPrivilege):
            conn.execute(statement.encode())
    # Nothing got through: the key's tail is still the last job enqueued.
    assert rows(roles.dsn, "SELECT job_id FROM pgq.sequence_tails") == [{"job_id": third["id"]}]
    assert rows(roles.dsn, "SELECT count(*) AS n FROM pgq.jobs WHERE sequence_key IS NOT NULL") == [{"n": 3}]
