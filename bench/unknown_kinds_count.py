"""What counting the queued jobs of unknown kinds costs (sql/queue_unknown_kinds.sql; issue #44): the
statement every overview refresh, `pgq status` and metrics scrape runs.

    python bench/unknown_kinds_count.py --dsn postgresql://postgres@127.0.0.1:5432/postgres \
        [--unknown 990000] [--old 739f90b]

A scratch database (`pgq_unkcount_<random>`, migrated, dropped at the end) gets a live worker of
queue `default` that knows the kind `known`, 10,000 ready `known` jobs, and `--unknown` ready jobs
of the kind `legacy` (no live worker knows it), then VACUUM ANALYZE. Three ways of running it, in
turn (the order rotated every round), `--rounds` times each:

- `before`: the statement as it was at commit `--old` (`git show`; counting every job, its counts
  evaluated again for each use), autocommit, with the server's JIT settings: how `pgq status` and
  every metrics scrape ran it (the dashboard ran it with JIT off);
- `before, jit off`: the same statement in a transaction with JIT off;
- `after`: the statement of this tree (each pair counted up to UNKNOWN_KINDS_CAP, once) in a
  transaction with JIT off, as queue_stats and queue_backlog now run it.

Prints per way the median and p90 ms and what it returned. Nothing is asserted.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time
from pathlib import Path

import psycopg
from churn import scratch_database

from pgq._ops import UNKNOWN_KINDS_CAP

ROOT = Path(__file__).resolve().parent.parent


def _fill(dsn: str, unknown: int) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        started = time.monotonic()
        conn.execute(b"SELECT pgq.worker_register('host-a:1:w', 'host-a', 1, NULL, ARRAY['known'], 8, 30, 3600, "
                     b"'bench')")
        conn.execute(b"INSERT INTO pgq.jobs (queue, kind, run_at) "
                     b"SELECT 'default', 'known', now() - interval '1 hour' FROM generate_series(1, 10000)")
        conn.execute(b"INSERT INTO pgq.jobs (queue, kind, run_at) "
                     b"SELECT 'default', 'legacy', now() - interval '1 hour' FROM generate_series(1, %(n)s)",
                     {"n": unknown})
        conn.execute(b"VACUUM ANALYZE pgq.jobs")
        print(f"filled {unknown:,} unknown-kind jobs in {time.monotonic() - started:.0f} s", flush=True)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--dsn", required=True, help="a server to create the scratch database on")
    parser.add_argument("--unknown", type=int, default=990_000, help="jobs of the unknown kind (default 990,000)")
    parser.add_argument("--old", default="739f90b", help="the commit whose statement to compare (default 739f90b)")
    parser.add_argument("--rounds", type=int, default=20, help="runs of each statement (default 20)")
    args = parser.parse_args()
    new = (ROOT / "sql/queue_unknown_kinds.sql").read_bytes()
    old = subprocess.run(["git", "-C", str(ROOT), "show", f"{args.old}:sql/queue_unknown_kinds.sql"],
                         check=True, capture_output=True).stdout
    ways = {"before": (old, {}, False), "before, jit off": (old, {}, True),
            "after": (new, {"cap": UNKNOWN_KINDS_CAP}, True)}
    with scratch_database(args.dsn, "pgq_unkcount") as dsn:
        _fill(dsn, args.unknown)
        times: dict[str, list[float]] = {label: [] for label in ways}
        answers: dict[str, object] = {}
        with psycopg.connect(dsn, autocommit=True) as conn:

            def run(label: str) -> object:
                text, params, jit_off = ways[label]
                started = time.perf_counter()
                if jit_off:
                    with conn.transaction():
                        conn.execute(b"SELECT set_config('jit', 'off', true)")
                        rows = conn.execute(text, params).fetchall()
                else:
                    rows = conn.execute(text, params).fetchall()
                times[label].append((time.perf_counter() - started) * 1000)
                return rows

            for label in ways:  # warm-up, not kept
                answers[label] = run(label)
                times[label].clear()
            labels = list(ways)
            for round_ in range(args.rounds):
                for label in labels[round_ % 3:] + labels[:round_ % 3]:
                    run(label)
        for label, values in times.items():
            ordered = sorted(values)
            print(f"{label:<16} median {statistics.median(values):8.1f} ms  "
                  f"p90 {ordered[int(0.9 * (len(ordered) - 1))]:8.1f} ms  returned {answers[label]}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
