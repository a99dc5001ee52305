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

A scratch database is created, migrated and dropped (see bench/churn.py).
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import statistics
import sys
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


def main(argv: list[str] | None = None) -> int:
    """Parse arguments, run producer and listener in a scratch database, print the JSON line."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--dsn", required=True, help="a server to create the scratch database on (any database)")
    parser.add_argument("--jobs", type=int, default=300, help="jobs to time (default: 300, as the harness)")
    parser.add_argument("--rate", type=float, default=20.0, help="jobs per second (default: 20, as the harness)")
    args = parser.parse_args(argv)
    if args.jobs < 1 or not args.rate > 0:
        parser.error("--jobs must be >= 1 and --rate > 0")
    with scratch_database(args.dsn, "pgq_wake") as dsn:
        ready_recv, ready_send = multiprocessing.Pipe(duplex=False)
        out_recv, out_send = multiprocessing.Pipe(duplex=False)
        proc = multiprocessing.get_context("spawn").Process(
            target=listener, args=(dsn, WARM_UP + args.jobs, ready_send, out_send), daemon=True)
        proc.start()
        if not ready_recv.poll(30):
            raise SystemExit("wake_floor: the listener did not start")
        ready_recv.recv()
        calls: list[float] = []
        insert = _sql.query("job_insert_one")
        with psycopg.connect(dsn, autocommit=True) as producer:
            for _ in range(WARM_UP):  # warm up both sides, untimed
                producer.execute(insert, _job(time.time()), prepare=True)
            time.sleep(1.0)
            start = time.perf_counter()
            for i in range(args.jobs):
                delay = start + i / args.rate - time.perf_counter()
                if delay > 0:
                    time.sleep(delay)
                stamp = time.time()
                producer.execute(insert, _job(stamp), prepare=True).fetchall()
                calls.append(time.time() - stamp)
        if not out_recv.poll(60):
            raise SystemExit("wake_floor: the listener did not claim every job")
        results: list[tuple[float, float]] = out_recv.recv()[WARM_UP:]
        proc.join(5)
        record: dict[str, Any] = {
            "workload": "wake_floor", "jobs": len(results), "rate_per_s": args.rate,
            "enqueue_call_p50_ms": _pct(calls, 50), "enqueue_call_p99_ms": _pct(calls, 99),
            "notified_p50_ms": _pct([n for n, _ in results], 50), "notified_p99_ms": _pct([n for n, _ in results], 99),
            "claimed_p50_ms": _pct([c for _, c in results], 50), "claimed_p99_ms": _pct([c for _, c in results], 99),
            "claimed_mean_ms": round(statistics.fmean(c for _, c in results) * 1000, 3),
        }
        print(json.dumps(record), flush=True)
    return 0


def _job(stamp: float) -> dict[str, Any]:
    return {"kind": "floor", "payload": json.dumps({"t": stamp}), "queue": QUEUE, "priority": 0, "run_at": None,
            "delay": None, "max_attempts": None, "watermark": None}


if __name__ == "__main__":
    sys.exit(main())
