"""The App that subprocess workers of the tests run (imported by runner.py, never by pytest itself).

Reads its DSN from PGQ_TEST_WORKER_DSN (and the one for `effects` from PGQ_TEST_EFFECTS_DSN, by
default the same). Handlers record what they do in the table `effects`
(created by the tests) through their own connection pool, so the tests can count side effects
independently of pgq's own bookkeeping. PGQ_TEST_PERIODIC=1 also registers a 1-second periodic task,
PGQ_TEST_GROUPS=1 the tasks with group limits.
"""

from __future__ import annotations

import asyncio
import os
import threading
import time
from typing import Any

from psycopg_pool import ConnectionPool

import pgq

DSN = os.environ["PGQ_TEST_WORKER_DSN"]
# The handlers' own connection for `effects`: direct to the server even when the worker's DSN goes
# through a fault proxy, so that a cut network cannot hide or repeat a side effect's record.
EFFECTS_DSN = os.environ.get("PGQ_TEST_EFFECTS_DSN", DSN)
app = pgq.App(DSN)

_pool: ConnectionPool[Any] | None = None
_pool_lock = threading.Lock()


def _effects_pool() -> ConnectionPool[Any]:
    """The handlers' pool of connections to EFFECTS_DSN, opened on first use."""
    global _pool
    with _pool_lock:
        if _pool is None:
            _pool = ConnectionPool(EFFECTS_DSN, min_size=1, max_size=4, kwargs={"autocommit": True}, open=True)
        return _pool


def record(n: int | None = None, note: str | None = None) -> None:
    """Insert one row into `effects` for the current job (its id, attempt, lease token, this pid)."""
    job = pgq.current_job()
    with _effects_pool().connection() as conn:
        conn.execute(
            "INSERT INTO effects (job_id, kind, n, attempt, token, pid, note) VALUES (%s, %s, %s, %s, %s, %s, %s)",
            (job.id, job.kind, n, job.attempts, job.lease_token, os.getpid(), note),
        )


@app.task(name="record", queue="work")
def record_task(n: int) -> int:
    """Record the job once and return n."""
    record(n)
    return n


@app.task(name="hold", queue="work")
def hold(n: int, seconds: float) -> str:
    """Record that the attempt started; the first attempt then blocks `seconds`, later ones return."""
    record(n, "started")
    if pgq.current_job().attempts == 1:
        time.sleep(seconds)
    record(n, "finished")
    return "done"


@app.task(name="nap", queue="work")
async def nap(n: int, seconds: float) -> int:
    """Record the start, sleep `seconds` on the event loop, record the end."""
    await asyncio.to_thread(record, n, "started")
    await asyncio.sleep(seconds)
    await asyncio.to_thread(record, n, "finished")
    return n


@app.task(name="sleepy", queue="work")
def sleepy(n: int, seconds: float) -> int:
    """Sleep `seconds` in the thread pool; no database side effect (survives outages)."""
    time.sleep(seconds)
    return n


@app.task(name="chaos", queue="work", retry=pgq.Backoff(initial=0.2, max_delay=1.0, min_delay=0.1))
def chaos(n: int, ms: float, rerun_ms: float) -> dict[str, Any]:
    """Work `ms` milliseconds (`rerun_ms` on later attempts), then record the side effect (one `effects`
    row: job, attempt, lease token, pid) in its own autocommit transaction, outside pgq's
    acknowledgement: a kill after the insert and before the acknowledgement repeats it (at-least-once).
    The result names the attempt's lease token, so the stored result tells which attempt's
    acknowledgement finished the job. Retries quickly after errors (a server restart breaks the pool's
    connections)."""
    time.sleep((ms if pgq.current_job().attempts == 1 else rerun_ms) / 1000)
    record(n, "effect")
    return {"n": n, "token": str(pgq.current_job().lease_token)}


@app.task(name="limited", queue="work", retry=pgq.Backoff(initial=0.2, max_delay=1.0, min_delay=0.1))
def limited(n: int, ms: float, rerun_ms: float) -> dict[str, Any]:
    """`chaos` under another kind, for a concurrency limit set by the test (not here: a limit anywhere
    sends every claim down the general path, and the other tests exercise the fast one)."""
    return chaos.func(n, ms, rerun_ms)


@app.task(name="stoppable_async", queue="work")
async def stoppable_async(n: int, seconds: float) -> str:
    """Record the start, sleep `seconds` on the event loop; record 'interrupted' when cancelled."""
    await asyncio.to_thread(record, n, "started")
    try:
        await asyncio.sleep(seconds)
    except asyncio.CancelledError:
        await asyncio.shield(asyncio.to_thread(record, n, "interrupted"))
        raise
    await asyncio.to_thread(record, n, "finished")
    return "done"


@app.task(name="stoppable_sync", queue="work")
def stoppable_sync(n: int, seconds: float) -> str:
    """Record the start, then work in 20 ms steps for `seconds`, reporting progress, until
    `pgq.cancel_requested()`; record 'interrupted' or 'finished'."""
    record(n, "started")
    deadline = time.monotonic() + seconds
    step = 0
    while time.monotonic() < deadline:
        if pgq.cancel_requested():
            record(n, "interrupted")
            return "stopped"
        step += 1
        pgq.set_progress({"step": step})
        time.sleep(0.02)
    record(n, "finished")
    return "done"


if os.environ.get("PGQ_TEST_PERIODIC") == "1":

    @app.periodic(every=1, name="tick", queue="work")
    def tick() -> None:
        """Record every tick's run."""
        record()


# -- workflows (tests/worker/test_workflow_dag.py, test_follow_ups.py) ------------------------------

FOLLOW_UPS = "follow"
"""The queue of follow-up jobs: no test worker serves it, so they stay queued, to be counted."""


@app.task(name="doomed_root", queue="work")
def doomed_root(n: int, ms: float) -> None:
    """Work `ms` milliseconds, record the side effect (as `chaos`), then fail for good: a parent whose
    dependents are cancelled."""
    time.sleep(ms / 1000)
    record(n, "effect")
    raise pgq.PermanentFailure(f"node {n} fails for good")


def _wait_for_gate(job_id: int, timeout: float = 60.0) -> None:
    """Block until the test opens this job's gate (an `effects` row with note 'open'), or `timeout`."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with _effects_pool().connection() as conn:
            if conn.execute("SELECT 1 FROM effects WHERE job_id = %s AND note = 'open'", (job_id,)).fetchone():
                return
        time.sleep(0.02)
    raise TimeoutError(f"job {job_id}: the test never opened its gate")


@app.task(name="with_follow_ups", queue="work", retry=pgq.Backoff(initial=0.1, max_delay=0.2, min_delay=0.1))
def with_follow_ups(n: int, gate: bool = False, fail_first: bool = False) -> dict[str, Any]:
    """Record 'started'; with `gate`, wait until the test opens it; ask for three follow-up jobs of kind
    `follow_up` in queue FOLLOW_UPS (two plain, one with dedupe key `fu:<n>`); raise on the first attempt
    when `fail_first`; else record the side effect ('effect') and return the lease token (as `chaos`)."""
    job = pgq.current_job()
    record(n, "started")
    if gate:
        _wait_for_gate(job.id)
    pgq.after_success("follow_up", {"parent": job.id, "i": 1}, queue=FOLLOW_UPS)
    pgq.after_success("follow_up", {"parent": job.id, "i": 2}, queue=FOLLOW_UPS, priority=5)
    pgq.after_success("follow_up", {"parent": job.id, "keyed": True}, queue=FOLLOW_UPS, dedupe_key=f"fu:{n}")
    if fail_first and job.attempts == 1:
        raise RuntimeError("the first attempt fails after asking for its follow-ups")
    record(n, "effect")
    return {"n": n, "token": str(job.lease_token)}


@app.task(name="noted", queue="work", on_success="success_note", on_failure="failure_note",
          retry=pgq.Backoff(initial=0.05, max_delay=0.05, min_delay=0.05, jitter=0))
def noted(n: int, fail: bool = False, ms: float = 0.0) -> dict[str, Any]:
    """Work `ms` milliseconds, record the side effect; raise when `fail` (retried after 50 ms), else
    return the lease token. Its on_success / on_failure follow-ups are kinds no task runs (queue
    default, which no test worker serves)."""
    time.sleep(ms / 1000)
    record(n, "effect")
    if fail:
        raise ValueError(f"noted {n} fails")
    return {"n": n, "token": str(pgq.current_job().lease_token)}


# -- groups (tests/worker/test_groups.py) ------------------------------------------------------------

GROUPS = "groups"
"""The queue of the grouped tasks: only the group tests' workers serve it."""

if os.environ.get("PGQ_TEST_GROUPS") == "1":
    # Only for the group tests: a worker stores its tasks' group limits at start, a step (with its
    # own retries) the other tests' workers must not take.

    @app.task(name="grouped", queue=GROUPS, group_by="account", group_concurrency=2)
    def grouped(account: str, n: int, ms: float) -> dict[str, Any]:
        """`chaos` for jobs grouped by `account`, at most 2 running per account."""
        time.sleep(ms / 1000)
        record(n, "effect")
        return {"n": n, "token": str(pgq.current_job().lease_token)}

    @app.task(name="grouped_paced", queue=GROUPS, group_by="account", group_rate_limit="3/0.5s")
    def grouped_paced(account: str, n: int, ms: float) -> dict[str, Any]:
        """`grouped` at most 3 starts per account in any half second."""
        return grouped.func(account, n, ms)


# -- sequences (tests/worker/test_sequences.py) ------------------------------------------------------

SEQUENCES = "sequences"
"""The queue of the sequenced tasks: only the sequence tests' workers serve it."""


@app.task(name="sequenced", queue=SEQUENCES, sequence_by="key",
          retry=pgq.Backoff(initial=0.05, max_delay=0.05, min_delay=0.05, jitter=0))
def sequenced(key: str, n: int, ms: float, fail_first: bool = False) -> dict[str, Any]:
    """Work `ms` milliseconds; raise on the first attempt when `fail_first` (retried after 50 ms: the
    rest of the key waits meanwhile); else record the side effect with the sequence key the claim
    gave the job as its note, and return the lease token (as `chaos`)."""
    job = pgq.current_job()
    time.sleep(ms / 1000)
    if fail_first and job.attempts == 1:
        raise RuntimeError(f"sequenced {n} fails its first attempt")
    record(n, f"seq:{job.sequence_key}")
    return {"n": n, "token": str(job.lease_token)}
