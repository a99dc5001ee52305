"""The worker registry (revision 0013) across roles: a producer may read it (and explain jobs) but
write nothing of it; a worker writes only its own row, through the pgq.worker_* functions and the
token its registration returned, which no other pgq role can read; so one worker can neither
refresh, take over nor delete another's row. The prune deletes only stale rows."""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

import pgq
from pgq import _ops
from pgq.worker.maintenance import Rescuer
from pgq.worker.registry import Registry

from .conftest import Roles
from .test_roles import assert_refused, rows

REGISTER = ("SELECT * FROM pgq.worker_register('w', 'h', 1, NULL, '{k}', 1, 10, 5, 'test')")


def _registry(roles: Roles) -> list[dict[str, Any]]:
    return rows(roles.dsn, "SELECT id, token, claimed_by, state, last_seen FROM pgq.workers ORDER BY id")


def test_producer_reads_the_registry_but_cannot_write_it(roles: Roles) -> None:
    (own,) = rows(roles.worker, REGISTER)
    before = _registry(roles)
    for statement in (
        REGISTER,
        "SELECT pgq.worker_prune()",
        "SELECT pgq.worker_seen(%(id)s, %(token)s, 'draining')",
        "SELECT pgq.worker_unregister(%(id)s, %(token)s)",
        "INSERT INTO pgq.workers (claimed_by, host, pid, kinds, slots, lease_s, refresh_s, version) "
        "VALUES ('x', 'h', 1, '{}', 1, 1, 1, 'v')",
        "UPDATE pgq.workers SET last_seen = now()",
        "DELETE FROM pgq.workers",
        "SELECT token FROM pgq.workers",
    ):
        assert_refused(roles.producer, statement, own)
    assert _registry(roles) == before
    with pgq.Queue(roles.producer) as queue:
        (info,) = queue.workers()
        job_id = queue.enqueue("k", queue="q")
        assert queue.explain(job_id).codes == ("ready",)  # the registered worker serves every queue
    assert (info.id, info.claimed_by, info.kinds, info.queues) == (own["id"], "w", ("k",), None)


def test_worker_cannot_touch_another_workers_row(roles: Roles) -> None:
    (victim,) = rows(roles.worker, REGISTER)
    (mine,) = rows(roles.worker, REGISTER)
    before = _registry(roles)
    # Everything a worker can learn of the victim's row is its id: guessing its token changes nothing.
    forged = {"id": victim["id"], "token": uuid.uuid4()}
    assert rows(roles.worker, "SELECT pgq.worker_seen(%(id)s, %(token)s, 'draining') AS ok", forged) == [
        {"ok": False}]
    assert rows(roles.worker, "SELECT pgq.worker_unregister(%(id)s, %(token)s) AS ok", forged) == [{"ok": False}]
    # Its own token does not open another row either.
    crossed = {"id": victim["id"], "token": mine["token"]}
    assert rows(roles.worker, "SELECT pgq.worker_unregister(%(id)s, %(token)s) AS ok", crossed) == [{"ok": False}]
    for statement in ("UPDATE pgq.workers SET state = 'draining'", "DELETE FROM pgq.workers",
                      "SELECT token FROM pgq.workers", "SELECT * FROM pgq.workers"):
        assert_refused(roles.worker, statement)
    # The prune leaves live rows alone.
    assert rows(roles.worker, "SELECT pgq.worker_prune() AS n") == [{"n": 0}]
    assert _registry(roles) == before
    # Its own row it may refresh, mark draining and delete.
    with pgq.Queue(roles.worker) as queue:
        row = _ops.WorkerRow(mine["id"], mine["token"], "draining")
        assert queue._run(_ops.worker_seen(row))
        assert queue._run(_ops.worker_unregister(row))
    assert [r["id"] for r in _registry(roles)] == [victim["id"]]


def test_worker_prunes_only_rows_stale_for_three_leases(roles: Roles) -> None:
    (stale,) = rows(roles.worker, REGISTER)
    (fresh,) = rows(roles.worker, REGISTER)
    (recent,) = rows(roles.worker, REGISTER)
    # lease 10 s: 31 s without a refresh is stale, 29 s is not yet.
    rows(roles.dsn, "UPDATE pgq.workers SET last_seen = now() - interval '31 s' WHERE id = %s", [stale["id"]])
    rows(roles.dsn, "UPDATE pgq.workers SET last_seen = now() - interval '29 s' WHERE id = %s", [recent["id"]])
    assert rows(roles.worker, "SELECT pgq.worker_prune() AS n") == [{"n": 1}]
    assert {r["id"] for r in _registry(roles)} == {fresh["id"], recent["id"]}


def test_a_worker_refused_the_registry_still_rescues(roles: Roles) -> None:
    # A role set up by hand without revision 0013's grants: the registry is refused, the rescue is not.
    rows(roles.dsn, f'REVOKE EXECUTE ON FUNCTION pgq.worker_seen(uuid, uuid, text), pgq.worker_prune() '
                    f'FROM "{roles.names.worker}"')
    with pgq.Queue(roles.dsn) as q:
        job_id = q.enqueue("k", queue="q")
        q.claim(worker="dead", queues=["q"])
    rows(roles.dsn, "UPDATE pgq.jobs SET lease_expires_at = now() - interval '1 s' WHERE id = %s", [job_id])

    async def scenario() -> tuple[bool, bool, dict[str, int], bool]:
        async with pgq.AsyncQueue(roles.worker) as queue:
            registry = Registry(queue, claimed_by="w", queues=None, kinds=["k"], slots=1, lease_s=10, interval=5)
            registered = await registry.register()
            result = await Rescuer(queue, registry=registry).run_once()
            return registered, registry.enabled, result.counts, registry.for_refresh() is None

    assert asyncio.run(scenario()) == (True, False, {"requeued": 1, "failed": 0}, True)
    assert rows(roles.dsn, "SELECT status::text FROM pgq.jobs WHERE id = %s", [job_id]) == [{"status": "queued"}]
