"""Reading a job's dependencies (`Queue.dependencies`, sql/job_dependencies.sql) on real PostgreSQL:
parents and children with their status and recorded outcome as the release trigger of revision 0007
moves them, the counts and the limit, a deleted parent, unknown ids, and the statement's plan."""

from __future__ import annotations

import asyncio

import pytest

from pgq import AsyncQueue, Dependencies, Dependency, InvalidJob, JobStatus, NotFound, Queue

from ..conftest import enqueue_after
from .conftest import SQL


def test_a_plain_job_has_no_dependencies(pgq_queue: Queue) -> None:
    job_id = pgq_queue.enqueue("plain")
    assert pgq_queue.dependencies(job_id) == Dependencies(job_id, JobStatus.QUEUED, None, (), (), 0, 0)


def test_parents_and_children_follow_the_parents_outcomes(pgq_queue: Queue, db: SQL) -> None:
    fetch_a = pgq_queue.enqueue("fetch")
    fetch_b = pgq_queue.enqueue("fetch")
    merge = enqueue_after(db, "merge", [fetch_b, fetch_a])
    report = enqueue_after(db, "report", [merge], run=True)

    deps = pgq_queue.dependencies(merge)
    assert (deps.job_id, deps.status, deps.pending_parents) == (merge, JobStatus.WAITING, 2)
    assert deps.parents == (Dependency(fetch_a, "fetch", JobStatus.QUEUED, True, None),
                            Dependency(fetch_b, "fetch", JobStatus.QUEUED, True, None))
    assert deps.children == (Dependency(report, "report", JobStatus.WAITING, False, None),)
    assert (deps.parent_count, deps.child_count) == (2, 1)
    assert [p.id for p in deps.unfinished_parents] == [fetch_a, fetch_b]

    [claim] = pgq_queue.claim(worker="w", kinds=["fetch"])
    assert claim.id == fetch_a
    pgq_queue.complete(claim)
    deps = pgq_queue.dependencies(merge)
    assert deps.status is JobStatus.WAITING and deps.pending_parents == 1
    assert [(p.id, p.status, p.parent_outcome) for p in deps.parents] == [
        (fetch_a, JobStatus.SUCCEEDED, JobStatus.SUCCEEDED), (fetch_b, JobStatus.QUEUED, None)]
    assert [p.id for p in deps.unfinished_parents] == [fetch_b]

    pgq_queue.cancel(fetch_b)  # merge needs it: cancelled with it; report runs whatever happens
    deps = pgq_queue.dependencies(merge)
    assert deps.status is JobStatus.CANCELLED and deps.unfinished_parents == ()
    assert deps.parents[1].parent_outcome is JobStatus.CANCELLED
    assert deps.children == (Dependency(report, "report", JobStatus.QUEUED, False, JobStatus.CANCELLED),)
    assert pgq_queue.dependencies(report).pending_parents == 0
    assert pgq_queue.dependencies(fetch_a).children == (
        Dependency(merge, "merge", JobStatus.CANCELLED, True, JobStatus.SUCCEEDED),)


def test_a_deleted_parent_keeps_its_outcome_but_loses_kind_and_status(pgq_queue: Queue, db: SQL) -> None:
    parent = pgq_queue.enqueue("fetch")
    child = enqueue_after(db, "merge", [parent])
    [claim] = pgq_queue.claim(worker="w")
    pgq_queue.complete(claim)
    assert pgq_queue.purge(0) == 1

    assert pgq_queue.dependencies(child).parents == (Dependency(parent, None, None, True, JobStatus.SUCCEEDED),)
    with pytest.raises(NotFound):
        pgq_queue.dependencies(parent)


def test_a_child_deleted_by_hand_is_listed_without_kind_or_status(pgq_queue: Queue, db: SQL) -> None:
    parent = pgq_queue.enqueue("fetch")
    child = enqueue_after(db, "merge", [parent])
    db("DELETE FROM pgq.jobs WHERE id = %s", [child])  # no foreign key: its dependency row stays
    deps = pgq_queue.dependencies(parent)
    assert deps.children == (Dependency(child, None, None, True, None),) and deps.child_count == 1


def test_the_limit_cuts_each_side_and_the_counts_count_all(pgq_queue: Queue, db: SQL) -> None:
    parents = pgq_queue.enqueue_many([{"kind": "part"}] * 5)
    callback = enqueue_after(db, "callback", parents, run=True)
    children = [enqueue_after(db, "child", [callback]) for _ in range(4)]

    deps = pgq_queue.dependencies(callback, limit=2)
    assert [p.id for p in deps.parents] == parents[:2] and [c.id for c in deps.children] == children[:2]
    assert (deps.parent_count, deps.child_count, deps.pending_parents) == (5, 4, 5)
    full = pgq_queue.dependencies(callback)
    assert [p.id for p in full.parents] == parents and [c.id for c in full.children] == children


@pytest.mark.parametrize("bad", [0, -1, 100_001, True, "5"])
def test_a_bad_limit_is_invalid(pgq_queue: Queue, bad: object) -> None:
    with pytest.raises(InvalidJob, match="limit must be an int in"):
        pgq_queue.dependencies(1, limit=bad)  # type: ignore[arg-type]


def test_an_unknown_or_malformed_id(pgq_queue: Queue) -> None:
    with pytest.raises(NotFound):
        pgq_queue.dependencies(424242)
    with pytest.raises(InvalidJob, match="job id must be an int"):
        pgq_queue.dependencies("1")  # type: ignore[arg-type]


def test_the_async_client_reads_the_same(pgq_dsn: str, pgq_queue: Queue, db: SQL) -> None:
    parent = pgq_queue.enqueue("fetch")
    child = enqueue_after(db, "merge", [parent])

    async def read() -> tuple[Dependencies, Dependencies]:
        async with AsyncQueue(pgq_dsn) as queue:
            return await queue.dependencies(parent), await queue.dependencies(child)

    of_parent, of_child = asyncio.run(read())
    assert of_parent == pgq_queue.dependencies(parent) and of_child == pgq_queue.dependencies(child)
    assert of_parent.children[0].id == child and of_child.parents[0].id == parent


def test_children_are_read_through_the_parent_index_not_the_table(pgq_queue: Queue, db: SQL) -> None:
    from pgq import _sql

    parent = pgq_queue.enqueue("fetch")
    for _ in range(3):
        enqueue_after(db, "child", [parent])
    db("SET enable_seqscan = off")  # the plan the statement would take on a big table
    query = _sql.query("job_dependencies").replace("%(id)s", str(parent)).replace("%(limit)s", "10")
    plan = "\n".join(r["QUERY PLAN"] for r in db("EXPLAIN " + query))
    assert "job_dependencies_parent_idx" in plan and "job_dependencies_pkey" in plan
    assert "Seq Scan" not in plan


def test_waiting_jobs_are_counted_through_their_partial_index(pgq_queue: Queue, db: SQL) -> None:
    db("""
        INSERT INTO pgq.jobs (queue, kind, status, started_at, finished_at, attempts)
        SELECT 'q' || (g % 3), 'k', 'succeeded', now() - interval '2 s', now() - interval '1 s', 1
        FROM generate_series(1, 50000) g
    """)
    parent = pgq_queue.enqueue("fetch", queue="q0")
    for queue in ("q0", "q1", "q1"):
        enqueue_after(db, "merge", [parent], queue=queue)
    db("ANALYZE pgq.jobs")
    count = "SELECT j.queue, count(*) AS n FROM pgq.jobs j WHERE j.status = 'waiting' GROUP BY j.queue ORDER BY 1"

    plan = "\n".join(r["QUERY PLAN"] for r in db("EXPLAIN " + count))
    # Since revision 0033 the finished jobs are in partitions of their own that the count never reads.
    assert "live_jobs" in plan and "finished_jobs" not in plan, plan
    assert db(count) == [{"queue": "q0", "n": 1}, {"queue": "q1", "n": 2}]


def _cancelled_by_one_parent(queue: Queue, db: SQL) -> tuple[int, int, int]:
    """Parents P and R and child C of both; P fails for good, which cancels C while R is queued.
    Returns (P, R, C)."""
    p = queue.enqueue("fetch", max_attempts=1)
    r = queue.enqueue("other")
    c = enqueue_after(db, "merge", [p, r])
    [claim] = queue.claim(worker="w", kinds=["fetch"])
    queue.fail(claim, "boom")
    assert queue.get(c).status is JobStatus.CANCELLED  # type: ignore[union-attr]
    return p, r, c


def test_a_retried_child_waits_for_a_parent_still_queued_and_runs_only_after_it(pgq_queue: Queue, db: SQL) -> None:
    p, r, c = _cancelled_by_one_parent(pgq_queue, db)

    job = pgq_queue.retry(c)

    assert job.status is JobStatus.WAITING and job.attempts == 0
    deps = pgq_queue.dependencies(c)
    assert deps.pending_parents == 1 and [x.id for x in deps.unfinished_parents] == [r]
    assert [(x.id, x.parent_outcome) for x in deps.parents] == [(p, JobStatus.FAILED), (r, None)]
    assert pgq_queue.claim(worker="w", kinds=["merge"]) == []  # not before R finished
    [claim] = pgq_queue.claim(worker="w", kinds=["other"])
    pgq_queue.complete(claim)
    assert pgq_queue.dependencies(c).pending_parents == 0
    [child] = pgq_queue.claim(worker="w", kinds=["merge"])
    assert child.id == c


def test_a_retried_child_whose_parents_all_finished_is_queued_at_once(pgq_queue: Queue, db: SQL) -> None:
    p, r, c = _cancelled_by_one_parent(pgq_queue, db)
    [claim] = pgq_queue.claim(worker="w", kinds=["other"])
    pgq_queue.complete(claim)  # C is cancelled: R's outcome is only recorded
    assert pgq_queue.dependencies(c).pending_parents == 1  # the count it had when cancelled

    job = pgq_queue.retry(c)

    assert job.status is JobStatus.QUEUED
    deps = pgq_queue.dependencies(c)
    assert deps.pending_parents == 0
    assert [(x.id, x.parent_outcome) for x in deps.parents] == [(p, JobStatus.FAILED), (r, JobStatus.SUCCEEDED)]
    [child] = pgq_queue.claim(worker="w", kinds=["merge"])
    assert child.id == c


def test_a_child_retried_after_its_parent_waits_for_that_parents_new_outcome(pgq_queue: Queue, db: SQL) -> None:
    p, r, c = _cancelled_by_one_parent(pgq_queue, db)
    assert pgq_queue.retry(p).status is JobStatus.QUEUED

    job = pgq_queue.retry(c)

    assert job.status is JobStatus.WAITING
    deps = pgq_queue.dependencies(c)
    assert deps.pending_parents == 2  # P's edge is open again: its next outcome applies
    assert [(x.id, x.parent_outcome) for x in deps.parents] == [(p, None), (r, None)]
    [claim] = pgq_queue.claim(worker="w", kinds=["fetch"])
    pgq_queue.fail(claim, "again")
    assert pgq_queue.get(c).status is JobStatus.CANCELLED  # type: ignore[union-attr]
    assert pgq_queue.dependencies(c).parents[0].parent_outcome is JobStatus.FAILED


def test_retrying_a_plain_job_leaves_its_pending_parents_null(pgq_queue: Queue, db: SQL) -> None:
    job_id = pgq_queue.enqueue("plain")
    pgq_queue.cancel(job_id)
    assert pgq_queue.retry(job_id).status is JobStatus.QUEUED
    assert db("SELECT pending_parents FROM pgq.jobs WHERE id = %s", [job_id]) == [{"pending_parents": None}]


def test_async_retry_of_a_cancelled_child_waits_too(pgq_dsn: str, pgq_queue: Queue, db: SQL) -> None:
    _, _, c = _cancelled_by_one_parent(pgq_queue, db)

    async def retry() -> JobStatus:
        async with AsyncQueue(pgq_dsn) as queue:
            return (await queue.retry(c)).status

    assert asyncio.run(retry()) is JobStatus.WAITING
