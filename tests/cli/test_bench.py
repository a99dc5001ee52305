"""`pgq bench` end to end: each workload as a real subprocess on a fresh migrated database (small N).

Checks the JSON line's fields (those of the shared peer harness), the job count, and that the run left
no job of its queue behind while never touching another queue's jobs.
"""

from __future__ import annotations

import json
from typing import Any

import psycopg
import pytest

from pgq import Queue

from .conftest import run_subprocess

COMMON_FIELDS = {"peer", "workload", "params", "rep", "jobs", "seconds", "jobs_per_s", "ts"}


def _bench(dsn: str, *args: str) -> dict[str, Any]:
    result = run_subprocess("bench", *args, "--dsn", dsn, timeout=60)
    assert result.code == 0, result.err
    lines = [line for line in result.out.splitlines() if line.strip()]
    assert len(lines) == 1, result.out
    record: dict[str, Any] = json.loads(lines[0])
    assert set(record) >= COMMON_FIELDS, record
    assert record["peer"] == "pgq"
    assert record["seconds"] > 0 and record["jobs_per_s"] > 0
    assert any(line.startswith("pgq bench: ") for line in result.err_lines)  # progress goes to stderr
    return record


def _jobs_by_queue(dsn: str) -> dict[str, int]:
    with psycopg.connect(dsn, autocommit=True) as conn:
        return {str(q): int(n) for q, n in conn.execute("SELECT queue, count(*) FROM pgq.jobs GROUP BY queue")}


@pytest.mark.parametrize(
    ("args", "workload", "jobs"),
    [
        (("--workload", "w1", "--jobs", "50"), "w1_enqueue_single", 50),
        (("--workload", "w2", "--jobs", "2000"), "w2_enqueue_batch", 2000),
        (("--workload", "w3", "--jobs", "300", "--concurrency", "4"), "w3_drain", 300),
        (("--workload", "w4", "--jobs", "20"), "w4_latency", 20),
    ],
)
def test_bench_workload_prints_one_record_and_cleans_up(
    pgq_dsn: str, pgq_queue: Queue, args: tuple[str, ...], workload: str, jobs: int
) -> None:
    other = pgq_queue.enqueue("someone.elses", {"n": 1}, queue="not-the-bench")
    record = _bench(pgq_dsn, *args)
    assert record["workload"] == workload
    assert record["jobs"] == jobs
    queue = record["params"]["queue"]
    assert queue.startswith("pgq-bench-")
    if workload in ("w1_enqueue_single", "w2_enqueue_batch"):
        assert record["rows_in_db"] == jobs
    if workload == "w3_drain":
        assert record["succeeded_once"] == jobs and record["failed"] == 0
        assert record["timed_out"] is False and record["worker_died"] is None
        assert record["params"]["concurrency"] == 4 and record["params"]["procs"] == 1
    if workload == "w4_latency":
        assert record["missing"] == 0
        assert 0 < record["lat_p50_ms"] <= record["lat_p95_ms"] <= record["lat_p99_ms"]
    # Only the bench's own queue was cleaned: the other queue's job is still there, untouched.
    assert _jobs_by_queue(pgq_dsn) == {"not-the-bench": 1}
    job = pgq_queue.get(other)
    assert job is not None and job.status.value == "queued"


def test_bench_rejects_an_unknown_workload_and_needs_a_database() -> None:
    bad = run_subprocess("bench", "--workload", "w9")
    assert bad.code == 2 and "invalid choice" in bad.err
    missing = run_subprocess("bench", "--workload", "w1")
    assert missing.code == 2
    assert missing.err_lines == ["pgq: error: no database given: pass --dsn DSN or set PGQ_DSN"]
