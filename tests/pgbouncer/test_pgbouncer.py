"""pgq through a real PgBouncer in transaction pooling mode (see conftest.py for the setup).

What breaks behind such a pooler is session state: consecutive transactions of one client connection
run on whichever server connection is free. These tests show the failure pgq avoids (psycopg's
automatic prepared statements) and run every kind of statement pgq has through PgBouncer: enqueue,
claim (both claim paths), complete, fail and retry, heartbeat, snooze, rescue, maintenance leadership
by transaction-level row locks (pgq.lead), and workers (with LISTEN on a direct connection, or polling).
"""

from __future__ import annotations

import asyncio
import collections
import datetime as dt
import logging
import os
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path
from typing import Any

import psycopg
import pytest
from psycopg import sql
from psycopg.rows import dict_row

import pgq
from pgq import JobStatus, LeaseLost, PgqError, Queue
from pgq.worker.maintenance import RESCUE_LOCK_KEY, Rescuer

from ..conftest import reap, stop_with_sigterm
from ..worker.conftest import LISTENER, wait_for
from .conftest import Bouncer, running_bouncer

LISTENERS_SQL = f"SELECT count(*) AS n FROM pg_stat_activity WHERE {LISTENER}"


def direct_rows(bouncer: Bouncer, query: str, params: Any = None) -> list[dict[str, Any]]:
    """Run one statement on a direct (not pooled) connection to the test database."""
    with psycopg.connect(bouncer.direct_dsn, autocommit=True, row_factory=dict_row) as conn:
        cur = conn.execute(query.encode(), params)
        return cur.fetchall() if cur.description else []


# ---------------------------------------------------------------------------------------------
# What goes wrong without the setting


def test_psycopg_prepared_statements_break_across_clients_sharing_a_server_connection(bouncer: Bouncer) -> None:
    # Both clients' transactions run on the single server connection of `pgq_single`. psycopg names
    # its prepared statements _pg3_0, _pg3_1 ... per client connection, so the second client's
    # automatic PREPARE collides with the first one's.
    first = psycopg.connect(bouncer.single_dsn, autocommit=True)
    second = psycopg.connect(bouncer.single_dsn, autocommit=True)
    try:
        for n in range(8):
            assert first.execute("SELECT %s::int + 1", (n,)).fetchone() == (n + 1,)
        with pytest.raises((psycopg.errors.DuplicatePreparedStatement, psycopg.errors.InvalidSqlStatementName)):
            for n in range(8):
                second.execute("SELECT %s::int + 2", (n,)).fetchone()
    finally:
        first.close()
        second.close()
    # With prepare_threshold=None (what pgbouncer=True sets) the same traffic is fine.
    first = psycopg.connect(bouncer.single_dsn, autocommit=True, prepare_threshold=None)
    second = psycopg.connect(bouncer.single_dsn, autocommit=True, prepare_threshold=None)
    try:
        for n in range(20):
            assert first.execute("SELECT %s::int + 1", (n,)).fetchone() == (n + 1,)
            assert second.execute("SELECT %s::int + 2", (n,)).fetchone() == (n + 2,)
    finally:
        first.close()
        second.close()


def test_queue_without_pgbouncer_setting_fails_with_a_hint_and_with_it_works(bouncer: Bouncer) -> None:
    with Queue(bouncer.direct_dsn) as direct:
        job_id = direct.enqueue("k", {"n": 1})
    one = Queue(bouncer.single_dsn, min_size=1, max_size=1)
    two = Queue(bouncer.single_dsn, min_size=1, max_size=1)
    try:
        for _ in range(8):
            assert one.get(job_id) is not None
        with pytest.raises(PgqError, match="pgbouncer=True"):
            for _ in range(8):
                two.get(job_id)
    finally:
        one.close()
        two.close()
    one = Queue(bouncer.single_dsn, min_size=1, max_size=1, pgbouncer=True)
    two = Queue(bouncer.single_dsn, min_size=1, max_size=1, pgbouncer=True)
    try:
        for _ in range(20):
            assert one.get(job_id) is not None
            assert two.get(job_id) is not None
    finally:
        one.close()
        two.close()


def test_the_utc_session_zone_stays_with_pgq_clients_on_a_shared_server_connection(bouncer: Bouncer) -> None:
    """pgq's pools set TimeZone to UTC on their connections (sql/session_utc.sql). Through PgBouncer
    that is session state on a server connection other clients get in turn: PgBouncer tracks
    TimeZone per client and sets it again on each switch, so the other client keeps its own zone and
    pgq's keep UTC, alternating on the one server connection of `single_dsn`."""
    with psycopg.connect(bouncer.direct_dsn, autocommit=True) as direct:
        database = sql.Identifier(direct.info.dbname)
        # New sessions of this test's database (PgBouncer's server connections included) start in Rome.
        direct.execute(sql.SQL("ALTER DATABASE {} SET TimeZone = 'Europe/Rome'").format(database))
    try:
        with Queue(bouncer.direct_dsn) as q:
            job_id = q.enqueue("k", {"n": 1})
        other = psycopg.connect(bouncer.single_dsn, autocommit=True, prepare_threshold=None)
        try:
            with Queue(bouncer.single_dsn, min_size=1, max_size=1, pgbouncer=True) as q:
                for _ in range(10):
                    job = q.get(job_id)
                    assert job is not None and job.created_at.tzinfo is dt.UTC
                    assert other.execute("SHOW TimeZone").fetchone() == ("Europe/Rome",)
                    row = other.execute("SELECT created_at FROM pgq.jobs WHERE id = %s", (job_id,)).fetchone()
                    assert row is not None and row[0] == job.created_at
        finally:
            other.close()
    finally:
        with psycopg.connect(bouncer.direct_dsn, autocommit=True) as direct:
            direct.execute(sql.SQL("ALTER DATABASE {} RESET TimeZone").format(database))


def test_queue_refuses_pgbouncer_with_a_pool_that_prepares(bouncer: Bouncer) -> None:
    from psycopg_pool import ConnectionPool

    with ConnectionPool(bouncer.dsn, min_size=1, kwargs={"autocommit": True}, open=True) as pool:
        with pytest.raises(PgqError, match="prepare_threshold"):
            Queue(pool, pgbouncer=True)
        with pytest.raises(PgqError, match="prepare_threshold"):
            pgq.App(pool, pgbouncer=True)
    with ConnectionPool(bouncer.dsn, min_size=1, kwargs={"autocommit": True, "prepare_threshold": None},
                        open=True) as pool:
        queue = Queue(pool, pgbouncer=True)
        assert queue.enqueue("k") > 0
        assert pgq.App(pool, pgbouncer=True).connect_kwargs["prepare_threshold"] is None


# ---------------------------------------------------------------------------------------------
# The queue API through PgBouncer


def test_queue_lifecycle_through_pgbouncer_from_racing_threads(bouncer: Bouncer) -> None:
    # Precondition: clients really share server connections (4 client connections, at most 2 backends).
    clients = [psycopg.connect(bouncer.dsn, autocommit=True, prepare_threshold=None) for _ in range(4)]
    try:
        for _ in range(5):
            pids = {c.execute("SELECT pg_backend_pid()").fetchone() for c in clients}
            assert len(pids) <= 2
    finally:
        for c in clients:
            c.close()
    xacts_before = int(bouncer.stats()["total_xact_count"])

    queue = Queue(bouncer.dsn, max_size=8, pgbouncer=True)
    try:
        ids = queue.enqueue_many([pgq.JobSpec("work", {"n": n}, queue="pb") for n in range(150)])
        ids += [queue.enqueue("flaky", {"n": n}, queue="pb") for n in range(10)]
        ids += [queue.enqueue("snoozy", {"n": n}, queue="pb") for n in range(5)]
        ids += [queue.enqueue("limited", {"n": n}, queue="pb") for n in range(6)]
        # A concurrency limit sends every claim down the general path: two statements in one
        # transaction (lock the limits, then claim), which must stay on one server connection.
        queue.set_concurrency_limit("limited", 2)
        completed: list[int] = []
        snoozed: set[int] = set()
        errors: list[BaseException] = []
        lock = threading.Lock()

        def work(name: str) -> None:
            try:
                deadline = time.monotonic() + 60
                while len(completed) < len(ids):
                    assert time.monotonic() < deadline, f"{name}: jobs left after 60 s"
                    claims = queue.claim(worker=name, queues=["pb"], limit=4, lease=30)
                    if not claims:
                        time.sleep(0.01)  # the rest is running elsewhere or due in a moment
                        continue
                    queue.heartbeat(claims)
                    for claim in claims:
                        job = claim.job
                        if job.kind == "flaky" and job.attempts == 1:
                            assert queue.fail(claim, "first attempt fails", retry_in=0).status is JobStatus.QUEUED
                        elif job.kind == "snoozy" and job.id not in snoozed:
                            with lock:
                                snoozed.add(job.id)
                            assert queue.snooze(claim, 0).status is JobStatus.QUEUED
                        else:
                            assert queue.complete(claim, {"by": name}) is JobStatus.SUCCEEDED
                            with lock:
                                completed.append(job.id)
            except BaseException as exc:
                errors.append(exc)

        threads = [threading.Thread(target=work, args=(f"t{i}",)) for i in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(90)
        assert not errors, errors
        assert sorted(completed) == sorted(ids)  # every job completed, each exactly once
        assert collections.Counter(completed).most_common(1)[0][1] == 1
        jobs = {j.id: j for j in queue.list(queue="pb", limit=1000)}
        assert {j.status for j in jobs.values()} == {JobStatus.SUCCEEDED}
        assert all(jobs[i].attempts == (2 if jobs[i].kind == "flaky" else 1) for i in ids)
        assert snoozed == {i for i in ids if jobs[i].kind == "snoozy"}

        # Rescue: a lease expires on the database clock, rescue takes the job back, the old token dies.
        lost = queue.enqueue("lost", queue="pb-rescue")
        (stale,) = queue.claim(worker="dies", queues=["pb-rescue"], lease=0.3)
        wait_for(lambda: lost in queue.rescue_expired(), 15, "the expired lease to be rescued")
        job = queue.get(lost)
        assert job is not None and job.status is JobStatus.QUEUED and job.attempts == 1
        with pytest.raises(LeaseLost):
            queue.heartbeat([stale])
        with pytest.raises(LeaseLost):
            queue.complete(stale)
        (fresh,) = queue.claim(worker="lives", queues=["pb-rescue"], lease=30)
        assert queue.complete(fresh) is JobStatus.SUCCEEDED
        job = queue.get(lost)
        assert job is not None and job.attempts == 2 and job.claimed_by == "lives"
    finally:
        queue.close()
    # It all went through PgBouncer: at least one transaction per completed job on its `pgq` entry
    # (claims, heartbeats and the rest come on top; its counters may lag a little behind).
    assert int(bouncer.stats()["total_xact_count"]) - xacts_before > len(ids)


def test_maintenance_leadership_through_pgbouncer_uses_transaction_locks_only(bouncer: Bouncer) -> None:
    with Queue(bouncer.dsn, pgbouncer=True) as queue:
        job_id = queue.enqueue("lost", queue="m")
        queue.claim(worker="dies", queues=["m"], lease=0.2)
    wait_for(lambda: direct_rows(bouncer, "SELECT lease_expires_at < now() AS x FROM pgq.jobs WHERE id = %s",
                                 (job_id,))[0]["x"], 15, "the lease to expire on the database clock")

    async def scenario() -> tuple[pgq.worker.maintenance.StepResult, pgq.worker.maintenance.StepResult]:
        async with pgq.AsyncQueue(bouncer.dsn, pgbouncer=True) as queue:
            rescuer = Rescuer(queue)
            holder = await psycopg.AsyncConnection.connect(bouncer.direct_dsn)
            try:  # another "worker" leads this step right now (in an open transaction)
                cur = await holder.execute("SELECT pgq.lead(%s)", (RESCUE_LOCK_KEY,))
                assert await cur.fetchone() == (True,)
                follower = await rescuer.run_once()
                await holder.commit()
            finally:
                await holder.close()
            return follower, await rescuer.run_once()

    follower, leader = asyncio.run(scenario())
    assert follower.leader is False and follower.counts == {}
    assert leader.leader is True and leader.counts == {"requeued": 1, "failed": 0}
    # The leader's lock ended with its transaction: no pooled server connection keeps it.
    assert direct_rows(bouncer, "SELECT pgq.lead(%s) AS got", (RESCUE_LOCK_KEY,))[0]["got"] is True


# ---------------------------------------------------------------------------------------------
# Workers through PgBouncer


def test_workers_through_pgbouncer_listen_direct_or_poll(bouncer: Bouncer, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="pgq.worker")
    app = pgq.App(bouncer.dsn, pgbouncer=True)
    runs: collections.Counter[int] = collections.Counter()

    @app.task(queue="w")
    async def work(n: int) -> int:
        runs[pgq.current_job().id] += 1
        return n

    @app.periodic(every=1, queue="w")
    async def tick() -> None:
        runs[pgq.current_job().id] += 1

    producer = Queue(bouncer.dsn, pgbouncer=True)

    def succeeded(ids: list[int]) -> bool:
        return all((j := producer.get(i)) is not None and j.status is JobStatus.SUCCEEDED for i in ids)

    stopping_from: list[dt.datetime] = []  # the database's time as the workers begin to stop

    async def scenario() -> tuple[pgq.Worker, pgq.Worker]:
        # Worker A: statements through PgBouncer, LISTEN on the direct connection, a poll interval
        # far longer than the test, so only NOTIFY can wake it.
        listening = pgq.Worker(app, queues=["w"], concurrency=8, lease=5, poll_interval=120, claimed_by="listens",
                               listen_dsn=bouncer.direct_dsn, rescue_interval=0.3)
        a = asyncio.create_task(listening.run_async())
        try:
            await asyncio.to_thread(wait_for, lambda: direct_rows(bouncer, LISTENERS_SQL)[0]["n"] == 1, 15,
                                    "worker A's LISTEN on the direct connection")
            # Producer calls run in threads: a blocking call on this loop would stall the workers'
            # open transactions, which hold the two server connections the call waits for.
            first = await asyncio.to_thread(producer.enqueue, "work", {"n": -1}, queue="w")
            await asyncio.to_thread(wait_for, lambda: succeeded([first]), 15, "the first job")
            # A is idle now, its next poll two minutes away: these run only if NOTIFY reaches it.
            ids = await asyncio.to_thread(producer.enqueue_many,
                                          [pgq.JobSpec("work", {"n": n}, queue="w") for n in range(60)])
            await asyncio.to_thread(wait_for, lambda: succeeded(ids), 20, "NOTIFY to wake worker A")

            # Worker B: PgBouncer only, no listen_dsn: it must poll, and never LISTEN through the pooler.
            # Queue w-poll is B's alone: A, prefetching fast jobs, may well take every job of w.
            polling = pgq.Worker(app, queues=["w", "w-poll"], concurrency=8, lease=5, poll_interval=0.2,
                                 claimed_by="polls", rescue_interval=0.3)
            b = asyncio.create_task(polling.run_async())
            try:
                more = await asyncio.to_thread(producer.enqueue_many,
                                               [pgq.JobSpec("work", {"n": n}, queue=q) for n in range(100)
                                                for q in ("w", "w-poll")])

                def die() -> int:  # a dead worker's job, for maintenance to rescue
                    lost = producer.enqueue("work", {"n": 999}, queue="w-lost")
                    producer.claim(worker="dead", queues=["w-lost"], lease=0.3)
                    return lost

                lost = await asyncio.to_thread(die)
                await asyncio.to_thread(wait_for, lambda: succeeded(more), 30, "both workers to finish the jobs")
                await asyncio.to_thread(
                    wait_for, lambda: (j := producer.get(lost)) is not None and j.status is JobStatus.QUEUED,
                    15, "maintenance (through PgBouncer) to rescue the dead worker's job")
                listeners = await asyncio.to_thread(direct_rows, bouncer, LISTENERS_SQL)
                assert listeners[0]["n"] == 1  # still only A listens
                await asyncio.sleep(2.5)  # let a few periodic ticks come due (one per second)
                stopping_from.append((await asyncio.to_thread(direct_rows, bouncer, "SELECT now() AS t"))[0]["t"])
            finally:
                polling.stop()
                await asyncio.wait_for(b, 20)
        finally:
            listening.stop()
            await asyncio.wait_for(a, 20)
        return listening, polling

    try:
        listening, polling = asyncio.run(scenario())
        jobs = producer.list(queue="w", limit=1000) + producer.list(queue="w-poll", limit=1000)
    finally:
        producer.close()
    # A tick that comes due as the workers stop may stay queued for the next worker (claimed and
    # released unstarted, or not claimed by a worker already stopping: seen under load); every job
    # before it ran, exactly once.
    left = [j for j in jobs if j.status is not JobStatus.SUCCEEDED]
    assert all(j.kind == "tick" and j.status is JobStatus.QUEUED for j in left), left
    assert all(j.run_at >= stopping_from[0] - dt.timedelta(seconds=1) for j in left), (left, stopping_from)
    assert all(runs[j.id] == 1 for j in jobs if j.status is JobStatus.SUCCEEDED)  # each job ran exactly once
    assert len(runs) == len(jobs) - len(left)
    ticks = [j for j in jobs if j.kind == "tick"]
    assert ticks and len({j.dedupe_key for j in ticks}) == len(ticks)  # each tick enqueued once
    assert polling.stats["succeeded"] >= 100 and listening.stats["succeeded"] > 61
    poll_lines = [r for r in caplog.records if getattr(r, "event", None) == "worker_poll_only"]
    assert [r.getMessage().split(":")[0] for r in poll_lines] == ["worker polls"]
    assert "polling every 0.2 s" in poll_lines[0].getMessage()


CLI_APP = textwrap.dedent(
    """
    import os

    import pgq

    app = pgq.App(os.environ["PB_APP_DSN"])


    @app.task(name="pb.square", queue="cli")
    def square(n: int) -> int:
        return n * n
    """
)


def test_pgq_worker_command_with_pgbouncer_and_listen_dsn(bouncer: Bouncer, tmp_path: Path) -> None:
    (tmp_path / "pb_app.py").write_text(CLI_APP)
    env = {k: v for k, v in os.environ.items() if k != "PGQ_DSN"}
    env["PB_APP_DSN"] = bouncer.dsn  # a plain App: the command line says it is a PgBouncer
    enqueued = subprocess.run(
        [sys.executable, "-m", "pgq", "enqueue", "pb.square", "--queue", "cli", "--payload", '{"n": 7}',
         "--dsn", bouncer.dsn, "--pgbouncer"], env=env, capture_output=True, text=True, timeout=60)
    assert enqueued.returncode == 0, enqueued.stderr
    first = int(enqueued.stdout.strip())
    proc = subprocess.Popen(
        [sys.executable, "-m", "pgq", "worker", "pb_app:app", "--pgbouncer", "--listen-dsn", bouncer.direct_dsn,
         "--queue", "cli", "--poll-interval", "120", "--concurrency", "4", "--drain-timeout", "5"],
        cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        with Queue(bouncer.dsn, pgbouncer=True) as queue:
            def done(ids: list[int]) -> bool:
                assert proc.poll() is None, proc.communicate()[1]
                return all((j := queue.get(i)) is not None and j.status is JobStatus.SUCCEEDED for i in ids)

            wait_for(lambda: done([first]), 30, "the worker to run the job enqueued before it started")
            wait_for(lambda: direct_rows(bouncer, LISTENERS_SQL)[0]["n"] == 1, 15, "the LISTEN connection")
            ids = queue.enqueue_many([pgq.JobSpec("pb.square", {"n": n}, queue="cli") for n in range(30)])
            wait_for(lambda: done(ids), 30, "NOTIFY to wake the worker (its poll interval is 120 s)")
            assert [queue.get(i).result for i in [first, *ids]] == [49] + [n * n for n in range(30)]  # type: ignore[union-attr]
        err = stop_with_sigterm(proc, 30)
    finally:
        reap(proc)
    assert proc.returncode == 0, err
    assert "no listen_dsn" not in err


def test_pgq_migrate_through_pgbouncer(pgq_empty_dsn: str) -> None:
    # A migration is one transaction (DDL and its transaction-level advisory lock): it works through
    # the pooler too, although a DBA will usually migrate over a direct connection.
    with running_bouncer(pgq_empty_dsn) as bouncer:
        env = {k: v for k, v in os.environ.items() if k != "PGQ_DSN"}
        for _ in range(2):  # the second run finds nothing to do
            result = subprocess.run([sys.executable, "-m", "pgq", "migrate", "--dsn", bouncer.dsn, "--pgbouncer"],
                                    env=env, capture_output=True, text=True, timeout=120)
            assert result.returncode == 0, result.stderr
        assert "already at revision" in result.stdout
        with Queue(bouncer.dsn, pgbouncer=True) as queue:
            assert queue.get(queue.enqueue("k")) is not None
