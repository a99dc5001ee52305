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

This module is also the App the W3/W4 worker subprocesses run (``pgq worker pgq.bench:app``): its one
task, BENCH_KIND, is registered on the queue named by the environment variable ENV_QUEUE, and records
latencies to the file named by ENV_LATFILE when that is set.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib.metadata
import json
import os
import secrets
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from typing import IO, Any, TextIO

import psycopg

from . import migrate
from .app import App
from .client import AsyncQueue
from .errors import NotMigrated
from .models import JobSpec

__all__ = [
    "BATCH_SIZE",
    "BENCH_KIND",
    "DEFAULT_JOBS",
    "WORKLOADS",
    "BenchFailed",
    "app",
    "lat_summary_ms",
    "pct",
    "result",
    "run_bench",
]

PEER = "pgq"
BENCH_KIND = "pgq.bench.noop"
ENV_QUEUE = "PGQ_BENCH_QUEUE"
"""Queue of the bench App's task in a worker subprocess (set by the driver)."""
ENV_LATFILE = "PGQ_BENCH_LATFILE"
"""File a W4 worker appends one latency (ms) per line to (set by the driver)."""
ENV_DSN = "PGQ_BENCH_DSN"
"""The App's own DSN; the driver passes ``--dsn`` to the worker anyway."""

WORKLOADS = {
    "w1": "w1_enqueue_single",
    "w2": "w2_enqueue_batch",
    "w3": "w3_drain",
    "w4": "w4_latency",
}
DEFAULT_JOBS = {"w1": 5_000, "w2": 50_000, "w3": 20_000, "w4": 300}
DEFAULT_PROCESSES = 1
DEFAULT_CONCURRENCY = 16
BATCH_SIZE = 1_000
W1_WARMUP_CALLS = 50
W3_POLL_S = 0.1
W3_TIMEOUT_S = 600.0
W4_RATE_PER_S = 20.0
W4_WARMUP_JOBS = 5
W4_SETTLE_S = 1.0
W4_STARTUP_TIMEOUT_S = 60.0
W4_COLLECT_TIMEOUT_S = 30.0
STOP_GRACE_S = 10.0


class BenchFailed(Exception):
    """A run could not produce a valid measurement (a worker died, a drain timed out, a job ran twice...)."""


# ---------------------------------------------------------------------------------------------
# The App the worker subprocesses run

app = App(os.environ.get(ENV_DSN) or "postgresql:///pgq_bench_dsn_not_set")
"""The bench App: one no-op task, BENCH_KIND, on the queue $PGQ_BENCH_QUEUE (default ``pgq-bench``)."""

_latfile: TextIO | None = None


def _open_latfile() -> TextIO | None:
    path = os.environ.get(ENV_LATFILE)
    return open(path, "a", buffering=1) if path else None


@app.task(name=BENCH_KIND, queue=os.environ.get(ENV_QUEUE) or "pgq-bench")
async def noop(i: int, t: float | None = None) -> None:
    """Do nothing; with `t` (the enqueuer's ``time.time()``) and a latency file, record now - t in ms."""
    global _latfile
    now = time.time()
    if t is not None:
        if _latfile is None:
            _latfile = _open_latfile()
        if _latfile is not None:
            _latfile.write(f"{(now - t) * 1000.0:.3f}\n")


# ---------------------------------------------------------------------------------------------
# Records (the harness's common.py, same rounding and field names)


def pct(values: list[float], p: float) -> float:
    """Return the `p`-th percentile (0..100) of `values`, interpolated between ranks; NaN when empty."""
    if not values:
        return float("nan")
    s = sorted(values)
    if len(s) == 1:
        return s[0]
    k = (len(s) - 1) * p / 100.0
    f = int(k)
    c = min(f + 1, len(s) - 1)
    return s[f] + (s[c] - s[f]) * (k - f)


def lat_summary_ms(values_ms: list[float]) -> dict[str, float]:
    """Return ``lat_p50_ms``, ``lat_p95_ms``, ``lat_p99_ms``, ``lat_max_ms``, ``lat_mean_ms`` of `values_ms`."""
    return {
        "lat_p50_ms": round(pct(values_ms, 50), 3),
        "lat_p95_ms": round(pct(values_ms, 95), 3),
        "lat_p99_ms": round(pct(values_ms, 99), 3),
        "lat_max_ms": round(max(values_ms), 3) if values_ms else float("nan"),
        "lat_mean_ms": round(statistics.fmean(values_ms), 3) if values_ms else float("nan"),
    }


def result(workload: str, params: dict[str, Any], jobs: int, seconds: float, *, rep: int = 1,
           **extra: Any) -> dict[str, Any]:
    """Return one record: peer, workload, params, rep, jobs, seconds, jobs_per_s (None for 0 s), extras, ts."""
    rec: dict[str, Any] = {
        "peer": PEER,
        "workload": workload,
        "params": params,
        "rep": rep,
        "jobs": jobs,
        "seconds": round(seconds, 4),
        "jobs_per_s": round(jobs / seconds, 1) if seconds > 0 else None,
    }
    rec.update(extra)
    rec.setdefault("ts", time.strftime("%Y-%m-%dT%H:%M:%S"))
    return rec


def _version() -> str:
    try:
        return importlib.metadata.version("pgq-jobs")  # the distribution's name (pyproject.toml)
    except importlib.metadata.PackageNotFoundError:
        return "?"


def _params(**extra: Any) -> dict[str, Any]:
    return {"version": _version(), "loop": "asyncio", **extra}


def _prefixed(summary: dict[str, float], prefix: str) -> dict[str, Any]:
    return {k.replace("lat_", prefix, 1): v for k, v in summary.items()}


# ---------------------------------------------------------------------------------------------
# Driver


def run_bench(dsn: str, workload: str, *, jobs: int | None = None, processes: int = DEFAULT_PROCESSES,
              concurrency: int = DEFAULT_CONCURRENCY, finished: int = 0, out: TextIO | None = None,
              err: TextIO | None = None) -> dict[str, Any]:
    """Run `workload` ("w1".."w4") once against `dsn`, print its record as one JSON line on `out`
    (default stdout) and return it. Progress goes to `err` (default stderr).

    `jobs` defaults to DEFAULT_JOBS[workload]; `processes` and `concurrency` apply to the workers of
    W3 (both) and W4 (concurrency; always one worker). `finished` (W3 only) first inserts that many
    succeeded jobs into a second queue, ``<queue>-finished``, so that a drain can be compared with and
    without a large history in the table. The database is migrated first when it is not. The run's
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
    out = out or sys.stdout
    err = err or sys.stderr
    queue = f"pgq-bench-{secrets.token_hex(4)}"

    def progress(message: str) -> None:
        print(f"pgq bench: {workload}: {message}", file=err, flush=True)

    _ensure_migrated(dsn, progress)
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
                _add_finished(dsn, queue + "-finished", finished)
            rec, failure = _w3(dsn, queue, n, processes, concurrency, progress)
            rec["params"]["finished"] = finished
        else:
            rec = _w4(dsn, queue, n, concurrency, progress)
    finally:
        for name in (queue, queue + "-finished") if finished else (queue,):
            deleted = _delete_queue(dsn, name)
            progress(f"deleted the {deleted} job(s) of queue {name!r}")
    print(json.dumps(rec), file=out, flush=True)
    if failure is not None:
        raise failure
    return rec


def _ensure_migrated(dsn: str, progress: Any) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        try:
            migrate.ensure_migrated(conn)
            return
        except NotMigrated:
            pass
    progress("the database is not at pgq's head revision: migrating it")
    migrate.upgrade(dsn)


def _add_finished(dsn: str, queue: str, n: int) -> None:
    """Insert `n` jobs that succeeded a while ago into `queue`, in batches of 100,000 (bench setup:
    the history a busy deployment keeps until retention deletes it)."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        for start in range(0, n, 100_000):
            conn.execute(
                "INSERT INTO pgq.jobs (queue, kind, payload, status, attempts, run_at, created_at, started_at,"
                " finished_at) SELECT %(queue)s, %(kind)s, jsonb_build_object('i', i), 'succeeded', 1,"
                " now() - interval '1 hour', now() - interval '1 hour', now() - interval '1 hour',"
                " now() - interval '1 hour' FROM generate_series(%(start)s::int, %(stop)s::int - 1) AS i",
                {"queue": queue, "kind": BENCH_KIND, "start": start, "stop": min(n, start + 100_000)},
            )


def _delete_queue(dsn: str, queue: str) -> int:
    """Delete every job of `queue` (and only of it); return how many."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        cur = conn.execute("DELETE FROM pgq.jobs WHERE queue = %s", (queue,))
        return cur.rowcount


def _count(conn: psycopg.Connection[Any], sql: str, queue: str) -> int:
    row = conn.execute(sql, (queue,)).fetchone()
    assert row is not None
    return int(row[0])


# Written as an OR of the two statuses so that Postgres combines the partial indexes of queued and of
# running jobs (BitmapOr); `status IN (...)` matches neither and scans every finished job, which with a
# million of them costs more than the drain being watched.
_UNFINISHED_SQL = "SELECT count(*) FROM pgq.jobs WHERE queue = %s AND (status = 'queued' OR status = 'running')"


def _specs(queue: str, start: int, stop: int) -> list[JobSpec]:
    return [JobSpec(BENCH_KIND, {"i": i}, queue=queue) for i in range(start, stop)]


# W1 / W2 --------------------------------------------------------------------------------------


async def _w1(dsn: str, queue: str, n: int) -> dict[str, Any]:
    async with AsyncQueue(dsn, min_size=1, max_size=1) as q:
        for _ in range(W1_WARMUP_CALLS):  # connection, prepared statements
            await q.enqueue(BENCH_KIND, {"i": -1}, queue=queue)
        await asyncio.to_thread(_delete_queue, dsn, queue)
        lats: list[float] = []
        pc = time.perf_counter
        t0 = pc()
        for i in range(n):
            s = pc()
            await q.enqueue(BENCH_KIND, {"i": i}, queue=queue)
            lats.append((pc() - s) * 1000.0)
        seconds = pc() - t0
    rows = await asyncio.to_thread(_rows, dsn, queue)
    return result("w1_enqueue_single", _params(n=n, queue=queue), n, seconds,
                  **_prefixed(lat_summary_ms(lats), "call_"), rows_in_db=rows)


async def _w2(dsn: str, queue: str, n: int) -> dict[str, Any]:
    async with AsyncQueue(dsn, min_size=1, max_size=1) as q:
        await q.enqueue_many(_specs(queue, -10, 0))  # warm-up
        await asyncio.to_thread(_delete_queue, dsn, queue)
        lats: list[float] = []
        pc = time.perf_counter
        t0 = pc()
        for start in range(0, n, BATCH_SIZE):
            s = pc()
            await q.enqueue_many(_specs(queue, start, min(n, start + BATCH_SIZE)))
            lats.append((pc() - s) * 1000.0)
        seconds = pc() - t0
    rows = await asyncio.to_thread(_rows, dsn, queue)
    return result("w2_enqueue_batch", _params(n=n, batch=BATCH_SIZE, queue=queue), n, seconds,
                  **_prefixed(lat_summary_ms(lats), "batch_"), rows_in_db=rows)


def _rows(dsn: str, queue: str) -> int:
    with psycopg.connect(dsn, autocommit=True) as conn:
        return _count(conn, _UNFINISHED_SQL, queue)


# Workers --------------------------------------------------------------------------------------


def _spawn_worker(dsn: str, queue: str, concurrency: int, log: IO[bytes],
                  extra_env: dict[str, str] | None = None) -> subprocess.Popen[bytes]:
    env = {k: v for k, v in os.environ.items() if k != ENV_LATFILE}
    env[ENV_QUEUE] = queue
    env.update(extra_env or {})
    cmd = [sys.executable, "-m", "pgq", "worker", "pgq.bench:app", "--queue", queue,
           "--concurrency", str(concurrency), "--dsn", dsn, "--log-level", "WARNING"]
    return subprocess.Popen(cmd, env=env, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                            start_new_session=True)


def _stop_workers(procs: list[subprocess.Popen[bytes]], grace: float = STOP_GRACE_S) -> None:
    """SIGTERM every worker's process group, wait up to `grace` seconds, SIGKILL what is left."""
    for p in procs:
        if p.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(p.pid, signal.SIGTERM)
    deadline = time.monotonic() + grace
    for p in procs:
        try:
            p.wait(timeout=max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(p.pid, signal.SIGKILL)
            p.wait()


@contextlib.contextmanager
def _workers(dsn: str, queue: str, count: int, concurrency: int,
             extra_env: dict[str, str] | None = None) -> Iterator[tuple[list[subprocess.Popen[bytes]], str]]:
    """Run `count` worker subprocesses for the duration of the block; yield them and their log's path."""
    with tempfile.NamedTemporaryFile(prefix="pgq-bench-worker-", suffix=".log", delete=False) as log:
        procs: list[subprocess.Popen[bytes]] = []
        try:
            for _ in range(count):
                procs.append(_spawn_worker(dsn, queue, concurrency, log, extra_env))
            yield procs, log.name
        finally:
            _stop_workers(procs)
            with contextlib.suppress(OSError):
                os.unlink(log.name)


def _log_tail(path: str, lines: int = 20) -> str:
    with contextlib.suppress(OSError), open(path, errors="replace") as fh:
        return "".join(fh.readlines()[-lines:]).strip()
    return ""


def _proc_cpu_seconds(pid: int) -> float | None:
    try:
        with open(f"/proc/{pid}/stat") as fh:
            data = fh.read()
        fields = data[data.rfind(")") + 2:].split()
        return (float(fields[11]) + float(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, IndexError, ValueError):
        return None


def _proc_peak_rss_mb(pid: int) -> float | None:
    """Peak resident memory (VmHWM) of a live process, in MB; None where /proc cannot tell."""
    try:
        with open(f"/proc/{pid}/status") as fh:
            for line in fh:
                if line.startswith("VmHWM:"):
                    return round(int(line.split()[1]) / 1024, 1)
    except (OSError, IndexError, ValueError):
        pass
    return None


# W3 -------------------------------------------------------------------------------------------


async def _prefill(dsn: str, queue: str, n: int) -> None:
    async with AsyncQueue(dsn, min_size=1, max_size=1) as q:
        for start in range(0, n, BATCH_SIZE):
            await q.enqueue_many(_specs(queue, start, min(n, start + BATCH_SIZE)))


def _w3(dsn: str, queue: str, n: int, processes: int, concurrency: int,
        progress: Any) -> tuple[dict[str, Any], BenchFailed | None]:
    progress(f"prefilling {n} jobs")
    tp = time.perf_counter()
    asyncio.run(_prefill(dsn, queue, n))
    prefill_s = time.perf_counter() - tp
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("VACUUM ANALYZE pgq.jobs")
        left = _count(conn, _UNFINISHED_SQL, queue)
        if left != n:
            raise BenchFailed(f"prefill produced {left} jobs, expected {n}")
        progress(f"draining with {processes} worker process(es) of concurrency {concurrency}")
        with _workers(dsn, queue, processes, concurrency) as (procs, log_path):
            t0 = time.monotonic()
            t_first: float | None = None
            timed_out = False
            while True:
                time.sleep(W3_POLL_S)
                left = _count(conn, _UNFINISHED_SQL, queue)
                now = time.monotonic()
                if t_first is None and left < n:
                    t_first = now
                if left == 0:
                    break
                if now - t0 > W3_TIMEOUT_S or any(p.poll() is not None for p in procs):
                    timed_out = True
                    break
            t1 = time.monotonic()
            cpu = [_proc_cpu_seconds(p.pid) for p in procs]
            rss = [_proc_peak_rss_mb(p.pid) for p in procs]
            died = [p.returncode for p in procs if p.poll() is not None]
            row = conn.execute(
                "SELECT count(*) FILTER (WHERE status = 'succeeded' AND attempts = 1),"
                " count(*) FILTER (WHERE status = 'failed'), count(*) FROM pgq.jobs WHERE queue = %s",
                (queue,),
            ).fetchone()
            assert row is not None
            succeeded_once, failed, total = (int(v) for v in row)
            log_tail = _log_tail(log_path) if died or timed_out else ""
    done = n - left
    rec = result(
        "w3_drain",
        _params(config=f"c{concurrency}", n=n, procs=processes, concurrency=concurrency,
                worker="pgq worker CLI", queue=queue),
        done, t1 - t0,
        startup_s=round(t_first - t0, 3) if t_first is not None else None,
        steady_jobs_per_s=round(done / (t1 - t_first), 1) if t_first is not None and t1 > t_first else None,
        worker_cpu_s=round(sum(c for c in cpu if c is not None), 2) if all(c is not None for c in cpu) else None,
        worker_peak_rss_mb=max((r for r in rss if r is not None), default=None),
        failed=failed, succeeded_once=succeeded_once, timed_out=timed_out, worker_died=died or None,
        prefill_s=round(prefill_s, 2),
    )
    failure = None
    if timed_out or died:
        what = "a worker exited" if died else f"the drain took longer than {W3_TIMEOUT_S:g} s"
        failure = BenchFailed(f"{what}; {left} job(s) unfinished" + (f"; worker log: {log_tail}" if log_tail else ""))
    elif succeeded_once != n or total != n:
        failure = BenchFailed(
            f"{succeeded_once} of {n} jobs succeeded after exactly one attempt ({total} in the queue)"
        )
    return rec, failure


# W4 -------------------------------------------------------------------------------------------


def _read_latencies(path: str) -> list[float]:
    with open(path) as fh:
        return [float(x) for x in fh.read().split()]


async def _w4_enqueue(dsn: str, queue: str, n: int, latfile: str, worker: subprocess.Popen[bytes],
                      progress: Any) -> tuple[list[float], float]:
    async with AsyncQueue(dsn, min_size=1, max_size=1) as q:
        deadline = time.monotonic() + W4_STARTUP_TIMEOUT_S
        for _ in range(W4_WARMUP_JOBS):
            await q.enqueue(BENCH_KIND, {"i": -1, "t": time.time()}, queue=queue)
        while len(_read_latencies(latfile)) < W4_WARMUP_JOBS:
            if time.monotonic() > deadline or worker.poll() is not None:
                raise BenchFailed("the worker did not run the warm-up jobs")
            await asyncio.sleep(0.05)
        await asyncio.sleep(W4_SETTLE_S)  # let the worker go idle
        progress(f"enqueueing {n} jobs at {W4_RATE_PER_S:g}/s")
        base = len(_read_latencies(latfile))
        interval = 1.0 / W4_RATE_PER_S
        t_start = time.perf_counter()
        for i in range(n):
            delay = t_start + i * interval - time.perf_counter()
            if delay > 0:
                await asyncio.sleep(delay)
            await q.enqueue(BENCH_KIND, {"i": i, "t": time.time()}, queue=queue)
        enqueue_s = time.perf_counter() - t_start
    deadline = time.monotonic() + W4_COLLECT_TIMEOUT_S
    while True:
        values = _read_latencies(latfile)
        if len(values) >= base + n or time.monotonic() > deadline or worker.poll() is not None:
            break
        await asyncio.sleep(0.05)
    return values[base:base + n], enqueue_s


def _w4(dsn: str, queue: str, n: int, concurrency: int, progress: Any) -> dict[str, Any]:
    fd, latfile = tempfile.mkstemp(prefix="pgq-bench-lat-", suffix=".txt")
    os.close(fd)
    try:
        progress(f"starting one worker of concurrency {concurrency}")
        with _workers(dsn, queue, 1, concurrency, {ENV_LATFILE: latfile}) as (procs, log_path):
            try:
                lat, enqueue_s = asyncio.run(_w4_enqueue(dsn, queue, n, latfile, procs[0], progress))
            except BenchFailed as exc:
                tail = _log_tail(log_path)
                raise BenchFailed(f"{exc}" + (f"; worker log: {tail}" if tail else "")) from None
    finally:
        os.unlink(latfile)
    return result(
        "w4_latency",
        _params(config=f"c{concurrency}", n=n, rate_per_s=W4_RATE_PER_S, concurrency=concurrency,
                worker="pgq worker CLI", queue=queue),
        len(lat), enqueue_s, **_prefixed(lat_summary_ms(lat), "lat_"), missing=n - len(lat),
    )
