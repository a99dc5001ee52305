"""`pgq worker --metrics-port`: a real worker subprocess serves Prometheus metrics over HTTP; the
test runs jobs that succeed, fail, retry, get rescued and lose their lease, drops the LISTEN
connection, and checks the scraped values and the text format."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import textwrap
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

import psycopg
import pytest

from pgq import JobStatus, Queue
from tests.prometheus import Family, parse

from ..conftest import reap, stop_with_sigterm
from .conftest import LISTENER

APP = textwrap.dedent(
    """
    import asyncio
    import os

    import pgq

    app = pgq.App(os.environ["METRICS_TEST_DSN"])


    @app.task(name="obs.ok", queue="obs")
    def ok(n: int) -> int:
        return n


    @app.task(name="obs.boom", queue="obs")
    def boom() -> None:
        raise ValueError("boom")


    @app.task(name="obs.flaky", queue="obs", retry=pgq.Backoff(initial=0.2, jitter=0, min_delay=0.2))
    def flaky() -> str:
        if pgq.current_job().attempts == 1:
            raise RuntimeError("first attempt fails")
        return "ok"


    @app.task(name="obs.slow", queue="obs")
    async def slow(seconds: float) -> None:
        await asyncio.sleep(seconds)
    """
)


def free_port() -> int:
    """A TCP port nobody listens on right now."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def scrape(port: int) -> tuple[str, str]:
    """GET /metrics: (content type, body)."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as response:
        return response.headers["Content-Type"], response.read().decode()


def wait_for(condition: Callable[[], Any], timeout: float, what: str, proc: subprocess.Popen[str]) -> Any:
    """Poll `condition()` until truthy (returned); fail after `timeout` s or when the worker exits."""
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        if proc.poll() is not None:
            pytest.fail(f"the worker exited ({proc.returncode}) while waiting for {what}: {proc.communicate()[1]}")
        if time.monotonic() > deadline:
            pytest.fail(f"timed out after {timeout} s waiting for {what} (last value: {value!r})")
        time.sleep(0.05)


def families_when(port: int, condition: Callable[[dict[str, Family]], bool]) -> Callable[[], dict[str, Family] | None]:
    """A poll function: the parsed scrape once `condition` holds for it, else None."""

    def poll() -> dict[str, Family] | None:
        try:
            _, body = scrape(port)
        except (urllib.error.URLError, ConnectionError):
            return None
        families = parse(body)
        return families if condition(families) else None

    return poll


def counter(families: dict[str, Family], name: str, kind: str) -> float:
    """A counter's value for queue `obs` and `kind`, 0 when absent."""
    return families[name].samples.get((name, (("kind", kind), ("queue", "obs"))), 0.0)


@pytest.mark.slow
def test_worker_serves_prometheus_metrics_of_real_jobs(tmp_path: Path, pgq_dsn: str, pgq_queue: Queue) -> None:
    (tmp_path / "metrics_test_app.py").write_text(APP)
    # A job whose "worker" vanishes: claimed here with a short lease and never finished. The worker's
    # rescue takes it back and runs it.
    ghost_id = pgq_queue.enqueue("obs.ok", {"n": -1}, queue="obs")
    [ghost] = pgq_queue.claim(worker="ghost", queues=["obs"], limit=1, lease=0.2)
    ok_ids = [pgq_queue.enqueue("obs.ok", {"n": n}, queue="obs") for n in range(3)]
    boom_id = pgq_queue.enqueue("obs.boom", {}, queue="obs", max_attempts=1)
    flaky_id = pgq_queue.enqueue("obs.flaky", {}, queue="obs")
    slow_id = pgq_queue.enqueue("obs.slow", {"seconds": 2.0}, queue="obs")
    pgq_queue.enqueue("obs.ok", {"n": 99}, queue="obs", delay=3600)  # scheduled: stays queued

    port = free_port()
    env = {k: v for k, v in os.environ.items() if k != "PGQ_DSN"}
    env["METRICS_TEST_DSN"] = pgq_dsn
    proc = subprocess.Popen(
        [sys.executable, "-m", "pgq", "worker", "metrics_test_app:app", "--queue", "obs", "--concurrency", "4",
         "--lease", "2", "--poll-interval", "0.2", "--drain-timeout", "2", "--claimed-by", "metrics-test",
         "--metrics-port", str(port)],
        cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )
    try:
        # The slow job is cancelled while its handler runs: the worker interrupts the handler.
        wait_for(lambda: (job := pgq_queue.get(slow_id)) is not None and job.status is JobStatus.RUNNING,
                 15, "the slow job to start", proc)
        pgq_queue.cancel(slow_id)

        expected = {ghost_id: "succeeded", **dict.fromkeys(ok_ids, "succeeded"), boom_id: "failed",
                    flaky_id: "succeeded", slow_id: "cancelled"}
        statuses: dict[int, str] = {}

        def settled() -> bool:
            statuses.update({i: j.status.value for i in expected if (j := pgq_queue.get(i)) is not None})
            return statuses == expected

        wait_for(settled, 30, "every job to reach its final status", proc)
        families = wait_for(families_when(port, lambda f: counter(f, "pgq_jobs_cancelled_total", "obs.slow") == 1),
                            15, "the interruption of the cancelled job", proc)
        assert counter(families, "pgq_lease_lost_total", "obs.slow") == 0

        content_type, _ = scrape(port)
        assert content_type == "text/plain; version=0.0.4; charset=utf-8"
        assert counter(families, "pgq_jobs_claimed_total", "obs.ok") == 4  # 3 + the rescued one
        assert counter(families, "pgq_jobs_succeeded_total", "obs.ok") == 4
        assert counter(families, "pgq_jobs_rescued_total", "obs.ok") == 1
        assert counter(families, "pgq_jobs_claimed_total", "obs.boom") == 1
        assert counter(families, "pgq_jobs_failed_total", "obs.boom") == 1
        assert counter(families, "pgq_jobs_retried_total", "obs.boom") == 0
        assert counter(families, "pgq_jobs_claimed_total", "obs.flaky") == 2
        assert counter(families, "pgq_jobs_retried_total", "obs.flaky") == 1
        assert counter(families, "pgq_jobs_succeeded_total", "obs.flaky") == 1
        assert counter(families, "pgq_jobs_claimed_total", "obs.slow") == 1
        assert counter(families, "pgq_jobs_succeeded_total", "obs.slow") == 0
        hist = families["pgq_job_duration_seconds"]
        assert hist.value("_count", queue="obs", kind="obs.ok") == 4
        assert hist.value("_count", queue="obs", kind="obs.flaky") == 2
        assert hist.value("_count", queue="obs", kind="obs.slow") == 1
        assert hist.value("_sum", queue="obs", kind="obs.slow") < 2.0  # interrupted before its 2 s
        assert families["pgq_worker_jobs_running"].value() == 0
        assert families["pgq_worker_concurrency"].value() == 4
        [(_, info)] = families["pgq_worker_info"].samples
        assert dict(info)["worker"] == "metrics-test" and dict(info)["queues"] == "obs"
        # Gauges from the database (cached up to 5 s: poll until they show the final state). A job of a
        # kind the worker's app has no task for waits, untouched, and is counted (issue #42).
        unknown_id = pgq_queue.enqueue("obs.nobody", queue="obs")
        families = wait_for(families_when(port, lambda f: f["pgq_queue_jobs"].samples.get(
            ("pgq_queue_jobs", (("queue", "obs"), ("state", "running")))) == 0 and f[
            "pgq_queue_live_workers"].samples.get(("pgq_queue_live_workers", (("queue", "obs"),))) == 1 and f[
            "pgq_queue_unknown_kind_jobs"].samples.get(
                ("pgq_queue_unknown_kind_jobs", (("kind", "obs.nobody"), ("queue", "obs")))) == 1),
            15, "running = 0", proc)
        assert families["pgq_queue_unknown_kind_jobs"].value(queue="obs", kind="obs.nobody") == 1
        assert (job := pgq_queue.get(unknown_id)) is not None and job.status is JobStatus.QUEUED
        assert job.attempts == 0
        jobs = families["pgq_queue_jobs"]
        assert jobs.value(queue="obs", state="scheduled") == 1
        assert jobs.value(queue="obs", state="ready") == 1  # the unknown kind's, waiting
        assert 0 <= families["pgq_queue_oldest_ready_age_seconds"].value(queue="obs") < 60
        assert families["pgq_queue_expired_leases"].value(queue="obs") == 0
        assert families["pgq_queue_live_workers"].value(queue="obs") == 1  # itself, from the registry
        assert families["pgq_queue_stats_up"].value() == 1

        # Drop the LISTEN connection from the server side: the worker reconnects and says so.
        assert families["pgq_listen_reconnects_total"].value() == 0
        with psycopg.connect(pgq_dsn, autocommit=True) as conn:
            killed = conn.execute(
                f"SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity WHERE {LISTENER}".encode()
            ).fetchone()
        assert killed == (1,)
        families = wait_for(families_when(port, lambda f: f["pgq_listen_reconnects_total"].value() == 1
                                          and f["pgq_listen_connected"].value() == 1), 15, "the reconnect", proc)
        # The fenced-out ghost cannot finish the job the worker took back.
        with pytest.raises(Exception, match="lease"):
            pgq_queue.complete(ghost)

        err = stop_with_sigterm(proc, 20)
    finally:
        reap(proc)
    assert proc.returncode == 0, err
    assert f"serving metrics at http://127.0.0.1:{port}/metrics" in err
    with pytest.raises(urllib.error.URLError):  # the port is closed with the worker
        scrape(port)


def test_worker_with_metrics_port_in_use_fails_with_one_line(tmp_path: Path, pgq_dsn: str) -> None:
    (tmp_path / "metrics_test_app.py").write_text(APP)
    env = {k: v for k, v in os.environ.items() if k != "PGQ_DSN"}
    env["METRICS_TEST_DSN"] = pgq_dsn
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        result = subprocess.run(
            [sys.executable, "-m", "pgq", "worker", "metrics_test_app:app", "--metrics-port", str(port)],
            cwd=tmp_path, env=env, capture_output=True, text=True, timeout=60,
        )
    assert result.returncode == 1
    assert f"pgq: error: cannot serve metrics on 127.0.0.1:{port}" in result.stderr
