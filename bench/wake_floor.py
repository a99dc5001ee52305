"""The floor under W4 (wake-up latency) on this server: pgq's own statements, without pgq's Python.

    python bench/wake_floor.py --dsn postgresql://postgres@127.0.0.1:5432/postgres [--jobs 300 --rate 20]

W4 measures enqueue -> handler start with an idle worker. Whatever the client library, that path
holds two synchronous commits (the enqueue's, which sends the NOTIFY, and the claim's, which fences
the job by its lease token) and wakes three sleeping processes (the enqueuing backend, the worker,
the claiming backend). This script times exactly that path with bare psycopg connections and pgq's
SQL files (`job_insert_one.sql`, `job_claim_fast.sql`): a producer process enqueues one job every
1/rate seconds, stamping `time.time()` in its payload; a listener process waits for the NOTIFY on one
connection and claims on another, as pgq's worker does. It prints one JSON line with p50/p99 (ms)
of: the enqueue call, enqueue -> NOTIFY received, and enqueue -> claimed job in hand. Compare the
last with `pgq bench --workload w4` (which adds the worker's dispatch and handler start).

`--asyncio` times the same path the way an asyncio worker that runs plain `def` handlers in threads
must take it, still without pgq's Python: the producer enqueues on an asyncio connection (as the
harness's W4 does through `pgq.AsyncQueue`), the listener waits and claims on asyncio connections,
and hands each claimed job to a handler thread, which stamps the time it starts (`handler_*`, the
figure the harness's W4 reports). This is the floor for pgq's own design on this machine: what
`pgq bench --workload w4` measures above it is pgq's bookkeeping.

A scratch database is created, migrated and dropped (see bench/churn.py).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing
import queue
import statistics
import sys
import threading
import time
from multiprocessing.connection import Connection
from typing import Any

import psycopg
from churn import scratch_database

from pgq import _sql

QUEUE = "wake_floor"
WARM_UP = 5  # jobs sent first and not timed


def _pct(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return round(ordered[min(len(ordered) - 1, int(len(ordered) * p / 100))] * 1000, 3)


def listener(dsn: str, jobs: int, ready: Connection, out: Connection) -> None:
    """Wait for each NOTIFY, claim on a second connection, send back (notified_s, claimed_s) per job."""
    listen = psycopg.connect(dsn, autocommit=True)
    claim = psycopg.connect(dsn, autocommit=True)
    listen.execute("LISTEN pgq")
    params = {"queue": QUEUE, "kinds": None, "limit": 16, "lease_s": 60.0, "worker": "wake-floor"}
    claim.execute(_sql.query("job_claim_fast"), params, prepare=True)  # plan and prepare it before timing
    results: list[tuple[float, float]] = []
    ready.send("listening")
    while len(results) < jobs:
        for _ in listen.notifies(timeout=5.0, stop_after=1):
            notified = time.time()
            rows = claim.execute(_sql.query("job_claim_fast"), params, prepare=True).fetchall()
            claimed = time.time()
            for row in rows:
                stamp = row[3]["t"]
                results.append((notified - stamp, claimed - stamp))
    out.send(results)


def listener_async(dsn: str, jobs: int, ready: Connection, out: Connection) -> None:
    """As `listener`, on asyncio connections, and each claimed job handed to a handler thread: send
    back (notified_s, claimed_s, handler_s) per job."""
    handed: queue.SimpleQueue[tuple[float, float, float]] = queue.SimpleQueue()
    results: list[tuple[float, float, float]] = []

    def handler_thread() -> None:  # the thread a plain `def` handler runs in: it stamps its start
        while len(results) < jobs:
            stamp, notified, claimed = handed.get()
            results.append((notified - stamp, claimed - stamp, time.time() - stamp))

    async def run() -> None:
        listen = await psycopg.AsyncConnection.connect(dsn, autocommit=True)
        claim = await psycopg.AsyncConnection.connect(dsn, autocommit=True)
        await listen.execute("LISTEN pgq")
        params = {"queue": QUEUE, "kinds": None, "limit": 16, "lease_s": 60.0, "worker": "wake-floor"}
        await claim.execute(_sql.query("job_claim_fast"), params, prepare=True)
        ready.send("listening")
        claimed_jobs = 0
        async for _ in listen.notifies(timeout=30.0):
            notified = time.time()
            cur = await claim.execute(_sql.query("job_claim_fast"), params, prepare=True)
            rows = await cur.fetchall()
            claimed = time.time()
            for row in rows:
                handed.put((row[3]["t"], notified, claimed))
            claimed_jobs += len(rows)
            if claimed_jobs >= jobs:
                break

    thread = threading.Thread(target=handler_thread, daemon=True)
    thread.start()
    asyncio.run(run())
    thread.join(10)
    out.send(results)


async def _produce_async(dsn: str, jobs: int, rate: float) -> list[float]:
    calls: list[float] = []
    insert = _sql.query("job_insert_one")
    async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as producer:
        for _ in range(WARM_UP):
            await producer.execute(insert, _job(time.time()), prepare=True)
        await asyncio.sleep(1.0)
        start = time.perf_counter()
        for i in range(jobs):
            delay = start + i / rate - time.perf_counter()
            if delay > 0:
                await asyncio.sleep(delay)
            stamp = time.time()
            cur = await producer.execute(insert, _job(stamp), prepare=True)
            await cur.fetchall()
            calls.append(time.time() - stamp)
    return calls


def _produce(dsn: str, jobs: int, rate: float) -> list[float]:
    calls: list[float] = []
    insert = _sql.query("job_insert_one")
    with psycopg.connect(dsn, autocommit=True) as producer:
        for _ in range(WARM_UP):  # warm up both sides, untimed
            producer.execute(insert, _job(time.time()), prepare=True)
        time.sleep(1.0)
        start = time.perf_counter()
        for i in range(jobs):
            delay = start + i / rate - time.perf_counter()
            if delay > 0:
                time.sleep(delay)
            stamp = time.time()
            producer.execute(insert, _job(stamp), prepare=True).fetchall()
            calls.append(time.time() - stamp)
    return calls


def main(argv: list[str] | None = None) -> int:
    """Parse arguments, run producer and listener in a scratch database, print the JSON line."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--dsn", required=True, help="a server to create the scratch database on (any database)")
    parser.add_argument("--jobs", type=int, default=300, help="jobs to time (default: 300, as the harness)")
    parser.add_argument("--rate", type=float, default=20.0, help="jobs per second (default: 20, as the harness)")
    parser.add_argument("--asyncio", action="store_true",
                        help="asyncio connections on both sides and a handler thread (see above)")
    args = parser.parse_args(argv)
    if args.jobs < 1 or not args.rate > 0:
        parser.error("--jobs must be >= 1 and --rate > 0")
    with scratch_database(args.dsn, "pgq_wake") as dsn:
        ready_recv, ready_send = multiprocessing.Pipe(duplex=False)
        out_recv, out_send = multiprocessing.Pipe(duplex=False)
        proc = multiprocessing.get_context("spawn").Process(
            target=listener_async if args.asyncio else listener,
            args=(dsn, WARM_UP + args.jobs, ready_send, out_send), daemon=True)
        proc.start()
        if not ready_recv.poll(30):
            raise SystemExit("wake_floor: the listener did not start")
        ready_recv.recv()
        if args.asyncio:
            calls = asyncio.run(_produce_async(dsn, args.jobs, args.rate))
        else:
            calls = _produce(dsn, args.jobs, args.rate)
        if not out_recv.poll(60):
            raise SystemExit("wake_floor: the listener did not claim every job")
        results: list[tuple[float, ...]] = out_recv.recv()[WARM_UP:]
        proc.join(5)
        record: dict[str, Any] = {
            "workload": "wake_floor", "mode": "asyncio" if args.asyncio else "blocking",
            "jobs": len(results), "rate_per_s": args.rate,
            "enqueue_call_p50_ms": _pct(calls, 50), "enqueue_call_p99_ms": _pct(calls, 99),
            "notified_p50_ms": _pct([r[0] for r in results], 50), "notified_p99_ms": _pct([r[0] for r in results], 99),
            "claimed_p50_ms": _pct([r[1] for r in results], 50), "claimed_p99_ms": _pct([r[1] for r in results], 99),
            "claimed_mean_ms": round(statistics.fmean(r[1] for r in results) * 1000, 3),
        }
        if args.asyncio:
            record["handler_p50_ms"] = _pct([r[2] for r in results], 50)
            record["handler_p99_ms"] = _pct([r[2] for r in results], 99)
        print(json.dumps(record), flush=True)
    return 0


def _job(stamp: float) -> dict[str, Any]:
    return {"kind": "floor", "payload": json.dumps({"t": stamp}), "queue": QUEUE, "priority": 0, "run_at": None,
            "delay": None, "max_attempts": None, "watermark": None, "group_key": None}


if __name__ == "__main__":
    sys.exit(main())
