#!/usr/bin/env python3
"""The cost of revision 0019's JSON bounds on the enqueue path: µs per inserted job with the check
on and off, in one run.

    python3 bench/json_bounds.py --dsn postgresql://postgres@127.0.0.1:5432/postgres [--reps 3]

Each shape is enqueued through `pgq.enqueue_many` (what `Queue.enqueue_many` runs) in batches of
1,000 (fewer for the big shapes), its rows deleted after each run so that every run inserts into the
same table:

- small: 20,000 payloads like ``{"user": 17, "email": "u17@example.com", "n": 3}`` (under 512
  bytes: the check is two size reads);
- nested: 2,000 payloads nested 60 levels deep (allowed; over 512 bytes, so jsonpath walks them);
- wide: 200 payloads of about 100 KB, 4,000 small objects each (the walk of a big allowed value);
- small rows: the small payloads again, in one ``INSERT INTO pgq.jobs ... SELECT`` from a table (no
  round trips, no function: the per-row cost of the check alone stands out of the noise).

"on" is the migrated schema; "off" the same with the trigger `jobs_json_bounded_insert` disabled.
Runs go in ABBA order (off, on, on, off) `--reps` times. Prints one line per run, per shape the
medians and the µs per job the check adds, then one JSON line. A scratch database is created,
migrated and dropped (see bench/churn.py).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from typing import Any

import psycopg
from churn import scratch_database

ENQUEUE = ("SELECT count(*) FROM pgq.enqueue_many(%(kinds)s, %(payloads)s::jsonb[], %(queues)s, %(priorities)s, "
           "NULL, NULL, NULL, NULL, NULL, NULL)")


def shapes() -> dict[str, tuple[list[str], int]]:
    """{shape: (payloads as JSON text, batch size)}."""
    nested: Any = 1
    for i in range(60):
        nested = [nested, i] if i % 2 else {"k": nested, "i": i}
    wide = json.dumps({"rows": [{"id": i, "name": f"n{i}", "ok": True} for i in range(4000)]})
    return {
        "small": ([json.dumps({"user": i, "email": f"u{i}@example.com", "n": i % 7}) for i in range(20_000)], 1000),
        "nested": ([json.dumps(nested)] * 2000, 500),
        "wide": ([wide] * 200, 20),
        "small rows": ([json.dumps({"user": i, "email": f"u{i}@example.com", "n": i % 7}) for i in range(20_000)], 0),
    }


def run(conn: psycopg.Connection[Any], payloads: list[str], batch: int) -> float:
    """Enqueue `payloads` in batches of `batch` (0: all at once by INSERT ... SELECT from the table
    bench_payloads); return the seconds it took (then delete the jobs)."""
    took = 0.0
    if batch == 0:
        began = time.perf_counter()
        conn.execute(b"INSERT INTO pgq.jobs (kind, queue, payload) SELECT 'bench', 'bench', p FROM bench_payloads")
        took = time.perf_counter() - began
    for start in range(0, len(payloads) if batch else 0, batch or 1):
        chunk = payloads[start:start + batch]
        params = {"kinds": ["bench"] * len(chunk), "payloads": chunk, "queues": ["bench"] * len(chunk),
                  "priorities": [0] * len(chunk)}
        began = time.perf_counter()
        conn.execute(ENQUEUE, params)
        took += time.perf_counter() - began
    conn.execute("DELETE FROM pgq.jobs WHERE queue = 'bench'")
    conn.execute("VACUUM pgq.jobs")
    return took


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark (see the module docstring); returns the exit status."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dsn", required=True, help="a server where a scratch database may be created")
    parser.add_argument("--reps", type=int, default=3, help="ABBA rounds (default 3)")
    parser.add_argument("--scale", type=float, default=1.0, help="fraction of each shape's jobs (default 1)")
    args = parser.parse_args(argv)
    summary: dict[str, Any] = {"workload": "json_bounds", "reps": args.reps}
    with scratch_database(args.dsn, "pgq_jsonb") as dsn, psycopg.connect(dsn, autocommit=True) as conn:
        for name, (every, batch) in shapes().items():
            payloads = every[:max(1, int(len(every) * args.scale))]
            if batch == 0:
                conn.execute(b"DROP TABLE IF EXISTS bench_payloads")
                conn.execute(b"CREATE TABLE bench_payloads (p jsonb)")
                with conn.cursor().copy(b"COPY bench_payloads (p) FROM STDIN") as copy:
                    for payload in payloads:
                        copy.write_row([payload])
            run(conn, payloads[:batch] if batch else payloads, batch)  # warm up: plans, caches
            seconds: dict[str, list[float]] = {"off": [], "on": []}
            for _ in range(args.reps):
                for side in ("off", "on", "on", "off"):
                    toggle = "DISABLE" if side == "off" else "ENABLE"
                    # pgq.live_jobs since revision 0033 (it holds the insert's trigger), else pgq.jobs
                    table = conn.execute(b"SELECT coalesce(to_regclass('pgq.live_jobs'), 'pgq.jobs')::text").fetchone()
                    conn.execute(f"ALTER TABLE {table[0] if table else 'pgq.jobs'} {toggle} TRIGGER "
                                 "jobs_json_bounded_insert".encode())
                    took = run(conn, payloads, batch)
                    seconds[side].append(took)
                    print(f"{name} {side}: {took * 1e6 / len(payloads):.2f} µs/job", flush=True)
            table = conn.execute(b"SELECT coalesce(to_regclass('pgq.live_jobs'), 'pgq.jobs')::text").fetchone()
            conn.execute(f"ALTER TABLE {table[0] if table else 'pgq.jobs'} ENABLE TRIGGER "
                         "jobs_json_bounded_insert".encode())
            off, on = (statistics.median(seconds[s]) * 1e6 / len(payloads) for s in ("off", "on"))
            print(f"{name}: off {off:.2f} µs/job, on {on:.2f} µs/job, the check adds {on - off:+.2f} µs/job "
                  f"(on / off {on / off:.3f})", flush=True)
            summary[name] = {"jobs": len(payloads), "off_us": round(off, 3), "on_us": round(on, 3),
                             "added_us": round(on - off, 3)}
        print(json.dumps(summary), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
