"""`pgq bench`: pgq through the workloads of the shared peer harness (../shared/bench), one JSON line a run.

Workloads (the same definitions and output fields as the harness, so the lines can be put side by side):

- ``w1`` (``w1_enqueue_single``): N single `AsyncQueue.enqueue` calls, one after another, after 50
  untimed warm-up calls;
- ``w2`` (``w2_enqueue_batch``): N jobs through `AsyncQueue.enqueue_many` in batches of BATCH_SIZE;
- ``w3`` (``w3_drain``): prefill N no-op jobs, spawn P ``pgq worker`` subprocesses of concurrency C,
  time from the spawn until no job of the queue is queued or running; every job must end
  ``succeeded`` after exactly one attempt;
- ``w4`` (``w4_latency``): one idle worker of concurrency C; enqueue N jobs one at a time at
  W4_RATE_PER_S, each carrying ``t = time.time()``; the handler records ``time.time() - t``.

Every record holds ``peer`` ("pgq"), ``workload``, ``params``, ``rep``, ``jobs``, ``seconds`` and
``jobs_per_s``; W4 adds ``lat_p50_ms`` / ``lat_p95_ms`` / ``lat_p99_ms`` (and max, mean).

A run works in its own queue, ``pgq-bench-<random>``, of the given database (migrated first when it is
not), and deletes that queue's jobs when it ends, however it ends; other queues are never touched.

The W3/W4 worker subprocesses run the App of `pgq.cli.bench.workers`.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import secrets
import sys
import time
from typing import Any, TextIO, cast

from ...client import AsyncQueue
from ..args import int_range
from ..common import ENV_DSN, EXIT_OK, CliError, Commands, Formatter, connect_dsn, dsn_parent, one_line, resolve_dsn
from .records import (
    BATCH_SIZE,
    BENCH_KIND,
    DEFAULT_CONCURRENCY,
    DEFAULT_JOBS,
    DEFAULT_PROCESSES,
    W1_WARMUP_CALLS,
    WORKLOADS,
    BenchFailed,
    add_finished,
    bench_specs,
    delete_queue,
    ensure_migrated,
    lat_summary_ms,
    prefixed,
    record_params,
    result,
    unfinished,
)
from .workers import w3, w4

__all__ = ["register", "run_bench"]


def register(commands: Commands, dsn: argparse.ArgumentParser) -> None:
    """Add this command to `commands` (`dsn`: the parent parser with --dsn and --pgbouncer)."""
    p = commands.add_parser(
        "bench",
        parents=[
            dsn_parent(
                f"database to benchmark in (default: ${ENV_DSN}); it is migrated if needed, and the run's "
                "jobs live in a fresh queue 'pgq-bench-<random>' that is deleted at the end"
            )
        ],
        formatter_class=Formatter,
        help="measure enqueue, drain and wake-up latency; print one JSON line",
        description=(
            "Run one workload of the shared peer benchmark and print its result as one JSON line on\n"
            "stdout (progress on stderr):\n"
            "  w1  enqueue one job per call (default 5000 jobs, after 50 untimed calls)\n"
            "  w2  enqueue in batches of 1000 (default 50000 jobs)\n"
            "  w3  drain prefilled no-op jobs with worker subprocesses (default 20000 jobs); every job\n"
            "      must succeed after exactly one attempt\n"
            "  w4  wake-up latency of an idle worker, enqueue to handler start, 20 jobs/s (default 300)"
        ),
    )
    p.add_argument("--workload", required=True, choices=["w1", "w2", "w3", "w4"], help="the workload to run")
    p.add_argument(
        "--jobs", metavar="N", type=int_range("jobs", 1, 10_000_000), default=None,
        help="number of jobs (default: 5000, 50000, 20000 or 300, by workload)",
    )
    p.add_argument(
        "--processes", metavar="P", type=int_range("processes", 1, 64), default=1,
        help="worker processes for w3 (default: 1)",
    )
    p.add_argument(
        "--concurrency", metavar="C", type=int_range("concurrency", 1, 10_000), default=16,
        help="concurrency of each worker, for w3 and w4 (default: 16)",
    )
    p.add_argument(
        "--finished", metavar="N", type=int_range("finished", 0, 100_000_000), default=0,
        help="w3 only: first add N finished jobs (in a second throwaway queue, deleted at the end) to show\n"
             "the drain does not slow down as finished jobs accumulate (default: 0)",
    )
    p.add_argument(
        "--groups", metavar="G", type=int_range("groups", 0, 1_000_000), default=0,
        help="w3 only: give the jobs G group keys (job i: g<i mod G>), so that the drain claims them\n"
             "through the walk over groups; compare with 0, plain jobs (default: 0)",
    )
    p.set_defaults(handler=cmd_bench)


def cmd_bench(args: argparse.Namespace) -> int:
    """`pgq bench --workload W`: see run_bench; a run that cannot be measured exits 1."""
    dsn = connect_dsn(cast(str, resolve_dsn(args)))
    try:
        run_bench(dsn, args.workload, jobs=args.jobs, processes=args.processes,
                        concurrency=args.concurrency, finished=args.finished, groups=args.groups,
                        out=sys.stdout, err=sys.stderr)
    except BenchFailed as exc:
        raise CliError(f"bench {args.workload}: {one_line(exc)}") from None
    return EXIT_OK


def run_bench(dsn: str, workload: str, *, jobs: int | None = None, processes: int = DEFAULT_PROCESSES,
              concurrency: int = DEFAULT_CONCURRENCY, finished: int = 0, groups: int = 0,
              out: TextIO | None = None, err: TextIO | None = None) -> dict[str, Any]:
    """Run `workload` ("w1".."w4") once against `dsn`, print its record as one JSON line on `out`
    (default stdout) and return it. Progress goes to `err` (default stderr).

    `jobs` defaults to DEFAULT_JOBS[workload]; `processes` and `concurrency` apply to the workers of
    W3 (both) and W4 (concurrency; always one worker). `finished` (W3 only) first inserts that many
    succeeded jobs into a second queue, ``<queue>-finished``, so that a drain can be compared with and
    without a large history in the table. `groups` (W3 only): the jobs get that many group keys
    (revision 0014), to compare a grouped drain with a plain one. The database is migrated first when
    it is not. The run's
    jobs live in a fresh queue ``pgq-bench-<random>`` and are deleted at the end, whatever happens;
    worker subprocesses are stopped (SIGTERM, then SIGKILL after STOP_GRACE_S).

    Raises ValueError for an unknown workload or a non-positive count; BenchFailed when a run cannot
    be measured (a worker died, a drain timed out, a job did not succeed exactly once; the record is
    printed first when there is one); psycopg errors when the database fails.
    """
    if workload not in WORKLOADS:
        raise ValueError(f"unknown workload {workload!r}: choose one of {', '.join(WORKLOADS)}")
    n = DEFAULT_JOBS[workload] if jobs is None else jobs
    if n < 1 or processes < 1 or concurrency < 1:
        raise ValueError("jobs, processes and concurrency must be positive")
    if finished < 0 or (finished and workload != "w3"):
        raise ValueError("finished must be >= 0, and is for w3 only")
    if groups < 0 or (groups and workload != "w3"):
        raise ValueError("groups must be >= 0, and is for w3 only")
    out = out or sys.stdout
    err = err or sys.stderr
    queue = f"pgq-bench-{secrets.token_hex(4)}"

    def progress(message: str) -> None:
        print(f"pgq bench: {workload}: {message}", file=err, flush=True)

    ensure_migrated(dsn, progress)
    progress(f"{n} jobs in queue {queue!r}")
    failure: BenchFailed | None = None
    try:
        if workload == "w1":
            rec = asyncio.run(_w1(dsn, queue, n))
        elif workload == "w2":
            rec = asyncio.run(_w2(dsn, queue, n))
        elif workload == "w3":
            if finished:
                progress(f"adding {finished} finished jobs in queue {queue + '-finished'!r}")
                add_finished(dsn, queue + "-finished", finished)
            rec, failure = w3(dsn, queue, n, processes, concurrency, progress, groups)
            rec["params"]["finished"] = finished
        else:
            rec = w4(dsn, queue, n, concurrency, progress)
    finally:
        for name in (queue, queue + "-finished") if finished else (queue,):
            deleted = delete_queue(dsn, name)
            progress(f"deleted the {deleted} job(s) of queue {name!r}")
    print(json.dumps(rec), file=out, flush=True)
    if failure is not None:
        raise failure
    return rec


async def _w1(dsn: str, queue: str, n: int) -> dict[str, Any]:
    async with AsyncQueue(dsn, min_size=1, max_size=1) as q:
        for _ in range(W1_WARMUP_CALLS):  # connection, prepared statements
            await q.enqueue(BENCH_KIND, {"i": -1}, queue=queue)
        await asyncio.to_thread(delete_queue, dsn, queue)
        lats: list[float] = []
        pc = time.perf_counter
        t0 = pc()
        for i in range(n):
            s = pc()
            await q.enqueue(BENCH_KIND, {"i": i}, queue=queue)
            lats.append((pc() - s) * 1000.0)
        seconds = pc() - t0
    rows = await asyncio.to_thread(unfinished, dsn, queue)
    return result("w1_enqueue_single", record_params(n=n, queue=queue), n, seconds,
                  **prefixed(lat_summary_ms(lats), "call_"), rows_in_db=rows)


async def _w2(dsn: str, queue: str, n: int) -> dict[str, Any]:
    async with AsyncQueue(dsn, min_size=1, max_size=1) as q:
        await q.enqueue_many(bench_specs(queue, -10, 0))  # warm-up
        await asyncio.to_thread(delete_queue, dsn, queue)
        lats: list[float] = []
        pc = time.perf_counter
        t0 = pc()
        for start in range(0, n, BATCH_SIZE):
            s = pc()
            await q.enqueue_many(bench_specs(queue, start, min(n, start + BATCH_SIZE)))
            lats.append((pc() - s) * 1000.0)
        seconds = pc() - t0
    rows = await asyncio.to_thread(unfinished, dsn, queue)
    return result("w2_enqueue_batch", record_params(n=n, batch=BATCH_SIZE, queue=queue), n, seconds,
                  **prefixed(lat_summary_ms(lats), "batch_"), rows_in_db=rows)
