"""Workers as real processes (tests/worker/runner.py running worker_app.py): killed, terminated, several
at once, and across a PostgreSQL restart. Outcomes are checked in the database, and handler side
effects in the `effects` table the handlers write with their own connections."""

from __future__ import annotations

import datetime as dt
import signal
import time
from collections.abc import Callable

import pytest

import pgq
from pgq.testing import EmbeddedServer

from .conftest import DB, WorkerProcess, wait_for

pytestmark = pytest.mark.slow

Spawn = Callable[..., WorkerProcess]


def effects(db: DB, note: str | None = None) -> list[dict[str, object]]:
    return db.rows("SELECT job_id, attempt, token, pid, note FROM effects "
                   "WHERE %(note)s::text IS NULL OR note = %(note)s ORDER BY id", {"note": note})


def test_sigkill_mid_job_is_rescued_and_the_dead_attempt_is_fenced_out(
    pgq_queue: pgq.Queue, db: DB, spawn_worker: Spawn
) -> None:
    # Worker A takes the job with a short lease and dies (SIGKILL) in the middle of it.
    job_id = pgq_queue.enqueue("hold", {"n": 1, "seconds": 60}, queue="work")
    victim = spawn_worker("--lease", "1.5", "--name", "victim")
    first = wait_for(lambda: effects(db, "started"), 15, "the first attempt to start")[0]
    victim.signal(signal.SIGKILL)
    assert victim.wait(5) == -signal.SIGKILL
    # Worker B rescues it once the lease has expired (rescue runs every lease/2) and completes it.
    spawn_worker("--lease", "1.5", "--name", "rescuer")
    wait_for(lambda: db.status_counts() == {"succeeded": 1}, 20, "the rescued job to succeed")
    job = pgq_queue.get(job_id)
    assert job is not None and job.attempts == 2 and job.claimed_by == "rescuer"
    assert "lease expired" in (job.last_error or "")
    runs = effects(db)
    assert [(r["attempt"], r["note"]) for r in runs] == [(1, "started"), (2, "started"), (2, "finished")]
    # The killed attempt's completion, arriving late with its old token, is refused and changes nothing.
    late = pgq.Claim(job=job, token=str(first["token"]), lease=dt.timedelta(seconds=60))
    with pytest.raises(pgq.LeaseLost):
        pgq_queue.complete(late, result="stale")
    with pytest.raises(pgq.LeaseLost):
        pgq_queue.fail(late, "stale failure")
    after = pgq_queue.get(job_id)
    assert after is not None and (after.status, after.result) == (pgq.JobStatus.SUCCEEDED, "done")


def test_sigterm_lets_running_jobs_finish_within_the_drain_timeout(
    pgq_queue: pgq.Queue, db: DB, spawn_worker: Spawn
) -> None:
    worker = spawn_worker("--concurrency", "4", "--drain-timeout", "10", "--lease", "30")
    pgq_queue.enqueue_many([{"kind": "nap", "payload": {"n": i, "seconds": 1.0}, "queue": "work"}
                            for i in range(3)])
    wait_for(lambda: len(effects(db, "started")) == 3, 15, "three jobs running")
    sent = time.monotonic()
    worker.signal(signal.SIGTERM)
    assert worker.wait(10) == 0
    assert time.monotonic() - sent < 5
    assert db.status_counts() == {"succeeded": 3}
    assert len(effects(db, "finished")) == 3
    assert "worker exited cleanly" in worker.log()


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_run_async_with_its_defaults_drains_on_sigterm_and_sigint(
    pgq_queue: pgq.Queue, db: DB, spawn_worker: Spawn, sig: signal.Signals
) -> None:
    worker = spawn_worker("--async", "--concurrency", "4", "--drain-timeout", "10", "--lease", "30")
    pgq_queue.enqueue_many([{"kind": "nap", "payload": {"n": i, "seconds": 1.0}, "queue": "work"}
                            for i in range(2)])
    wait_for(lambda: len(effects(db, "started")) == 2, 15, "two jobs running")
    worker.signal(sig)
    assert worker.wait(10) == 0
    assert db.status_counts() == {"succeeded": 2}
    assert len(effects(db, "finished")) == 2
    assert "draining" in worker.log() and "worker exited cleanly" in worker.log()


def test_sigterm_past_the_drain_timeout_puts_jobs_back_at_once(
    pgq_queue: pgq.Queue, db: DB, spawn_worker: Spawn
) -> None:
    worker = spawn_worker("--concurrency", "4", "--drain-timeout", "0.5", "--lease", "60")
    pgq_queue.enqueue("hold", {"n": 1, "seconds": 60}, queue="work")  # sync, blocks its thread
    pgq_queue.enqueue("nap", {"n": 2, "seconds": 60}, queue="work")  # async
    wait_for(lambda: len(effects(db, "started")) == 2, 15, "both jobs running")
    sent = time.monotonic()
    worker.signal(signal.SIGTERM)
    assert worker.wait(10) == 0
    assert time.monotonic() - sent < 5  # nowhere near the 60 s lease
    rows = db.rows("SELECT status::text, attempts, lease_token FROM pgq.jobs")
    assert rows == [{"status": "queued", "attempts": 0, "lease_token": None}] * 2  # no attempt spent


def test_second_sigterm_aborts_without_waiting_for_the_drain(
    pgq_queue: pgq.Queue, db: DB, spawn_worker: Spawn
) -> None:
    worker = spawn_worker("--drain-timeout", "60", "--lease", "60")
    pgq_queue.enqueue("nap", {"n": 1, "seconds": 60}, queue="work")
    wait_for(lambda: effects(db, "started"), 15, "the job to start")
    worker.signal(signal.SIGTERM)
    wait_for(lambda: "draining" in worker.log(), 5, "the worker to start draining")
    sent = time.monotonic()
    worker.signal(signal.SIGTERM)
    assert worker.wait(10) == 0
    assert time.monotonic() - sent < 4
    assert db.rows("SELECT status::text, attempts FROM pgq.jobs") == [{"status": "queued", "attempts": 0}]


def test_worker_survives_a_postgres_restart_and_finishes_the_queue(
    pgq_embedded_server: EmbeddedServer, pgq_queue: pgq.Queue, db: DB, spawn_worker: Spawn
) -> None:
    total = 150
    worker = spawn_worker("--concurrency", "4", "--lease", "15", "--poll-interval", "0.5")
    pgq_queue.enqueue_many([{"kind": "sleepy", "payload": {"n": i, "seconds": 0.02}, "queue": "work"}
                            for i in range(total)])
    wait_for(lambda: db.status_counts().get("succeeded", 0) >= 20, 15, "some jobs done before the restart")
    db.close()
    pgq_embedded_server.stop("fast")
    try:
        wait_for(lambda: "database unavailable" in worker.log() and "cannot open the LISTEN" in worker.log(),
                 15, "the worker to notice the outage (claims and LISTEN)")
        assert worker.alive()
    finally:
        pgq_embedded_server.start()
    database = DB(db.dsn)
    try:
        wait_for(lambda: database.status_counts() == {"succeeded": total}, 60, "the whole queue to succeed")
        assert worker.alive()
        worker.signal(signal.SIGTERM)
        assert worker.wait(10) == 0
    finally:
        database.close()


def test_three_workers_run_5000_jobs_each_exactly_once(pgq_queue: pgq.Queue, db: DB, spawn_worker: Spawn) -> None:
    total = 5000
    workers = [spawn_worker("--concurrency", "8", "--log-level", "WARNING", "--name", f"w{i}") for i in range(3)]
    for start in range(0, total, 1000):
        pgq_queue.enqueue_many([{"kind": "record", "payload": {"n": n}, "queue": "work"}
                                for n in range(start, start + 1000)])
    wait_for(lambda: db.status_counts() == {"succeeded": total}, 120, "all jobs to succeed", interval=0.2)
    for worker in workers:
        worker.signal(signal.SIGTERM)
    for worker in workers:
        assert worker.wait(15) == 0
    counts = db.rows("SELECT count(*) AS runs, count(DISTINCT job_id) AS jobs, count(DISTINCT n) AS ns, "
                     "count(DISTINCT pid) AS pids FROM effects")[0]
    assert counts["runs"] == total and counts["jobs"] == total and counts["ns"] == total
    assert counts["pids"] == 3  # all three took part
    assert db.value("SELECT count(*) FROM pgq.jobs WHERE attempts <> 1") == 0


def test_periodic_task_with_three_workers_runs_once_per_tick(db: DB, spawn_worker: Spawn) -> None:
    env = {"PGQ_TEST_PERIODIC": "1"}
    workers = [spawn_worker("--name", f"p{i}", "--rescue-interval", "0.5", env=env) for i in range(3)]

    def ticks() -> list[int]:
        rows = db.rows("SELECT dedupe_key FROM pgq.jobs WHERE kind = 'tick' ORDER BY dedupe_key")
        return [int(r["dedupe_key"].rsplit(":", 1)[1]) for r in rows]

    seen = wait_for(lambda: ticks() if len(ticks()) >= 2 else None, 15, "the first ticks")
    wait_for(lambda: len(ticks()) >= len(seen) + 4, 15, "four more ticks")
    for worker in workers:
        worker.signal(signal.SIGTERM)
    for worker in workers:
        assert worker.wait(15) == 0
    all_ticks = ticks()
    assert len(all_ticks) == len(set(all_ticks))  # one job per tick
    assert all_ticks == list(range(all_ticks[0], all_ticks[0] + len(all_ticks)))  # and none skipped
    # A tick enqueued just before the shutdown may still wait in the queue; every other one ran once.
    unfinished = db.rows("SELECT status::text, attempts FROM pgq.jobs WHERE kind = 'tick' AND status <> 'succeeded'")
    assert len(unfinished) <= 1 and all(r == {"status": "queued", "attempts": 0} for r in unfinished)
    runs = db.rows("SELECT job_id, count(*) AS c FROM effects GROUP BY job_id")
    assert len(runs) == len(all_ticks) - len(unfinished) and all(r["c"] == 1 for r in runs)
