"""Producers cannot stall workers: a producer's open transaction that names a running job (an
enqueue naming it in `depends_on`, a watermark enqueue of its key, Queue.wait marking it) and stays
open longer than a lease makes no heartbeat or acknowledgement wait; no live job is rescued, none
runs twice (the history checker). Since revisions 0012 and 0016 none of these locks the job: the
watermark raised while job 0 ran, committed after its completion, runs as a new job of the key
(the settle)."""

from __future__ import annotations

from typing import Any

import psycopg
import pytest

import pgq

from .conftest import wait_for
from .faults import LEASE_S, Faults

JOBS = 6
WORK_MS = 2500.0  # the jobs finish while the producer holds its transaction
HOLD_S = 2 * LEASE_S  # longer than a lease


def _lock(kind: str, queue: pgq.Queue, conn: psycopg.Connection[Any], job_id: int) -> int | None:
    """In the producer's transaction `conn`, the write of `kind` that locks running job `job_id`;
    returns the id of a job it enqueued, if any."""
    if kind == "dependency":
        return queue.enqueue("record", {"n": 100}, queue="work", depends_on=[job_id], conn=conn)
    if kind == "watermark":
        return queue.enqueue("chaos", {"n": 0, "ms": 0.0, "rerun_ms": 0.0}, queue="work", dedupe_key="key:0",
                             watermark=2, conn=conn)
    conn.execute("SELECT * FROM pgq.mark_awaited(%s)", [job_id])
    return None


@pytest.mark.parametrize("kind", ["dependency", "watermark", "awaited"])
def test_a_producer_holding_a_running_jobs_row_rescues_no_live_job(faults: Faults, kind: str) -> None:
    with pgq.Queue(faults.direct_dsn) as queue:
        ids = queue.enqueue_many([
            pgq.JobSpec("chaos", {"n": n, "ms": WORK_MS, "rerun_ms": 0.0}, queue="work",
                        dedupe_key=f"key:{n}", watermark=1)
            for n in range(JOBS)])
        worker = faults.worker("w1", through_proxy=False)
        wait_for(lambda: faults.db.status_counts().get("running") == JOBS, 30, "all jobs to run")
        with psycopg.connect(faults.direct_dsn) as producer:
            extra = _lock(kind, queue, producer, ids[0])
            faults.db.rows("SELECT pg_sleep(%s)", [HOLD_S])
        total = JOBS + (1 if kind in ("dependency", "watermark") else 0)
        wait_for(lambda: faults.db.status_counts() == {"succeeded": total}, 60, "every job to succeed")
        assert worker.alive()
    assert extra is None or extra in (ids[0], *faults.db.rows("SELECT max(id) AS m FROM pgq.jobs")[0].values())
    rescued = faults.db.rows("SELECT id, last_error FROM pgq.jobs WHERE last_error IS NOT NULL")
    assert rescued == [], rescued
    claims = {r["job_id"]: r["n"] for r in faults.db.rows(
        "SELECT job_id, count(*) AS n FROM history WHERE event = 'claim' GROUP BY 1")}
    # One run each: the watermark raised while job 0 ran committed after its completion, and ran as a
    # job of its own (the settle), for watermark 2 only.
    assert claims == dict.fromkeys(claims, 1), claims
    if kind == "watermark":
        assert faults.db.rows("SELECT input_watermark AS w, done_watermark AS d FROM pgq.jobs "
                              "WHERE dedupe_key = 'key:0' ORDER BY id") == [{"w": 1, "d": 1}, {"w": 2, "d": 2}]
    assert "lease lost" not in worker.log() and "refused" not in worker.log()
    faults.check_history()
