"""`pgq bench`'s shared pieces: settings, the record format of the shared harness, and the database
set-up and clean-up of a run."""

from __future__ import annotations

import importlib.metadata
import statistics
import time
from typing import Any

import psycopg

from ... import migrate
from ...errors import NotMigrated
from ...models import JobSpec

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


def pgq_version() -> str:
    try:
        return importlib.metadata.version("pgq-jobs")  # the distribution's name (pyproject.toml)
    except importlib.metadata.PackageNotFoundError:
        return "?"


def record_params(**extra: Any) -> dict[str, Any]:
    return {"version": pgq_version(), "loop": "asyncio", **extra}


def prefixed(summary: dict[str, float], prefix: str) -> dict[str, Any]:
    return {k.replace("lat_", prefix, 1): v for k, v in summary.items()}


def ensure_migrated(dsn: str, progress: Any) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        try:
            migrate.ensure_migrated(conn)
            return
        except NotMigrated:
            pass
    progress("the database is not at pgq's head revision: migrating it")
    migrate.upgrade(dsn)


def add_finished(dsn: str, queue: str, n: int) -> None:
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


def delete_queue(dsn: str, queue: str) -> int:
    """Delete every job of `queue` (and only of it); return how many."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        cur = conn.execute("DELETE FROM pgq.jobs WHERE queue = %s", (queue,))
        return cur.rowcount


def count_rows(conn: psycopg.Connection[Any], sql: str, queue: str) -> int:
    row = conn.execute(sql, (queue,)).fetchone()
    assert row is not None
    return int(row[0])


# Written as an OR of the two statuses so that Postgres combines the partial indexes of queued and of
# running jobs (BitmapOr); `status IN (...)` matches neither and scans every finished job, which with a
# million of them costs more than the drain being watched.
UNFINISHED_SQL = "SELECT count(*) FROM pgq.jobs WHERE queue = %s AND (status = 'queued' OR status = 'running')"


def bench_specs(queue: str, start: int, stop: int, groups: int = 0) -> list[JobSpec]:
    """The bench jobs `start` to `stop` - 1 of `queue`; with `groups`, job i has group key g<i % groups>."""
    if groups:
        return [JobSpec(BENCH_KIND, {"i": i}, queue=queue, group_key=f"g{i % groups}") for i in range(start, stop)]
    return [JobSpec(BENCH_KIND, {"i": i}, queue=queue) for i in range(start, stop)]


def unfinished(dsn: str, queue: str) -> int:
    """Jobs of `queue` still queued or running."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        return count_rows(conn, UNFINISHED_SQL, queue)
