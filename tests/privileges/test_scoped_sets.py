"""Services boxed in their queues (issue 40, finding 3): two scoped role sets (`pgq roles --queues`)
beside the unscoped one. Each attack of the issue is a test that expects refusal and checks that
nothing changed: a producer replacing, debouncing or sequencing another service's keyed job, or
reading its payloads, and a worker claiming or rescuing in another service's queues. SET ROLE and
direct table access do not get around it."""

from __future__ import annotations

import asyncio
import datetime as dt
import secrets
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import psycopg
import pytest
from psycopg import sql
from psycopg.conninfo import make_conninfo

import pgq
from pgq import JobSpec
from pgq.cli import main
from pgq.role_sets import apply_scoped, list_role_sets, revoke_role_set
from pgq.worker.maintenance import Rescuer

from ..worker.conftest import run_worker_until
from .conftest import Roles
from .test_roles import assert_refused, rows


@dataclass(frozen=True)
class Service:
    """A scoped role set and a login in each of its roles."""

    prefix: str
    producer: str
    worker: str


@pytest.fixture
def services(roles: Roles) -> Iterator[dict[str, Service]]:
    """Scoped sets `a` (queues a1, a2) and `b` (queue b), with a login in each role, in the database
    of `roles` (whose unscoped set owns pgq)."""
    base = roles.names.producer.removesuffix("producer")
    password = secrets.token_hex(16)
    made: dict[str, Service] = {}
    logins: list[str] = []
    try:
        for name, queues in (("a", ["a1", "a2"]), ("b", ["b"])):
            prefix = f"{base}{name}_"
            apply_scoped(roles.dsn, prefix, queues)
            dsns = {}
            with psycopg.connect(roles.dsn, autocommit=True) as conn:
                for what in ("producer", "worker"):
                    login = f"{prefix}{what[0]}"
                    conn.execute(sql.SQL("CREATE ROLE {} LOGIN PASSWORD {} IN ROLE {}").format(
                        sql.Identifier(login), sql.Literal(password), sql.Identifier(prefix + what)))
                    logins.append(login)
                    dsns[what] = make_conninfo(roles.dsn, user=login, password=password)
            made[name] = Service(prefix, dsns["producer"], dsns["worker"])
        yield made
    finally:
        with psycopg.connect(roles.dsn, autocommit=True) as conn:
            everyone = logins + [s.prefix + w for s in made.values() for w in ("producer", "worker")]
            if everyone:
                conn.execute(sql.SQL("DROP OWNED BY {}").format(sql.SQL(", ").join(map(sql.Identifier, everyone))))
            for role in everyone:
                conn.execute(sql.SQL("DROP ROLE IF EXISTS {}").format(sql.Identifier(role)))


def _jobs(roles: Roles) -> list[dict[str, Any]]:
    return rows(roles.dsn, "SELECT id, queue, kind, payload, priority, run_at, status::text, sequence_key "
                           "FROM pgq.jobs ORDER BY id")


def test_a_scoped_producer_enqueues_every_way_in_its_queues(roles: Roles, services: dict[str, Service]) -> None:
    a = services["a"]
    with pgq.Queue(a.producer) as q:
        parent = q.enqueue("k", queue="a1")
        q.enqueue("k", {"one": 1}, queue="a1")  # the plain INSERT (row security's check)
        q.enqueue_many([JobSpec("k", {"i": i}, queue="a2") for i in range(3)])
        q.enqueue("k", queue="a1", dedupe_key="d")
        q.enqueue("k", queue="a1", depends_on=[parent])
        q.enqueue("k", queue="a2", sequence_key="s")
        q.enqueue("k", {"v": 1}, queue="a1", dedupe_key="r", on_conflict="replace")
        q.enqueue("k", queue="a1", dedupe_key="db", debounce=5)
    assert rows(a.producer, "SELECT pgq.enqueue('k', queue => 'a2') > 0 AS ok") == [{"ok": True}]
    assert {r["queue"] for r in _jobs(roles)} == {"a1", "a2"}
    assert len(_jobs(roles)) == 11


@pytest.mark.parametrize("attempt", [
    "SELECT pgq.enqueue('evil', '{{\"x\": 1}}', queue => 'b')",
    "SELECT pgq.enqueue('evil', '{{\"x\": 1}}', queue => 'b', dedupe_key => 'key', on_conflict => 'replace')",
    "SELECT pgq.enqueue('evil', queue => 'b', dedupe_key => 'key', debounce => interval '1 hour')",
    "SELECT pgq.enqueue('evil', queue => 'b', sequence_key => 'seq')",
    "SELECT pgq.enqueue('evil', queue => 'b', dedupe_key => 'key', unique_for => interval '1 hour')",
    "SELECT pgq.enqueue('evil', queue => 'a1', depends_on => ARRAY[{b_job}]::bigint[])",
    "INSERT INTO pgq.jobs (kind, queue) VALUES ('evil', 'b')",
    "SELECT * FROM pgq.enqueue_many(ARRAY['evil'], ARRAY['{{}}'::jsonb], ARRAY['b'], NULL, NULL, NULL, NULL, NULL, "
    "NULL)",
    "UPDATE pgq.jobs SET payload = '{{}}' WHERE queue = 'b'",
    "DELETE FROM pgq.jobs WHERE queue = 'b'",
    "SELECT * FROM pgq.enqueue_after(ARRAY['evil'], ARRAY['{{}}'::jsonb], ARRAY['b'], NULL, NULL, NULL, NULL, NULL, "
    "'{{}}', '{{}}')",
])
def test_a_scoped_producer_cannot_touch_another_services_queue(
    roles: Roles, services: dict[str, Service], attempt: str,
) -> None:
    with pgq.Queue(services["b"].producer) as q:
        b_job = q.enqueue("kept", {"mine": True}, queue="b", dedupe_key="key", priority=3)
        q.enqueue("kept", queue="b", sequence_key="seq")
    before = _jobs(roles)
    assert_refused(services["a"].producer, attempt.format(b_job=b_job))
    with psycopg.connect(services["a"].producer, autocommit=True) as conn:  # and not after a SET ROLE
        conn.execute(sql.SQL("SET ROLE {}").format(sql.Identifier(services["a"].prefix + "producer")))
        with pytest.raises(psycopg.errors.InsufficientPrivilege):
            conn.execute(attempt.format(b_job=b_job).encode())
    assert _jobs(roles) == before


def test_a_scoped_producer_reads_only_its_queues_jobs(roles: Roles, services: dict[str, Service]) -> None:
    with pgq.Queue(roles.producer) as q:
        theirs = q.enqueue("k", {"secret": 1}, queue="b")
        mine = q.enqueue("k", {"open": 1}, queue="a1")
    a = services["a"]
    assert rows(a.producer, "SELECT id FROM pgq.jobs") == [{"id": mine}]
    with psycopg.connect(a.producer, autocommit=True) as conn:  # SET ROLE changes nothing
        conn.execute(sql.SQL("SET ROLE {}").format(sql.Identifier(a.prefix + "producer")))
        assert conn.execute("SELECT id FROM pgq.jobs").fetchall() == [(mine,)]
    assert rows(a.worker, "SELECT id FROM pgq.jobs") == [{"id": mine}]
    assert rows(a.producer, "SELECT count(*) AS n FROM pgq.mark_awaited(%s)", [theirs]) == [{"n": 0}]
    with pgq.Queue(a.producer) as q:
        assert q.get(theirs) is None
        job = q.get(mine)
        assert job is not None and job.payload == {"open": 1}
    for view in ("pgq.queue_stats", "pgq.queue_backlog", "pgq.job_dependencies", "pgq.sequence_tails"):
        assert_refused(a.producer, f"SELECT * FROM {view}")
    assert rows(roles.producer, "SELECT count(*) AS n FROM pgq.jobs") == [{"n": 2}]  # unscoped: every job


def test_a_scoped_worker_claims_and_rescues_only_in_its_queues(roles: Roles, services: dict[str, Service]) -> None:
    with pgq.Queue(roles.producer) as q:
        q.enqueue_many([JobSpec("k", queue=queue) for queue in ("a1", "a2", "b", "other")])
    a = services["a"]
    with pgq.Queue(a.worker) as w:
        assert w.claim(worker="w", queues=["b", "other"], limit=10) == []
        got = w.claim(worker="dead", limit=10, lease=30)
    assert sorted(c.job.queue for c in got) == ["a1", "a2"]
    with pgq.Queue(roles.worker) as w:
        others = w.claim(worker="dead", limit=10, lease=30)
    assert sorted(c.job.queue for c in others) == ["b", "other"]
    rows(roles.dsn, "UPDATE pgq.jobs SET lease_expires_at = now() - interval '1 s'")

    async def rescue(dsn: str) -> dict[str, int]:
        async with pgq.AsyncQueue(dsn) as queue:
            result = await Rescuer(queue).run_once()
            assert result.leader  # its own leader, whatever other sets' workers do
            return result.counts

    with psycopg.connect(roles.worker) as other:  # the unscoped workers' rescue is running
        assert other.execute("SELECT pgq.lead('rescue')").fetchone() == (True,)
        assert asyncio.run(rescue(a.worker)) == {"requeued": 2, "failed": 0}
    by_queue = {r["queue"]: r["status"] for r in _jobs(roles)}
    assert by_queue == {"a1": "queued", "a2": "queued", "b": "running", "other": "running"}


def test_the_idle_query_answers_for_the_callers_queues_only(roles: Roles, services: dict[str, Service]) -> None:
    """pgq.next_run_at (revision 0035) reads the live partition as its owner: it is the worker's only,
    and a scoped worker learns of no other service's queue, named or not."""
    with pgq.Queue(roles.producer) as q:
        q.enqueue("k", queue="b")  # due now
        q.enqueue("k", queue="a1", delay=dt.timedelta(hours=1))
    due = "SELECT pgq.next_run_at(%s::text[]) AS s"
    for dsn in (roles.producer, services["a"].producer, services["b"].producer):
        assert_refused(dsn, "SELECT pgq.next_run_at(NULL)")
    a, b = services["a"].worker, services["b"].worker
    # The unscoped worker sees both; b's job is due, so the answer is not positive.
    assert rows(roles.worker, due, [None])[0]["s"] <= 0
    # a's worker: only a1's job, an hour ahead, whether it names b's queue or no queue at all.
    for asked in (None, ["a1", "b"], ["b"]):
        got = rows(a, due, [asked])[0]["s"]
        if asked == ["b"]:
            assert got is None
        else:
            assert 3500 < got <= 3600
    assert rows(b, due, [None])[0]["s"] <= 0
    assert rows(b, due, [["a1"]])[0]["s"] is None


def test_scoped_sets_cannot_set_limits_and_unscoped_claims_are_unchanged(
    roles: Roles, services: dict[str, Service],
) -> None:
    assert_refused(services["a"].worker, "INSERT INTO pgq.concurrency_limits (kind, max_running) VALUES ('k', 1)")
    with pgq.Queue(roles.producer) as q:
        q.enqueue_many([JobSpec("k", queue=queue) for queue in ("a1", "b")])
    with pgq.Queue(roles.worker) as w:
        assert sorted(c.job.queue for c in w.claim(worker="w", limit=10)) == ["a1", "b"]


def test_role_sets_are_listed_and_one_is_revoked(roles: Roles, services: dict[str, Service]) -> None:
    a, b = services["a"], services["b"]
    with psycopg.connect(roles.dsn) as conn:
        found = {s.prefix: s for s in list_role_sets(conn)}
    unscoped = roles.names.producer.removesuffix("producer")
    assert (found[unscoped].owns_pgq, found[unscoped].queues) == (True, None)
    assert (found[a.prefix].granted, found[a.prefix].queues) == (True, ("a1", "a2"))
    assert found[b.prefix].queues == ("b",)
    revoke_role_set(roles.dsn, a.prefix)
    assert_refused(a.producer, "SELECT count(*) FROM pgq.jobs")
    assert_refused(a.worker, "SELECT * FROM pgq.claim(NULL, NULL, 1, 60, 'w')")
    with pgq.Queue(b.producer) as q:
        q.enqueue("k", queue="b")
    with pytest.raises(pgq.PgqError, match="owns schema pgq"):
        revoke_role_set(roles.dsn, unscoped)


def test_a_scoped_worker_process_runs_its_queues_jobs_only(
    roles: Roles, services: dict[str, Service], caplog: pytest.LogCaptureFixture,
) -> None:
    a = services["a"]
    app = pgq.App(a.producer)

    @app.task(queue="a1")
    def add(x: int) -> int:
        return x + 1

    with pgq.Queue(roles.producer) as q:  # a job of the kind in another service's queue
        q.enqueue("add", {"x": 0}, queue="b")

    async def enqueue(queue: pgq.AsyncQueue) -> None:
        await queue.enqueue_many([JobSpec("add", {"x": n}, queue="a1") for n in range(5)])

    async def done(queue: pgq.AsyncQueue) -> bool:
        return rows(roles.dsn, "SELECT count(*) AS n FROM pgq.jobs WHERE status = 'succeeded'") == [{"n": 5}]

    asyncio.run(run_worker_until(app, done, before=enqueue, dsn=a.worker, queues=["a1", "b"]))
    assert rows(roles.dsn, "SELECT queue, status::text FROM pgq.jobs WHERE queue = 'b'") == [
        {"queue": "b", "status": "queued"}]
    assert not [r for r in caplog.records if getattr(r, "event", None) == "maintenance_error"]


def test_pgq_roles_prints_a_scoped_sets_script_and_rejects_bad_queue_lists(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["roles", "--prefix", "svc_", "--queues", "mail,o'brien"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("BEGIN;") and out.rstrip().endswith("COMMIT;")
    assert "CREATE POLICY \"svc_scope\" ON pgq.jobs AS RESTRICTIVE TO \"svc_producer\"" in out
    assert "ARRAY['mail', 'o''brien']::text[]" in out and '"svc_admin"' not in out
    for bad in (",", "a,,b", ""):
        assert main(["roles", "--prefix", "svc_", "--queues", bad]) == 2
        assert capsys.readouterr().err.count("\n") == 1
