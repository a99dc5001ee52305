"""Claims behind scheduled backlogs (issue #42, revision 0023): jobs whose run_at is in the future,
however many and however near, cost a claim a few index probes, not a walk over them. Measured as
the pages of the claim's indexes that the claim's transaction read, against the same claim from a
twin queue with nothing scheduled (never as a time)."""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable
from typing import Any

import psycopg
import pytest

from pgq import JobSpec, Queue, _ops

from .conftest import SQL

BACKLOG = 20_000
SLACK = 40  # pages a claim may read beyond its twin's: a probe per priority with jobs, never the backlog


def _claim_counting(dsn: str, queue: str, kinds: list[str] | None = None,
                    limit: int = 16) -> tuple[list[Any], int]:
    """Claim from `queue` in one transaction, then read how many pages of the claim's indexes
    (jobs_claim_idx, jobs_claim_limited_idx, jobs_claim_group_idx) it read, each read counted: a walk
    over scheduled rows reads their pages even where the index's own condition filters them out.
    (Other indexes are left out: the claim's writes read theirs.)"""
    with psycopg.connect(dsn) as conn:
        claims = _ops.run_sync(conn, _ops.claim(worker="t", queues=[queue], kinds=kinds, limit=limit, lease=60),
                               own_transaction=True)
        row = conn.execute("SELECT sum(pg_stat_get_xact_blocks_fetched(i.indexrelid)) FROM pg_index i "
                           "WHERE i.indrelid = 'pgq.live_jobs'::regclass "  # revision 0033
                           "  AND i.indexrelid::regclass::text LIKE 'pgq.live\\_jobs\\_claim%'").fetchone()
        conn.commit()
    assert row is not None
    return claims, int(row[0])


def _scheduled(kind: str, n: int, *, near: bool = False, **spec: Any) -> list[JobSpec]:
    """n jobs of kind in queue q due a day from now (or, near, in 1 to 2 minutes), over priorities 0-2."""
    base = dt.timedelta(minutes=1) if near else dt.timedelta(days=1)
    return [JobSpec(kind, queue="q", delay=base + dt.timedelta(milliseconds=i), priority=i % 3, **spec)
            for i in range(n)]


def _twins(pgq_queue: Queue, pgq_dsn: str, db: SQL, due: Callable[[str], list[JobSpec]],
           backlog: list[JobSpec]) -> tuple[list[int], list[Any], int, int]:
    """The same due jobs in queue q, behind `backlog`, and in queue e, behind nothing; claims 16 from
    each. Returns q's due ids, q's claims, and the pages each claim read."""
    pgq_queue.enqueue_many(backlog)
    ids = pgq_queue.enqueue_many(due("q"))
    pgq_queue.enqueue_many(due("e"))
    db("VACUUM ANALYZE pgq.jobs")
    claims, read = _claim_counting(pgq_dsn, "q")
    twin_claims, twin_read = _claim_counting(pgq_dsn, "e")
    assert len(twin_claims) == len(claims)  # the same work taken from both
    return ids, claims, read, twin_read


@pytest.mark.parametrize("near", [False, True])
def test_a_claim_reads_no_scheduled_row(pgq_queue: Queue, pgq_dsn: str, db: SQL, near: bool) -> None:
    """20,000 scheduled jobs at better and equal priorities than the two due ones: the claim of 16
    takes the due ones in priority order reading what it reads from an empty queue, near or far run_at
    (before revision 0023 it walked the backlog: 3x the pages at 20,000, 100x the time at 1,000,000)."""
    ids, claims, read, twin_read = _twins(
        pgq_queue, pgq_dsn, db,
        lambda q: [JobSpec("now", queue=q, priority=2), JobSpec("now", queue=q, priority=1)],
        _scheduled("later", BACKLOG, near=near))
    assert [c.id for c in claims] == [ids[1], ids[0]]
    assert read < twin_read + SLACK, (read, twin_read)


def test_limited_and_grouped_kinds_behind_scheduled_jobs(pgq_queue: Queue, pgq_dsn: str, db: SQL) -> None:
    """A concurrency-limited kind and a grouped kind whose group's jobs are all scheduled cost the claim
    of a due plain job, a due grouped job and a due limited job no more than the same claim elsewhere
    (before revision 0023 it read 35 times the twin's pages of jobs_claim_limited_idx)."""
    pgq_queue.set_concurrency_limit("limited", 100)
    pgq_queue.set_group_limits("grouped", concurrency=2)
    ids, claims, read, twin_read = _twins(
        pgq_queue, pgq_dsn, db,
        lambda q: [JobSpec("plain", queue=q, priority=1), JobSpec("grouped", queue=q, priority=2, group_key="g3"),
                   JobSpec("limited", queue=q, priority=2)],
        _scheduled("limited", BACKLOG)
        + [JobSpec("grouped", queue="q", delay=dt.timedelta(days=1), priority=i % 3, group_key="g3")
           for i in range(BACKLOG)])
    assert sorted(c.id for c in claims) == sorted(ids)
    assert read < twin_read + SLACK, (read, twin_read)


def test_a_sequence_behind_scheduled_jobs(pgq_queue: Queue, pgq_dsn: str, db: SQL) -> None:
    """A sequence whose jobs are due, behind a scheduled backlog and a scheduled sequence: its head
    is claimed at an empty queue's cost, and its next job not while the head runs."""
    ids, claims, read, twin_read = _twins(
        pgq_queue, pgq_dsn, db,
        lambda q: [JobSpec("s", queue=q, sequence_key="k"), JobSpec("s", queue=q, sequence_key="k")],
        _scheduled("later", BACKLOG)
        + [JobSpec("s", queue="q", sequence_key="late", delay=dt.timedelta(days=1)) for _ in range(3)])
    assert [c.id for c in claims] == [ids[0]]
    assert read < twin_read + SLACK, (read, twin_read)
    assert _claim_counting(pgq_dsn, "q")[0] == []


def test_a_scheduled_job_is_claimed_once_due(pgq_queue: Queue, pgq_dsn: str, db: SQL) -> None:
    """Scheduled jobs stay claimable: made due (run_at moved to now), they are taken in claim order,
    the rest stay queued."""
    ids = pgq_queue.enqueue_many(_scheduled("later", 10))
    db("UPDATE pgq.jobs SET run_at = now() - interval '1 second' WHERE id = ANY(%s)", [ids[:4]])
    claims, _ = _claim_counting(pgq_dsn, "q")
    assert sorted(c.id for c in claims) == sorted(ids[:4])
    assert [c.job.priority for c in claims] == sorted(c.job.priority for c in claims)
    assert db("SELECT count(*) AS n FROM pgq.jobs WHERE status = 'queued'") == [{"n": 6}]


def test_explain_behind_a_scheduled_backlog(pgq_queue: Queue) -> None:
    """pgq.explain: a scheduled job says scheduled (near or far), a due job behind scheduled ones at
    better priorities is not held by them (only by the missing worker)."""
    far = pgq_queue.enqueue_many(_scheduled("later", 50))
    near = pgq_queue.enqueue_many(_scheduled("later", 5, near=True))
    [due] = pgq_queue.enqueue_many([JobSpec("now", queue="q", priority=2)])
    # No worker runs in this test: each answer also says so.
    assert pgq_queue.explain(far[0]).codes == ("scheduled", "no_live_worker")
    assert pgq_queue.explain(near[0]).codes == ("scheduled", "no_live_worker")
    assert pgq_queue.explain(due).codes == ("no_live_worker",)
