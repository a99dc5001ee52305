#!/usr/bin/env python3
"""WAL per job over enqueue plus drain, the measure of issue #43: the bytes of WAL a private cluster
writes while --jobs jobs are enqueued in batches of --batch, then while a `pgq worker` with
--concurrency slots drains them, for this checkout and a baseline commit, alternated.

    python3 bench/wal_per_job.py                            # this checkout against caf8cde, 2 rounds
    python3 bench/wal_per_job.py --baseline 739f90b --rounds 3 --jobs 20000

WAL is written for the whole cluster, so the measure needs a cluster of its own: initdb in a
temporary folder (the server binaries of `pg_config --bindir` or --bindir), nothing else connected.
Each side gets a fresh database migrated by its own `pgq migrate`; `pg_current_wal_lsn()` is read
before the enqueue, after it, and once the worker has drained the queue (it is then stopped). A
CHECKPOINT before each phase makes every phase pay its full-page images alike (the first change of
each page after a checkpoint writes the whole page); --no-checkpoint leaves them to chance. The
worker's own upkeep (heartbeats, registry, counts) is part of the drain, as in production. Prints
bytes per job of each phase and their sum, the medians over the rounds, and HEAD / baseline.
"""

from __future__ import annotations

import argparse
import os
import signal
import statistics
import subprocess
import sys
import time
from pathlib import Path

import psycopg
from private_cluster import ROOT, PrivateCluster, export_tree, throwaway

QUEUE = "walq"
KIND = "pgq.bench.noop"  # the bench App's task (pgq.cli.bench.workers), present at caf8cde too

ENQUEUE = r'''
import sys
from pgq import JobSpec, Queue
dsn, queue, kind, n, batch = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]), int(sys.argv[5])
with Queue(dsn, min_size=1, max_size=1) as q:
    for start in range(0, n, batch):
        q.enqueue_many([JobSpec(kind, {"i": i}, queue=queue) for i in range(start, min(n, start + batch))])
'''


def lsn(dsn: str, checkpoint: bool) -> int:
    """The cluster's current WAL position in bytes (after a CHECKPOINT when `checkpoint`)."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        if checkpoint:
            conn.execute("CHECKPOINT")
        row = conn.execute("SELECT pg_current_wal_lsn() - '0/0'::pg_lsn").fetchone()
        assert row is not None
        return int(row[0])


def one_side(cluster: PrivateCluster, tree: Path, db: str, jobs: int, batch: int, concurrency: int,
             checkpoint: bool) -> tuple[float, float]:
    """WAL bytes per job of the enqueue and of the drain, on a new database `db` for the pgq of `tree`."""
    dsn = cluster.migrated_database(db, tree)
    env = dict(os.environ, PYTHONPATH=str(tree), PGQ_BENCH_QUEUE=QUEUE, PGQ_BENCH_DSN=dsn)
    start = lsn(dsn, checkpoint)
    subprocess.run([sys.executable, "-c", ENQUEUE, dsn, QUEUE, KIND, str(jobs), str(batch)], env=env, cwd=tree,
                   check=True)
    enqueued = lsn(dsn, checkpoint)
    worker = subprocess.Popen([sys.executable, "-m", "pgq", "worker", "pgq.cli.bench.workers:app", "--queue", QUEUE,
                               "--concurrency", str(concurrency), "--dsn", dsn, "--log-level", "WARNING"],
                              env=env, cwd=tree, stdin=subprocess.DEVNULL)
    try:
        with psycopg.connect(dsn, autocommit=True) as conn:
            deadline = time.monotonic() + 600
            while True:
                row = conn.execute("SELECT count(*) FROM pgq.jobs WHERE queue = %s "
                                   "AND (status = 'queued' OR status = 'running')", (QUEUE,)).fetchone()
                if row is not None and row[0] == 0:
                    break
                if worker.poll() is not None or time.monotonic() > deadline:
                    raise SystemExit(f"the worker stopped or took too long (exit {worker.poll()})")
                time.sleep(0.2)
        drained = lsn(dsn, False)  # before the worker's shutdown writes anything
    finally:
        worker.send_signal(signal.SIGTERM)
        worker.wait(60)
    with psycopg.connect(cluster.dsn + "postgres", autocommit=True) as conn:
        conn.execute(f"DROP DATABASE {db}")
    return (enqueued - start) / jobs, (drained - enqueued) / jobs


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--baseline", default="caf8cde", help="the commit to compare with (default caf8cde)")
    parser.add_argument("--rounds", type=int, default=2, help="alternated rounds, each runs both sides (default 2)")
    parser.add_argument("--jobs", type=int, default=20_000, help="jobs enqueued and drained (default 20,000)")
    parser.add_argument("--batch", type=int, default=1000, help="jobs per enqueue (default 1,000)")
    parser.add_argument("--concurrency", type=int, default=16, help="the worker's slots (default 16)")
    parser.add_argument("--no-checkpoint", action="store_true", help="no CHECKPOINT before each phase")
    parser.add_argument("--bindir", help="PostgreSQL server binaries (default: pg_config --bindir)")
    opts = parser.parse_args()
    if min(opts.rounds, opts.jobs, opts.batch, opts.concurrency) < 1:
        parser.error("--rounds, --jobs, --batch and --concurrency must be at least 1")
    with throwaway(PrivateCluster, opts.bindir, "pgq-wal-") as (cluster, tmp):
        sides = {"HEAD": ROOT, opts.baseline: export_tree(opts.baseline, tmp)}
        print(f"WAL bytes per job: {opts.jobs} jobs enqueued in batches of {opts.batch}, drained by a worker "
              f"of {opts.concurrency} slots; {'no ' if opts.no_checkpoint else ''}CHECKPOINT before each phase")
        got: dict[str, list[tuple[float, float]]] = {name: [] for name in sides}
        for r in range(opts.rounds):
            order = list(sides.items()) if r % 2 == 0 else list(sides.items())[::-1]
            for i, (name, tree) in enumerate(order):
                enq, drain = one_side(cluster, tree, f"wal_{r}_{i}", opts.jobs, opts.batch, opts.concurrency,
                                      not opts.no_checkpoint)
                got[name].append((enq, drain))
                print(f"  round {r + 1} {name:>10}: enqueue {enq:7.0f}  drain {drain:7.0f}  "
                      f"total {enq + drain:7.0f}", flush=True)
        med = {name: (statistics.median(e for e, _ in v), statistics.median(d for _, d in v))
               for name, v in got.items()}
        for name, (enq, drain) in med.items():
            print(f"  median {name:>10}: enqueue {enq:7.0f}  drain {drain:7.0f}  total {enq + drain:7.0f}")
        (he, hd), (be, bd) = med["HEAD"], med[opts.baseline]
        print(f"  HEAD / {opts.baseline}: enqueue {he / be:.3f}  drain {hd / bd:.3f}  "
              f"total {(he + hd) / (be + bd):.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
