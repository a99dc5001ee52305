"""A bulk retry of many failed jobs while workers run (issue 33).

    python bench/bulk_retry.py --dsn postgresql://postgres@127.0.0.1:5432/postgres [--jobs 100000]

In a scratch database (`pgq_bulk_bench_<random>`, dropped at the end): `--jobs` failed jobs of kind
`flaky` (error "boom: ..."), plus `--others` failed jobs of another kind that the filter leaves out.
A pgq Worker with `--concurrency` slots runs in this process, its `flaky` handler failing again at
once, so every retried job is claimed and fails while the retry goes on. Then

    Queue.retry_where(queue="bulk", kind="flaky", error="boom", batch=--batch)

runs, while a monitor samples pg_stat_activity every 10 ms for sessions waiting on a lock. Printed:
the run time, batches and per-batch time (p50, max), the longest lock wait any session was seen in
(a lower bound: waits shorter than the sampling period can be missed), and the check that every one
of the `--jobs` jobs was retried exactly once (from pgq.job_audit) and no other job was.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import statistics
import sys
import threading
import time
from typing import Any

import psycopg
from churn import scratch_database

import pgq

LOCK_WAITS = b"""
SELECT coalesce(max(extract(epoch FROM clock_timestamp() - a.state_change)), 0)
FROM pg_stat_activity a
WHERE a.datname = current_database() AND a.wait_event_type = 'Lock'
"""


def fill(dsn: str, jobs: int, others: int) -> None:
    """The failed jobs: `jobs` of kind flaky in queue bulk (the filter's), `others` of kind steady."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(b"""
            INSERT INTO pgq.jobs (queue, kind, payload, status, attempts, max_attempts, last_error, started_at,
                                  finished_at)
            SELECT 'bulk', CASE WHEN g <= %(jobs)s THEN 'flaky' ELSE 'steady' END, jsonb_build_object('n', g),
                   'failed', 1, 1, 'boom: upstream said no (' || g || ')', now(), now()
            FROM generate_series(1, %(total)s) g
        """, {"jobs": jobs, "total": jobs + others})
        conn.execute(b"VACUUM ANALYZE pgq.jobs")


class LockMonitor(threading.Thread):
    """Samples the longest lock wait of the database's sessions until stopped."""

    def __init__(self, dsn: str) -> None:
        super().__init__(name="lock-monitor", daemon=True)
        self.dsn = dsn
        self.longest = 0.0
        self.samples = 0
        self.stop = threading.Event()

    def run(self) -> None:
        with psycopg.connect(self.dsn, autocommit=True) as conn:
            while not self.stop.is_set():
                row = conn.execute(LOCK_WAITS).fetchone()
                self.longest = max(self.longest, float(row[0]) if row else 0.0)
                self.samples += 1
                time.sleep(0.01)


def run_worker(app: pgq.App, concurrency: int, ready: threading.Event) -> tuple[threading.Thread, pgq.Worker]:
    """A Worker of `app` on queue bulk in a thread of its own (its loop); `ready` is set once it runs."""
    worker = pgq.Worker(app, queues=["bulk"], concurrency=concurrency, lease=30, poll_interval=0.2)

    def main() -> None:
        async def go() -> None:
            asyncio.get_running_loop().call_soon(ready.set)
            await worker.run_async(handle_signals=False)

        asyncio.run(go())

    thread = threading.Thread(target=main, name="worker", daemon=True)
    thread.start()
    return thread, worker


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--dsn", required=True)
    parser.add_argument("--jobs", type=int, default=100_000)
    parser.add_argument("--others", type=int, default=10_000)
    parser.add_argument("--batch", type=int, default=1000)
    parser.add_argument("--concurrency", type=int, default=8)
    parser.add_argument("--keep", action="store_true")
    args = parser.parse_args()
    for name in ("pgq", "pgq.worker"):  # each job failing again is logged: not here
        logging.getLogger(name).setLevel(logging.ERROR)
    with scratch_database(args.dsn, "pgq_bulk_bench", keep=args.keep) as dsn:
        started = time.monotonic()
        fill(dsn, args.jobs, args.others)
        print(f"filled: {args.jobs:,} failed flaky jobs, {args.others:,} others, in "
              f"{time.monotonic() - started:.1f} s", flush=True)
        app = pgq.App(dsn)

        @app.task(name="flaky", queue="bulk", max_attempts=1)
        def flaky(n: int) -> None:
            raise RuntimeError(f"boom again ({n})")

        ready = threading.Event()
        thread, worker = run_worker(app, args.concurrency, ready)
        ready.wait(10)
        monitor = LockMonitor(dsn)
        monitor.start()
        marks: list[float] = []
        with pgq.Queue(dsn) as queue:
            begun = time.monotonic()
            result = queue.retry_where(queue="bulk", kind="flaky", error="boom", batch=args.batch,
                                       progress=lambda _: marks.append(time.monotonic()))
            took = time.monotonic() - begun
        monitor.stop.set()
        monitor.join()
        worker.stop()
        thread.join(60)
        with psycopg.connect(dsn, autocommit=True) as conn:
            row: Any = conn.execute(b"""
                SELECT count(*), count(DISTINCT i), count(*) FILTER (WHERE j.kind <> 'flaky')
                FROM pgq.job_audit a CROSS JOIN LATERAL unnest(a.job_ids) AS i LEFT JOIN pgq.jobs j ON j.id = i
                WHERE a.action = 'retry'
            """).fetchone()
        batches = [b - a for a, b in zip([begun, *marks], marks, strict=False)]
        print(f"retried {result.changed:,} of {result.matched:,} matched in {took:.2f} s "
              f"({result.changed / took:,.0f} jobs/s), {result.batches} batches of {args.batch:,}")
        print(f"batch time: p50 {statistics.median(batches) * 1000:.0f} ms, max {max(batches) * 1000:.0f} ms")
        print(f"longest lock wait seen: {monitor.longest * 1000:.0f} ms ({monitor.samples:,} samples)")
        print(f"worker meanwhile: {worker.stats['claimed']:,} claimed, {worker.stats['failed']:,} failed again")
        exactly_once = row[0] == row[1] == args.jobs and row[2] == 0
        print(f"audit: {row[0]:,} retries of {row[1]:,} distinct jobs, {row[2]} of other kinds: "
              f"{'every job retried exactly once' if exactly_once else 'MISMATCH'}", flush=True)
        if not exactly_once:
            return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
