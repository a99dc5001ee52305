#!/usr/bin/env python3
"""DAG throughput: jobs/s through a graph of dependent jobs, next to as many plain jobs, in one run.

    python3 bench/workflows.py --dsn postgresql://postgres@127.0.0.1:5432/postgres [--width 10 --depth 100]

The graph has `depth` levels of `width` no-op jobs; every job of a level depends on 2 or 3 jobs of
the level above (`--parents`), chosen at random (seeded), so a level can start only once jobs of the
previous one finished: the run measures how fast a completion releases its children (the trigger in
the completing transaction, the NOTIFY, the claim) rather than how fast jobs run. The plain run is
the same number of no-op jobs without dependencies.

Each run enqueues its jobs while the queue is paused (so the enqueue is not timed), resumes it, and
waits until all succeeded; jobs/s = jobs / (last finish - first start), both from the database
clock. `--workers` processes of `pgq worker` (concurrency `--concurrency` each) stay up for the whole
run; the runs alternate plain and DAG in ABBA order, `--reps` pairs. Prints one line per run, the
means and their ratio, then one JSON line. A scratch database is created, migrated and dropped (see
bench/churn.py); the workers' logs are scanned for deadlocks (acknowledgements that the database
broke up and the worker sent again), which are reported.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import psycopg
from churn import scratch_database

import pgq

QUEUE = "bench"
APP = '''
import os
import pgq

app = pgq.App(os.environ["BENCH_DSN"])


@app.task(name="step", queue="bench")
def step(level: int = 0) -> None:
    """Nothing: the cost measured is pgq's own."""
'''


def dag_specs(width: int, depth: int, parents: tuple[int, int], rng: random.Random) -> list[list[list[int]]]:
    """Per level, per job, the positions (in the level above) of its parents; level 0 has none."""
    levels: list[list[list[int]]] = [[[] for _ in range(width)]]
    for _ in range(1, depth):
        levels.append([sorted(rng.sample(range(width), min(width, rng.randint(*parents)))) for _ in range(width)])
    return levels


def enqueue_dag(queue: pgq.Queue, levels: list[list[list[int]]]) -> list[int]:
    """Enqueue the graph level by level (one enqueue_many each); return every id."""
    ids: list[int] = []
    above: list[int] = []
    for level, jobs in enumerate(levels):
        above = queue.enqueue_many([
            pgq.JobSpec("step", {"level": level}, queue=QUEUE, depends_on=[above[p] for p in chosen] or None)
            for chosen in jobs])
        ids.extend(above)
    return ids


def drain(dsn: str, queue: pgq.Queue, enqueue: Any) -> dict[str, float]:
    """Pause the queue, enqueue (`enqueue(queue)` returns the ids), resume, wait for every job to
    succeed; return the count, the seconds the enqueue took and the drain's span (database clock)."""
    queue.pause(QUEUE)
    started = time.monotonic()
    ids = enqueue(queue)
    enqueued = time.monotonic() - started
    queue.resume(QUEUE)
    with psycopg.connect(dsn, autocommit=True) as conn:
        deadline = time.monotonic() + 600
        while True:
            row = conn.execute("SELECT count(*) FILTER (WHERE status = 'succeeded'), count(*) FILTER (WHERE status "
                               "IN ('failed', 'cancelled')) FROM pgq.jobs WHERE id = ANY(%s)", [ids]).fetchone()
            assert row is not None
            if row[1]:
                raise SystemExit(f"{row[1]} jobs did not succeed")
            if row[0] == len(ids):
                break
            if time.monotonic() > deadline:
                raise SystemExit(f"only {row[0]} of {len(ids)} jobs succeeded within 600 s")
            time.sleep(0.02)
        span = conn.execute("SELECT extract(epoch FROM max(finished_at) - min(started_at))::float8 FROM pgq.jobs "
                            "WHERE id = ANY(%s)", [ids]).fetchone()
        conn.execute("DELETE FROM pgq.job_dependencies WHERE job_id = ANY(%s)", [ids])
        conn.execute("DELETE FROM pgq.jobs WHERE id = ANY(%s)", [ids])
    assert span is not None
    return {"jobs": len(ids), "enqueue_s": enqueued, "span_s": float(span[0])}


def run(dsn: str, args: argparse.Namespace) -> None:
    """Start the workers, run the pairs, print the results."""
    rng = random.Random(args.seed)
    parents = (args.parents[0], args.parents[-1])
    with tempfile.TemporaryDirectory() as app_dir:
        Path(app_dir, "bench_app.py").write_text(APP)
        env = dict(os.environ, BENCH_DSN=dsn, PYTHONPATH=os.pathsep.join(filter(None, [
            app_dir, os.environ.get("PYTHONPATH")])))
        logs = [Path(app_dir, f"worker-{i}.log") for i in range(args.workers)]
        workers = [subprocess.Popen([sys.executable, "-m", "pgq", "worker", "bench_app:app", "--queue", QUEUE,
                                     "--concurrency", str(args.concurrency), "--log-level", "WARNING"],
                                    env=env, stdout=subprocess.DEVNULL, stderr=log.open("w")) for log in logs]
        rates: dict[str, list[float]] = {"plain": [], "dag": []}
        levels_ms: list[float] = []
        try:
            with pgq.Queue(dsn) as queue:
                for rep in range(args.reps):
                    for kind in ("plain", "dag") if rep % 2 == 0 else ("dag", "plain"):
                        if kind == "plain":
                            count = args.width * args.depth
                            result = drain(dsn, queue, lambda q, n=count: q.enqueue_many(
                                [pgq.JobSpec("step", queue=QUEUE) for _ in range(n)]))
                            what = f"plain {count:,} jobs"
                            extra = ""
                        else:
                            levels = dag_specs(args.width, args.depth, parents, rng)
                            result = drain(dsn, queue, lambda q, lv=levels: enqueue_dag(q, lv))
                            what = f"DAG {args.width} wide x {args.depth} deep, {parents[0]}-{parents[1]} parents"
                            levels_ms.append(result["span_s"] / args.depth * 1000)
                            extra = f", {levels_ms[-1]:.1f} ms per level"
                        rate = result["jobs"] / result["span_s"]
                        rates[kind].append(rate)
                        print(f"{what}: {rate:,.0f} jobs/s ({result['span_s']:.3f} s{extra}; enqueued in "
                              f"{result['enqueue_s']:.3f} s)", flush=True)
        finally:
            for worker in workers:
                worker.terminate()
            for worker in workers:
                worker.wait(30)
        deadlocks = sum(log.read_text(errors="replace").count("deadlock detected") for log in logs)
    plain, dag = statistics.mean(rates["plain"]), statistics.mean(rates["dag"])
    print(f"mean: plain {plain:,.0f} jobs/s, DAG {dag:,.0f} jobs/s ({dag / plain:.2f} of plain); "
          f"{args.workers} worker(s) x concurrency {args.concurrency}; {deadlocks} deadlocks in the workers' logs",
          flush=True)
    print(json.dumps({"workload": "workflows", "width": args.width, "depth": args.depth,
                      "parents": list(parents), "workers": args.workers, "concurrency": args.concurrency,
                      "reps": args.reps, "plain_jobs_per_s": round(plain), "dag_jobs_per_s": round(dag),
                      "dag_ms_per_level": round(statistics.mean(levels_ms), 2), "deadlocks": deadlocks}),
          flush=True)


def main(argv: list[str] | None = None) -> int:
    """Parse arguments; run in a scratch database."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--dsn", required=True, help="a server to create the scratch database on (any database)")
    parser.add_argument("--width", type=int, default=10, help="jobs per level (default 10)")
    parser.add_argument("--depth", type=int, default=100, help="levels (default 100)")
    parser.add_argument("--parents", type=int, nargs="+", default=[2, 3], metavar="N",
                        help="parents per job: one number, or the range LOW HIGH (default 2 3)")
    parser.add_argument("--workers", type=int, default=1, help="worker processes (default 1)")
    parser.add_argument("--concurrency", type=int, default=16, help="concurrency of each worker (default 16)")
    parser.add_argument("--reps", type=int, default=2, help="pairs of runs, plain and DAG, in ABBA order (default 2)")
    parser.add_argument("--seed", type=int, default=1, help="seed of the graphs (default 1)")
    args = parser.parse_args(argv)
    for name in ("width", "depth", "workers", "concurrency", "reps"):
        if getattr(args, name) < 1:
            parser.error(f"--{name} must be >= 1")
    if len(args.parents) > 2 or not 1 <= args.parents[0] <= args.parents[-1]:
        parser.error("--parents takes one number >= 1, or LOW HIGH with LOW <= HIGH")
    with scratch_database(args.dsn, "pgq_workflows") as scratch:
        run(scratch, args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
