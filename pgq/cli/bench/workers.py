"""`pgq bench`'s worker workloads, W3 (drain) and W4 (wake-up latency), run by `pgq worker`
subprocesses; and the App those subprocesses run (``pgq worker pgq.cli.bench.workers:app``): its one
task, BENCH_KIND, is registered on the queue named by ENV_QUEUE and records latencies to the file
named by ENV_LATFILE when that is set."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from typing import IO, Any, TextIO

import psycopg

from ...app import App
from ...client import AsyncQueue
from .records import (
    BATCH_SIZE,
    BENCH_KIND,
    ENV_DSN,
    ENV_LATFILE,
    ENV_QUEUE,
    STOP_GRACE_S,
    UNFINISHED_SQL,
    W3_POLL_S,
    W3_TIMEOUT_S,
    W4_COLLECT_TIMEOUT_S,
    W4_RATE_PER_S,
    W4_SETTLE_S,
    W4_STARTUP_TIMEOUT_S,
    W4_WARMUP_JOBS,
    BenchFailed,
    bench_specs,
    count_rows,
    lat_summary_ms,
    prefixed,
    record_params,
    result,
)

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


# Workers --------------------------------------------------------------------------------------


def _spawn_worker(dsn: str, queue: str, concurrency: int, log: IO[bytes],
                  extra_env: dict[str, str] | None = None) -> subprocess.Popen[bytes]:
    env = {k: v for k, v in os.environ.items() if k != ENV_LATFILE}
    env[ENV_QUEUE] = queue
    env.update(extra_env or {})
    cmd = [sys.executable, "-m", "pgq", "worker", "pgq.cli.bench.workers:app", "--queue", queue,
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


async def _prefill(dsn: str, queue: str, n: int, groups: int = 0) -> None:
    async with AsyncQueue(dsn, min_size=1, max_size=1) as q:
        for start in range(0, n, BATCH_SIZE):
            await q.enqueue_many(bench_specs(queue, start, min(n, start + BATCH_SIZE), groups))


def w3(dsn: str, queue: str, n: int, processes: int, concurrency: int,
        progress: Any, groups: int = 0) -> tuple[dict[str, Any], BenchFailed | None]:
    progress(f"prefilling {n} jobs" + (f" over {groups} group keys" if groups else ""))
    tp = time.perf_counter()
    asyncio.run(_prefill(dsn, queue, n, groups))
    prefill_s = time.perf_counter() - tp
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("VACUUM ANALYZE pgq.jobs")
        left = count_rows(conn, UNFINISHED_SQL, queue)
        if left != n:
            raise BenchFailed(f"prefill produced {left} jobs, expected {n}")
        progress(f"draining with {processes} worker process(es) of concurrency {concurrency}")
        with _workers(dsn, queue, processes, concurrency) as (procs, log_path):
            t0 = time.monotonic()
            t_first: float | None = None
            timed_out = False
            while True:
                time.sleep(W3_POLL_S)
                left = count_rows(conn, UNFINISHED_SQL, queue)
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
        record_params(config=f"c{concurrency}", n=n, procs=processes, concurrency=concurrency,
                worker="pgq worker CLI", queue=queue, groups=groups),
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


def w4(dsn: str, queue: str, n: int, concurrency: int, progress: Any) -> dict[str, Any]:
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
        record_params(config=f"c{concurrency}", n=n, rate_per_s=W4_RATE_PER_S, concurrency=concurrency,
                worker="pgq worker CLI", queue=queue),
        len(lat), enqueue_s, **prefixed(lat_summary_ms(lat), "lat_"), missing=n - len(lat),
    )
