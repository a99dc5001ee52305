"""Least privilege against a real PostgreSQL: connected as a member of each pgq role, what the role
must do works through pgq's Python and SQL APIs, and what it must not do is refused by Postgres
itself (InsufficientPrivilege), leaving the tables unchanged."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from typing import Any

import psycopg
import pytest
from psycopg import sql
from psycopg.errors import InsufficientPrivilege
from psycopg.rows import dict_row

import pgq
from pgq import _ops, migrate
from pgq.cli import main
from pgq.models import JobSpec, JobStatus
from pgq.roles import roles_sql
from pgq.worker.maintenance import Rescuer, StepResult

from ..worker.conftest import DB, freeze_mid_claim, run_worker_until, wait_for
from .conftest import Roles

ENQUEUE_MANY = ("pgq.enqueue_many(text[], jsonb[], text[], smallint[], timestamptz[], double precision[], text[], "
                "bigint[], integer[], text[])")


def rows(dsn: str, query: str, params: Any = None) -> list[dict[str, Any]]:
    """Rows of one statement, run over a connection of its own (autocommit)."""
    with psycopg.connect(dsn, autocommit=True, row_factory=dict_row) as conn:
        cur = conn.execute(query.encode(), params)  # bytes: ad-hoc SQL text of the tests
        return cur.fetchall() if cur.description else []


def table_state(roles: Roles) -> list[list[dict[str, Any]]]:
    """Every row of pgq's tables, read as the superuser: to prove a refused action changed nothing."""
    return [rows(roles.dsn, f"SELECT * FROM pgq.{t} ORDER BY 1, 2")
            for t in ("jobs", "key_watermarks", "concurrency_limits")]


def assert_refused(dsn: str, statement: str, params: Any = None) -> str:
    """Run `statement` as the role of `dsn`; Postgres must refuse it for lack of privilege."""
    with pytest.raises(InsufficientPrivilege) as info:
        rows(dsn, statement, params)
    return str(info.value)


def refused(action: Callable[[], object]) -> str:
    """Call `action` (a pgq API call); Postgres must refuse it for lack of privilege."""
    with pytest.raises(InsufficientPrivilege) as info:
        action()
    return str(info.value)


def seed(roles: Roles) -> dict[str, int]:
    """As the superuser: one queued job, one running job and one failed job in queue `q`."""
    with pgq.Queue(roles.dsn) as q:
        ids = {"queued": q.enqueue("k", {"n": 1}, queue="q", priority=5)}
        ids["running"] = q.enqueue("k", {"n": 2}, queue="q")
        ids["failed"] = q.enqueue("k", {"n": 3}, queue="q")
        claims = q.claim(worker="seed", queues=["q"], limit=2)
        assert [c.id for c in claims] == [ids["running"], ids["failed"]]
        q.fail(claims[1], "boom", final=True)
    return ids


# ---------------------------------------------------------------------------------------------
# The roles themselves


def test_roles_are_nologin_without_superpowers_and_admin_owns_everything(roles: Roles) -> None:
    names = [roles.names.producer, roles.names.worker, roles.names.admin]
    found = rows(roles.dsn, "SELECT rolname, rolcanlogin OR rolsuper OR rolcreaterole OR rolcreatedb OR rolreplication "
                            "OR rolbypassrls AS powers FROM pg_roles WHERE rolname = ANY(%s) ORDER BY 1", [names])
    assert found == [{"rolname": n, "powers": False} for n in sorted(names)]
    owners = rows(roles.dsn, """
        SELECT DISTINCT pg_get_userbyid(o) AS owner FROM (
            SELECT relowner FROM pg_class WHERE relnamespace = 'pgq'::regnamespace
            UNION ALL SELECT proowner FROM pg_proc WHERE pronamespace = 'pgq'::regnamespace
            UNION ALL SELECT typowner FROM pg_type WHERE typnamespace = 'pgq'::regnamespace
            UNION ALL SELECT nspowner FROM pg_namespace WHERE nspname = 'pgq') AS x(o)""")
    assert owners == [{"owner": roles.names.admin}]
    member = rows(roles.dsn, "SELECT pg_has_role(%s, %s, 'USAGE') AS yes", [roles.names.worker, roles.names.producer])
    assert member == [{"yes": True}]


ACLS = """
    SELECT 'rel ' || c.relname, c.relacl::text FROM pg_class c WHERE c.relnamespace = 'pgq'::regnamespace
    UNION ALL SELECT 'col ' || c.relname || '.' || a.attname, a.attacl::text
              FROM pg_attribute a JOIN pg_class c ON c.oid = a.attrelid
              WHERE c.relnamespace = 'pgq'::regnamespace AND a.attacl IS NOT NULL
    UNION ALL SELECT 'fn ' || p.oid::regprocedure::text, p.proacl::text
              FROM pg_proc p WHERE p.pronamespace = 'pgq'::regnamespace
    UNION ALL SELECT 'schema', n.nspacl::text FROM pg_namespace n WHERE n.nspname = 'pgq'
    ORDER BY 1
"""


def test_roles_script_is_idempotent(roles: Roles) -> None:
    from pgq.roles import apply_roles

    before = rows(roles.dsn, ACLS)
    apply_roles(roles.dsn, roles.names.producer.removesuffix("producer"))
    assert rows(roles.dsn, ACLS) == before


def test_enqueue_runs_as_definer_with_a_pinned_search_path_and_no_public_execute(roles: Roles) -> None:
    found = rows(roles.dsn, """
        SELECT p.proname, p.prosecdef, p.proconfig,
               EXISTS (SELECT FROM aclexplode(coalesce(p.proacl, acldefault('f', p.proowner))) a
                       WHERE a.grantee = 0) AS public_execute
        FROM pg_proc p WHERE p.pronamespace = 'pgq'::regnamespace AND p.proname LIKE 'enqueue%%' ORDER BY 1""")
    assert found == [
        {"proname": "enqueue", "prosecdef": False, "proconfig": ["search_path=pg_catalog, pg_temp"],
         "public_execute": False},
        {"proname": "enqueue_after", "prosecdef": True, "proconfig": ["search_path=pg_catalog, pg_temp"],
         "public_execute": False},
        {"proname": "enqueue_many", "prosecdef": True, "proconfig": ["search_path=pg_catalog, pg_temp"],
         "public_execute": False},
        {"proname": "enqueue_unique", "prosecdef": True, "proconfig": ["search_path=pg_catalog, pg_temp"],
         "public_execute": False},
    ]


def test_pgq_roles_prints_the_script_and_rejects_bad_prefixes(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["roles", "--prefix", "acme_"]) == 0
    out = capsys.readouterr().out
    assert out == roles_sql("acme_")
    assert 'CREATE ROLE "acme_producer" NOLOGIN' in out and 'GRANT "acme_producer" TO "acme_worker"' in out
    for bad in ("Acme", "pg_", "1x", "a-b", "x" * 60):
        assert main(["roles", "--prefix", bad]) == 2
        err = capsys.readouterr().err
        assert err.startswith("pgq: error: ") and err.count("\n") == 1


def test_pgq_roles_apply_runs_the_script(roles: Roles, capsys: pytest.CaptureFixture[str]) -> None:
    before = rows(roles.dsn, ACLS)
    prefix = roles.names.producer.removesuffix("producer")
    assert main(["roles", "--apply", "--prefix", prefix, "--dsn", roles.dsn]) == 0
    assert "are set up" in capsys.readouterr().out
    assert rows(roles.dsn, ACLS) == before
    # Without the right to create roles or change owners, nothing happens and the error is one line.
    assert main(["roles", "--apply", "--prefix", "pgq_tnobody_", "--dsn", roles.worker]) == 1
    err = capsys.readouterr().err
    assert err.startswith("pgq: error: database error: permission denied") and err.count("\n") == 1
    assert rows(roles.dsn, "SELECT count(*) AS n FROM pg_roles WHERE rolname LIKE 'pgq\\_tnobody\\_%%'") == [{"n": 0}]


# ---------------------------------------------------------------------------------------------
# Producer


def test_producer_enqueues_and_reads_through_python_and_sql(roles: Roles) -> None:
    with pgq.Queue(roles.producer) as q:
        plain = q.enqueue("k", {"x": 1}, queue="q")
        keyed = q.enqueue("k", {"x": 2}, queue="q", dedupe_key="key", watermark=1)
        # The dedupe path's ON CONFLICT DO UPDATE raises the active job's watermark: the producer has
        # no UPDATE on pgq.jobs, enqueue_many does it with its owner's rights.
        assert q.enqueue("k", {"x": 3}, queue="q", dedupe_key="key", watermark=5) == keyed
        batch = q.enqueue_many([JobSpec("k", {"n": i}, queue="q", dedupe_key=f"b{i % 2}") for i in range(4)])
        assert batch[0] == batch[2] and batch[1] == batch[3]
        job = q.get(plain)
        assert job is not None and job.payload == {"x": 1} and job.status is JobStatus.QUEUED
        assert len(q.list(queue="q", limit=10)) == 4
        assert [s["ready"] for s in q.stats()] == [4]
        assert q.is_dirty("q", "key")
        with psycopg.connect(roles.producer) as conn:  # in the caller's transaction, rolled back
            q.enqueue("k", {"gone": True}, queue="q", conn=conn)
            conn.rollback()
    with psycopg.connect(roles.producer, autocommit=True) as conn:
        [(same,)] = conn.execute(
            "SELECT pgq.enqueue('k', '{\"x\": 4}', queue => 'q', dedupe_key => 'key', watermark => 7)").fetchall()
        [(sql_id,)] = conn.execute("SELECT pgq.enqueue('from_sql', queue => 'q')").fetchall()
        assert conn.execute("SELECT ready FROM pgq.queue_stats").fetchall() == [(5,)]
        assert conn.execute("SELECT count(*) FROM pgq.job_counts").fetchall() == [(2,)]
    assert same == keyed
    # The raise to 7 is a row of pgq.key_raises until a claim, a completion or the settle applies it.
    state = rows(roles.dsn, "SELECT j.id, greatest(j.input_watermark, (SELECT max(r.watermark) FROM pgq.key_raises r "
                            "WHERE r.queue = j.queue AND r.dedupe_key = j.dedupe_key)) AS input_watermark "
                            "FROM pgq.jobs j WHERE j.id IN (%s, %s) ORDER BY j.id", [keyed, sql_id])
    assert state == [{"id": keyed, "input_watermark": 7}, {"id": sql_id, "input_watermark": None}]


def test_producer_cannot_claim_change_or_delete_jobs(roles: Roles) -> None:
    ids = seed(roles)
    before = table_state(roles)
    with pgq.Queue(roles.producer) as q:
        refused(lambda: q.claim(worker="p", queues=["q"]))  # the one-statement claim
        refused(lambda: q.claim(worker="p"))  # the two-step claim (locks limit rows first)
        refused(lambda: q.cancel(ids["queued"]))
        refused(lambda: q.retry(ids["failed"]))
        refused(lambda: q.purge(0))
        refused(lambda: q.rescue_expired())
        refused(lambda: q.set_concurrency_limit("k", 1))
        refused(lambda: q.pause("q"))
        refused(lambda: q.resume("q"))
    for statement in (
        "UPDATE pgq.jobs SET priority = 0",
        "UPDATE pgq.jobs SET input_watermark = 99",
        "DELETE FROM pgq.jobs",
        # A producer inserts a new job's input columns only (sql/job_insert_one.sql): never a running
        # job, a lease, spent attempts or a chosen id.
        "INSERT INTO pgq.jobs (kind, status, lease_token, lease_expires_at) "
        "VALUES ('direct', 'running', gen_random_uuid(), now())",
        "INSERT INTO pgq.jobs (kind, attempts) VALUES ('direct', 3)",
        "INSERT INTO pgq.jobs (id, kind) VALUES (1000000, 'direct')",
        "INSERT INTO pgq.jobs (kind, dedupe_key) VALUES ('direct', 'k')",
        "TRUNCATE pgq.jobs",
        "SELECT id FROM pgq.jobs FOR UPDATE SKIP LOCKED",
        # USAGE on the ids' sequence (revision 0033: the plain INSERT's nextval), not UPDATE.
        "SELECT setval('pgq.jobs_id_seq', 1)",
        "INSERT INTO pgq.key_watermarks VALUES ('q', 'k', 1, 1)",
        "INSERT INTO pgq.concurrency_limits (kind, max_running) VALUES ('k', 1)",
        "DROP TABLE pgq.jobs",
        "DROP VIEW pgq.queue_stats",
    ):
        assert_refused(roles.producer, statement)
    assert table_state(roles) == before
    # Waiting for a result is a producer's right (through pgq.mark_awaited: no UPDATE on pgq.jobs).
    with pgq.Queue(roles.producer) as q, pytest.raises(TimeoutError):
        q.wait(ids["queued"], timeout=0.2)


# ---------------------------------------------------------------------------------------------
# Worker


def test_worker_claims_finishes_heartbeats_snoozes_and_rescues(roles: Roles) -> None:
    with pgq.Queue(roles.producer) as p:
        done, failed, snoozed, keyed, lost = (
            p.enqueue("k", {"n": n}, queue="q", dedupe_key="key" if n == 3 else None, watermark=3 if n == 3 else None)
            for n in range(5)
        )
    with pgq.Queue(roles.worker) as w:
        claims = {c.id: c for c in w.claim(worker="w1", queues=["q"], limit=10, lease=30)}
        assert set(claims) == {done, failed, snoozed, keyed, lost}
        w.heartbeat(claims.values(), lease=60)
        assert w.complete(claims[done], {"ok": True}) is JobStatus.SUCCEEDED
        assert w.fail(claims[failed], "boom").status is JobStatus.QUEUED
        # A worker handing back a job of a kind it does not know says why first (pgq/worker/runner.py).
        assert w._run(_ops.error_set(claims[snoozed], "no worker of queue 'q' knows kind 'k' (w1)")) is True
        assert w.snooze(claims[snoozed], 60).status is JobStatus.QUEUED
        assert [r["unknown_kinds"] for r in w.stats()] == [{"k": 1}]
        assert w.complete(claims[keyed]) is JobStatus.SUCCEEDED  # records the key's processed watermark
        rows(roles.dsn, "UPDATE pgq.jobs SET lease_expires_at = now() - interval '1 s' WHERE id = %s", [lost])
        assert w.rescue_expired() == [lost]
        # Concurrency limits of its tasks, and the exact two-step claim that honours them.
        w.set_concurrency_limit("limited", 1)
        w.enqueue_many([JobSpec("limited", queue="q2"), JobSpec("limited", queue="q2")])
        limited = w.claim(worker="w1", queues=["q2", "q3"], limit=5)
        assert len(limited) == 1
        w.release(limited)
        released = w.get(limited[0].id)
        assert released is not None and released.status is JobStatus.QUEUED
    assert rows(roles.dsn, "SELECT queue, dedupe_key, done_watermark, job_id FROM pgq.key_watermarks") == [
        {"queue": "q", "dedupe_key": "key", "done_watermark": 3, "job_id": keyed}]
    assert rows(roles.dsn, "SELECT kind, max_running FROM pgq.concurrency_limits") == [
        {"kind": "limited", "max_running": 1}]
    assert rows(roles.dsn, "SELECT last_error FROM pgq.jobs WHERE id = %s", [lost])[0]["last_error"].startswith(
        "lease expired")


def test_producer_enqueues_dependents_and_a_worker_finishing_parents_releases_or_cancels_them(
        roles: Roles) -> None:
    with pgq.Queue(roles.producer) as p:
        good, bad = p.enqueue("k", queue="q"), p.enqueue("k", queue="q")
        after_good = p.enqueue("k", queue="q2", depends_on=[good])
        after_both = rows(roles.producer, "SELECT pgq.enqueue('k', '{}', 'q2', depends_on => %s) AS id",
                          [[good, bad]])[0]["id"]
        callback = p.enqueue("k", queue="q2", depends_on=[good, bad], on_parent_failure="run")
    with pgq.Queue(roles.worker) as w:
        claims = {c.id: c for c in w.claim(worker="w1", queues=["q"], limit=10)}
        assert w.complete(claims[good]) is JobStatus.SUCCEEDED
        # Failing a parent cancels a child: an administrator's transition, made by the definer trigger.
        assert w.fail(claims[bad], "boom", final=True).status is JobStatus.FAILED
    state = {r["id"]: (r["status"], r["last_error"]) for r in rows(
        roles.dsn, "SELECT id, status::text, last_error FROM pgq.jobs WHERE id = ANY(%s)",
        [[after_good, after_both, callback]])}
    assert state == {after_good: ("queued", None), after_both: ("cancelled", f"parent job {bad} failed"),
                     callback: ("queued", None)}


def test_worker_cannot_cancel_retry_purge_delete_or_change_the_schema(roles: Roles) -> None:
    ids = seed(roles)
    with pgq.Queue(roles.dsn) as q:
        q.set_concurrency_limit("k", 3)
    before = table_state(roles)
    with pgq.Queue(roles.worker) as w:
        # No UPDATE on pgq.jobs at all (revision 0011): refused before the guard trigger's own message.
        assert "permission denied for table jobs" in refused(lambda: w.cancel(ids["queued"]))
        assert "permission denied for table jobs" in refused(lambda: w.cancel(ids["running"]))
        assert "permission denied for table jobs" in refused(lambda: w.retry(ids["failed"]))
        refused(lambda: w.purge(0))
        refused(lambda: w.set_concurrency_limit("k", None))  # removing a limit is a DELETE
    for statement in (
        "UPDATE pgq.jobs SET status = 'cancelled', finished_at = now(), lease_token = NULL, "
        "lease_expires_at = NULL WHERE status = 'running'",
        "UPDATE pgq.jobs SET status = 'queued', finished_at = NULL WHERE status = 'failed'",
        "UPDATE pgq.jobs SET payload = '{\"evil\": true}'",
        "UPDATE pgq.jobs SET kind = 'other', queue = 'other'",
        "UPDATE pgq.jobs SET priority = -32768",
        "DELETE FROM pgq.jobs",
        "DELETE FROM pgq.key_watermarks",
        "DELETE FROM pgq.concurrency_limits",
        "TRUNCATE pgq.jobs",
        "DROP TABLE pgq.jobs",
        "ALTER TABLE pgq.jobs ADD COLUMN x integer",
        "ALTER TABLE pgq.jobs DISABLE TRIGGER USER",
        "CREATE INDEX ON pgq.jobs (payload)",
        f"DROP FUNCTION {ENQUEUE_MANY}",
        "CREATE TABLE pgq.mine (a integer)",
        "CREATE FUNCTION pgq.mine() RETURNS int LANGUAGE sql AS 'SELECT 1'",
        # USAGE on the ids' sequence (revision 0033: the plain INSERT's nextval), not UPDATE.
        "SELECT setval('pgq.jobs_id_seq', 1)",
    ):
        assert_refused(roles.worker, statement)
    assert table_state(roles) == before


# ---------------------------------------------------------------------------------------------
# Admin, and everybody


def test_admin_cancels_retries_purges_and_migrates(roles: Roles) -> None:
    ids = seed(roles)
    with pgq.Queue(roles.admin) as a:
        assert a.cancel(ids["queued"]).status is JobStatus.CANCELLED
        assert a.retry(ids["failed"]).status is JobStatus.QUEUED
        assert a.cancel(ids["running"]).status is JobStatus.CANCELLED
        assert a.purge(0) == 2
        a.set_concurrency_limit("k", 2)
        a.set_concurrency_limit("k", None)
    migrate.downgrade(roles.admin, "0001")
    assert migrate.current_revision(roles.admin) == "0001"
    migrate.upgrade(roles.admin)
    assert migrate.current_revision(roles.admin) == migrate.head_revision()
    # The grants of the roles survive the admin's migrations.
    with pgq.Queue(roles.producer) as p:
        assert p.enqueue("k", {"after": "migrate"}, queue="q", dedupe_key="d", watermark=1) > 0
    with pgq.Queue(roles.worker) as w:
        assert "permission denied for table jobs" in refused(lambda: w.cancel(ids["failed"]))


@pytest.mark.parametrize("who", ["producer", "worker", "admin"])
def test_nobody_can_create_objects_outside_pgq(roles: Roles, who: str) -> None:
    dsn = getattr(roles, who)
    for statement in (
        "CREATE TABLE public.mine (a integer)",
        "CREATE VIEW public.mine AS SELECT 1 AS a",
        "CREATE FUNCTION public.mine() RETURNS int LANGUAGE sql AS 'SELECT 1'",
        "CREATE SCHEMA mine",
        "CREATE ROLE mine",
    ):
        assert_refused(dsn, statement)
    objects = rows(roles.dsn, "SELECT count(*) AS n FROM pg_class WHERE relnamespace = 'public'::regnamespace")
    assert objects == [{"n": 0}]


# ---------------------------------------------------------------------------------------------
# A real worker connected as the worker role


async def _all_finished(queue: pgq.AsyncQueue) -> bool:
    return not any(s["ready"] or s["scheduled"] or s["running"] for s in await queue.stats())


def test_worker_process_as_worker_role_runs_jobs_and_skips_retention_saying_why(
    roles: Roles, caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO)
    app = pgq.App(roles.producer)  # the app's own queue (defer) is a producer

    @app.task(queue="q", concurrency_limit=2)
    def add(a: int, b: int) -> int:
        return a + b

    @app.task(queue="q")
    async def greet(name: str) -> str:
        return f"hello {name}"

    async def enqueue(queue: pgq.AsyncQueue) -> None:
        await queue.enqueue_many([JobSpec("add", {"a": n, "b": 1}, queue="q") for n in range(10)])
        await queue.enqueue("greet", {"nom": "x"}, queue="q")  # does not fit greet's signature
        await queue.enqueue("greet", {"name": "pgq"}, queue="q")  # the worker keeps going

    async def done(queue: pgq.AsyncQueue) -> bool:
        refusals = [r for r in caplog.records if getattr(r, "event", None) == "maintenance_refused"]
        return bool(refusals) and await _all_finished(queue)

    asyncio.run(run_worker_until(app, done, before=enqueue, dsn=roles.worker, queues=["q"], retention=3600.0,
                                 retention_interval=0.05, concurrency=4))

    jobs = rows(roles.dsn, "SELECT kind, status::text, attempts, payload, result, last_error FROM pgq.jobs ORDER BY id")
    assert [(j["status"], j["result"]) for j in jobs[:10]] == [("succeeded", n + 1) for n in range(10)]
    bad, good = jobs[10:]
    assert (bad["status"], bad["attempts"]) == ("failed", 1)
    assert "task 'greet'" in bad["last_error"] and "'nom'" in bad["last_error"]
    assert (good["status"], good["result"]) == ("succeeded", "hello pgq")
    limits = rows(roles.dsn, "SELECT kind, max_running FROM pgq.concurrency_limits")
    assert limits == [{"kind": "add", "max_running": 2}]
    [refusal] = [r for r in caplog.records if getattr(r, "event", None) == "maintenance_refused"]
    message = refusal.getMessage()
    assert "maintenance step retention disabled" in message and "permission denied" in message
    assert "pgq purge" in message and "\n" not in message
    assert not [r for r in caplog.records if getattr(r, "event", None) == "maintenance_error"]


def test_worker_without_the_right_to_set_limits_runs_jobs_and_says_why(
    roles: Roles, caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO)
    rows(roles.dsn, sql.SQL("REVOKE EXECUTE ON FUNCTION pgq.concurrency_limit_set(text, integer) FROM {}").format(
        sql.Identifier(roles.names.worker)).as_string(None))
    app = pgq.App(roles.producer)

    @app.task(queue="q", concurrency_limit=1)
    def one(n: int) -> int:
        return n

    async def enqueue(queue: pgq.AsyncQueue) -> None:
        await queue.enqueue_many([JobSpec("one", {"n": n}, queue="q") for n in range(3)])

    asyncio.run(run_worker_until(app, _all_finished, before=enqueue, dsn=roles.worker, queues=["q"]))

    assert rows(roles.dsn, "SELECT status::text, count(*) AS n FROM pgq.jobs GROUP BY 1") == [
        {"status": "succeeded", "n": 3}]
    [warning] = [r for r in caplog.records if getattr(r, "event", None) == "concurrency_limit_refused"]
    assert "cannot set the concurrency limit of task one to 1" in warning.getMessage()


def test_worker_connected_as_producer_stops_with_a_clear_error(roles: Roles) -> None:
    app = pgq.App(roles.producer)

    @app.task(queue="q")
    def noop() -> None:
        pass

    with pytest.raises(pgq.PgqError, match=r"may not claim jobs .*grant it pgq_worker"):
        pgq.Worker(app, dsn=roles.producer, queues=["q"], poll_interval=0.1).run()


def test_a_worker_role_ends_only_stalled_sessions_it_may_signal_and_rescues_even_when_it_may_not(
    roles: Roles, caplog: pytest.LogCaptureFixture,
) -> None:
    # Three clients frozen mid-claim: as the worker's own login, as the admin's and as a superuser.
    db = DB(roles.dsn)
    frozen = {who: freeze_mid_claim(roles.dsn, db, 300, queue=f"q{who}", claim_dsn=dsn)
              for who, dsn in (("worker", roles.worker), ("admin", roles.admin), ("superuser", roles.dsn))}
    try:
        async def run_once(dsn: str) -> StepResult:
            async with pgq.AsyncQueue(dsn) as queue:
                return await Rescuer(queue, stalled_after=0.2).run_once()

        time.sleep(0.3)
        result = asyncio.run(run_once(roles.worker))
        assert result.counts == {"requeued": 0, "failed": 0, "sessions_ended": 1}
        wait_for(lambda: frozen["worker"].wait_event(db) is None, 10, "the worker login's frozen session to end")
        assert [frozen[w].wait_event(db) for w in ("admin", "superuser")] == ["ClientWrite", "ClientWrite"]

        # Where the role may not call pg_terminate_backend at all, rescue goes on without that extra.
        db.rows("REVOKE EXECUTE ON FUNCTION pg_terminate_backend(integer, bigint) FROM PUBLIC")
        with pgq.Queue(roles.worker) as w:
            [lost] = w.claim(worker="dead", queues=["qworker"], limit=1, lease=30)
        db.rows("UPDATE pgq.jobs SET lease_expires_at = now() - interval '1 s' WHERE id = %s", [lost.id])
        caplog.set_level(logging.WARNING, logger="pgq")
        result = asyncio.run(run_once(roles.worker))
        assert result.leader and result.counts == {"requeued": 1, "failed": 0}
        [refusal] = [r for r in caplog.records if getattr(r, "event", None) == "maintenance_refused"]
        assert "ending stalled sessions is disabled" in refusal.getMessage()
        assert "permission denied" in refusal.getMessage()

        result = asyncio.run(run_once(roles.dsn))  # a superuser may end them all
        assert result.counts == {"requeued": 0, "failed": 0, "sessions_ended": 2}
        for who in ("admin", "superuser"):
            wait_for(lambda who=who: frozen[who].wait_event(db) is None, 10, f"the {who}'s frozen session to end")
    finally:
        for client in frozen.values():
            client.close()
        db.close()
