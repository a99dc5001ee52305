#!/usr/bin/env python3
"""Job control costs: cancel -> interrupt latency, and W3 drain throughput with and without waiters.

    python bench/control.py --dsn postgresql://postgres@127.0.0.1:5432/postgres

Creates a scratch database on that server, migrates it, and drops it at the end. Prints one line per
measurement and a JSON summary:

- cancel latency: a worker (this process, its own thread) runs an async handler that sleeps; the
  bench cancels the job and measures, on this process's monotonic clock, the time from just before
  `Queue.cancel` to the handler's CancelledError. With LISTEN (the notification) and without it
  (PgBouncer mode: the lease check every poll interval, here 1 s).
- W3 with waiters: N no-op jobs drained by `pgq worker` (a subprocess, concurrency 16), first alone,
  then with every job awaited by `AsyncQueue.wait` in this process (one LISTEN connection, N
  waits); jobs/s from the database clock (first start to last finish), alternated A B B A.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path
from typing import Any

import psycopg

import pgq
from pgq import migrate
from pgq.testing import dsn_with_dbname

APP = '''
import os
import pgq

app = pgq.App(os.environ["BENCH_DSN"])


@app.task(name="noop", queue="w3")
def noop() -> None:
    """Nothing: the cost measured is pgq's own."""
'''


def percentile(values: list[float], p: float) -> float:
    """The p-th percentile (0..100) of `values`, nearest rank."""
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(p / 100 * len(ordered)) - 1))]


def cancel_latency(dsn: str, rounds: int, listen: bool) -> list[float]:
    """Seconds from cancel() to the handler's CancelledError, `rounds` times, one job at a time."""
    app = pgq.App(dsn)
    started: dict[int, threading.Event] = {}
    interrupted: dict[int, float] = {}
    done = threading.Event()

    @app.task(name="sleeper", queue="cancel")
    async def sleeper() -> None:
        job_id = pgq.current_job().id
        started.setdefault(job_id, threading.Event()).set()
        try:
            await asyncio.sleep(3600)
        except asyncio.CancelledError:
            interrupted[job_id] = time.monotonic()
            raise

    worker = pgq.Worker(app, queues=["cancel"], concurrency=4, lease=60, poll_interval=1.0, listen=listen,
                        maintenance=False)
    def run() -> None:
        asyncio.run(worker.run_async())
        done.set()

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    latencies: list[float] = []
    with pgq.Queue(dsn) as queue:
        for _ in range(rounds):
            job_id = sleeper.defer()
            if not started.setdefault(job_id, threading.Event()).wait(30):
                raise SystemExit("the sleeper job never started")
            time.sleep(0.05)
            before = time.monotonic()
            queue.cancel(job_id)
            deadline = before + 10
            while job_id not in interrupted and time.monotonic() < deadline:
                time.sleep(0.0005)
            if job_id not in interrupted:
                raise SystemExit(f"job {job_id} was not interrupted within 10 s")
            latencies.append(interrupted[job_id] - before)
    worker.stop()
    done.wait(30)
    app.close()
    return latencies


def drain(dsn: str, app_dir: str, jobs: int, waiters: bool) -> float:
    """Enqueue `jobs` no-op jobs, drain them with one `pgq worker` process; jobs/s by the database
    clock. With `waiters`, every job is awaited (AsyncQueue.wait) while it drains."""
    with pgq.Queue(dsn) as queue:
        ids = queue.enqueue_many([pgq.JobSpec("noop", queue="w3") for _ in range(jobs)])

    async def wait_all() -> None:
        async with pgq.AsyncQueue(dsn, max_size=4) as queue:
            results = await asyncio.gather(*(queue.wait(i, timeout=600) for i in ids))
            assert all(j.status is pgq.JobStatus.SUCCEEDED for j in results)

    waiting: threading.Thread | None = None
    if waiters:
        waiting = threading.Thread(target=lambda: asyncio.run(wait_all()))
        waiting.start()
        # Let every wait mark its job before the worker starts (the marks are the waiters' cost).
        with psycopg.connect(dsn, autocommit=True) as conn:
            while conn.execute("SELECT count(*) FROM pgq.jobs WHERE awaited").fetchone()[0] < jobs:  # type: ignore[index]
                time.sleep(0.1)
    env = dict(os.environ, BENCH_DSN=dsn, PYTHONPATH=app_dir)
    proc = subprocess.Popen([sys.executable, "-m", "pgq", "worker", "bench_app:app", "--queue", "w3",
                             "--concurrency", "16", "--log-level", "WARNING"], env=env)
    try:
        with psycopg.connect(dsn, autocommit=True) as conn:
            while conn.execute("SELECT count(*) FROM pgq.jobs WHERE status = 'succeeded' AND queue = 'w3'"
                               ).fetchone()[0] < jobs:  # type: ignore[index]
                time.sleep(0.05)
            span = conn.execute("SELECT extract(epoch FROM max(finished_at) - min(started_at)) FROM pgq.jobs "
                                "WHERE queue = 'w3'").fetchone()[0]  # type: ignore[index]
            if waiting is not None:
                waiting.join(120)  # every wait has its job back before the jobs go
            conn.execute("DELETE FROM pgq.jobs WHERE queue = 'w3'")
    finally:
        proc.terminate()
        proc.wait(30)
    return jobs / float(span)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--dsn", default=os.environ.get("PGQ_DSN", "postgresql://postgres@127.0.0.1:5432/postgres"))
    parser.add_argument("--rounds", type=int, default=50, help="cancels per mode (default 50)")
    parser.add_argument("--jobs", type=int, default=20000, help="W3 jobs per drain (default 20000)")
    args = parser.parse_args()

    name = f"pgq_bench_control_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(args.dsn, autocommit=True) as admin:
        admin.execute(f'CREATE DATABASE "{name}"')
    dsn = dsn_with_dbname(args.dsn, name)
    summary: dict[str, Any] = {}
    try:
        migrate.upgrade(dsn)
        for listen in (True, False):
            mode = "listen" if listen else "poll (1 s)"
            lat = cancel_latency(dsn, args.rounds, listen)
            p50, p99 = percentile(lat, 50) * 1000, percentile(lat, 99) * 1000
            print(f"cancel -> interrupt, {mode}: p50 {p50:.1f} ms, p99 {p99:.1f} ms, max {max(lat) * 1000:.1f} ms "
                  f"({len(lat)} cancels)", flush=True)
            summary[f"cancel_{'listen' if listen else 'poll'}_ms"] = {"p50": round(p50, 2), "p99": round(p99, 2)}
        with tempfile.TemporaryDirectory() as app_dir:
            Path(app_dir, "bench_app.py").write_text(APP)
            rates: dict[bool, list[float]] = {False: [], True: []}
            for waiters in (False, True, True, False):
                rate = drain(dsn, app_dir, args.jobs, waiters)
                rates[waiters].append(rate)
                print(f"W3 c16, {'with' if waiters else 'without'} {args.jobs} waiters: {rate:,.0f} jobs/s", flush=True)
        alone, waited = statistics.mean(rates[False]), statistics.mean(rates[True])
        print(f"W3 with waiters / without: {waited / alone:.3f}")
        summary["w3_jobs_per_s"] = {"without_waiters": round(alone), "with_waiters": round(waited)}
        print(json.dumps(summary))
    finally:
        with psycopg.connect(args.dsn, autocommit=True) as admin:
            admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


if __name__ == "__main__":
    main()
