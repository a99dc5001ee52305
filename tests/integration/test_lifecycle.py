"""claim / complete / fail / heartbeat / snooze / rescue / cancel / retry / get / list / purge."""

from __future__ import annotations

import dataclasses
import datetime as dt
import uuid

import psycopg
import pytest

from pgq import Claim, InvalidJob, InvalidState, LeaseLost, NotFound, Queue
from pgq.models import JobStatus

from .conftest import SQL, expire_lease


def _forged(claim: Claim) -> Claim:
    return Claim(job=claim.job, token=str(uuid.uuid4()), lease=claim.lease)


def test_claim_starts_an_attempt_with_a_fresh_lease(pgq_queue: Queue, db: SQL) -> None:
    ids = pgq_queue.enqueue_many([{"kind": "k"} for _ in range(5)])
    claims = pgq_queue.claim(worker="host-1", limit=3, lease=dt.timedelta(seconds=90))
    assert [c.job.id for c in claims] == ids[:3]
    # One token per claim (revision 0032), shared by its jobs; the next claim draws another.
    assert len({c.token for c in claims}) == 1
    [later] = pgq_queue.claim(worker="host-1", limit=1, lease=dt.timedelta(seconds=90))
    assert later.job.id == ids[3] and later.token != claims[0].token
    for c in claims:
        assert c.job.status is JobStatus.RUNNING and c.job.attempts == 1 and c.job.claimed_by == "host-1"
    rows = db("SELECT lease_expires_at - now() AS left_, started_at IS NOT NULL AS started FROM pgq.jobs "
              "WHERE status = 'running'")
    assert all(dt.timedelta(seconds=80) < r["left_"] <= dt.timedelta(seconds=90) and r["started"] for r in rows)


@pytest.mark.parametrize("queues", [["q1"], ["q1", "q2"], None], ids=["one-queue", "two-queues", "all-queues"])
def test_claimed_jobs_equal_the_rows_read_back(pgq_queue: Queue, queues: list[str] | None) -> None:
    # One queue takes the single-statement claim, several the general one; both read every column
    # as a tuple (Job.from_tuple), and must give the Job that reading the row back gives.
    pgq_queue.enqueue("a", {"n": [1, {"x": None}]}, queue="q1", priority=-2, dedupe_key="key-a", watermark=4,
                      max_attempts=3)
    pgq_queue.enqueue("b", "text", queue="q1", group_key="g", sequence_key="s")
    claims = pgq_queue.claim(worker="host-2", queues=queues, limit=5, lease=30)
    assert [c.job.kind for c in claims] == ["a", "b"]
    assert (claims[1].job.group_key, claims[1].job.sequence_key) == ("g", "s")
    for c in claims:
        # A read never carries the lease token (revision 0020): only the claim has it.
        assert dataclasses.replace(c.job, lease_token=None) == pgq_queue.get(c.job.id)
        assert c.token == c.job.lease_token and c.lease == dt.timedelta(seconds=30)


def test_claim_filters_by_queue_and_kind(pgq_queue: Queue) -> None:
    a = pgq_queue.enqueue("a", queue="q1")
    b = pgq_queue.enqueue("b", queue="q1")
    c = pgq_queue.enqueue("a", queue="q2")
    assert [x.job.id for x in pgq_queue.claim(worker="w", queues=["q1"], kinds=["b"], limit=9)] == [b]
    assert [x.job.id for x in pgq_queue.claim(worker="w", queues=["q2", "q1"], limit=9)] == [a, c]
    assert pgq_queue.claim(worker="w", limit=9) == []


def test_claim_skips_rows_locked_by_other_transactions(pgq_queue: Queue, pgq_dsn: str) -> None:
    first, second = pgq_queue.enqueue_many([{"kind": "k"}, {"kind": "k"}])
    with psycopg.connect(pgq_dsn) as locker:
        locker.execute("SELECT 1 FROM pgq.jobs WHERE id = %s FOR UPDATE", [first])
        assert [c.job.id for c in pgq_queue.claim(worker="w", limit=2)] == [second]
        locker.rollback()
    assert [c.job.id for c in pgq_queue.claim(worker="w", limit=2)] == [first]


@pytest.mark.parametrize("kwargs", [{"lease": 0}, {"lease": -1}, {"limit": 0}, {"worker": ""},
                                    {"queues": "default"}, {"queues": []}])
def test_claim_rejects_bad_arguments(pgq_queue: Queue, kwargs: dict[str, object]) -> None:
    args: dict[str, object] = {"worker": "w"} | kwargs
    with pytest.raises(InvalidJob):
        pgq_queue.claim(**args)  # type: ignore[arg-type]


def test_complete_stores_result_and_is_fenced(pgq_queue: Queue) -> None:
    job_id = pgq_queue.enqueue("k")
    [claim] = pgq_queue.claim(worker="w")
    with pytest.raises(LeaseLost) as lost:
        pgq_queue.complete(_forged(claim), {"n": 1})
    assert lost.value.job_ids == [job_id]
    assert pgq_queue.complete(claim, {"n": 2}) is JobStatus.SUCCEEDED
    job = pgq_queue.get(job_id)
    assert job is not None and job.status is JobStatus.SUCCEEDED and job.result == {"n": 2}
    assert job.finished_at is not None and job.lease_token is None
    with pytest.raises(LeaseLost):
        pgq_queue.complete(claim)  # twice: the second is refused


def test_complete_many_reports_lost_leases_without_raising(pgq_queue: Queue) -> None:
    pgq_queue.enqueue_many([{"kind": "k"} for _ in range(3)])
    a, b, c = pgq_queue.claim(worker="w", limit=3)
    done = pgq_queue.complete_many([(a, 1), (_forged(b), 2), (c, None)])
    assert done == {a.id: JobStatus.SUCCEEDED, c.id: JobStatus.SUCCEEDED}
    job_b = pgq_queue.get(b.id)
    assert job_b is not None and job_b.status is JobStatus.RUNNING


def test_fail_retries_with_backoff_then_fails_terminally_and_frees_key(pgq_queue: Queue, db: SQL) -> None:
    job_id = pgq_queue.enqueue("k", dedupe_key="key", max_attempts=2)
    [claim] = pgq_queue.claim(worker="w")
    job = pgq_queue.fail(claim, "boom 1")
    assert job.status is JobStatus.QUEUED and job.last_error == "boom 1" and job.attempts == 1
    [row] = db("SELECT run_at - now() AS wait FROM pgq.jobs WHERE id = %s", [job_id])
    assert dt.timedelta(seconds=1) <= row["wait"] + dt.timedelta(milliseconds=50) and row["wait"] < dt.timedelta(
        seconds=3)
    assert pgq_queue.claim(worker="w") == []  # not due yet
    db("UPDATE pgq.jobs SET run_at = now() WHERE id = %s", [job_id])
    [claim] = pgq_queue.claim(worker="w")
    assert claim.job.attempts == 2
    with pytest.raises(LeaseLost):
        pgq_queue.fail(_forged(claim), "nope")
    job = pgq_queue.fail(claim, "boom 2")
    assert job.status is JobStatus.FAILED and job.last_error == "boom 2" and job.finished_at is not None
    assert pgq_queue.enqueue("k", dedupe_key="key") != job_id  # key freed


def test_fail_with_explicit_retry_in_and_final(pgq_queue: Queue, db: SQL) -> None:
    a, _ = pgq_queue.enqueue_many([{"kind": "k"}, {"kind": "k"}])
    ca, cb = pgq_queue.claim(worker="w", limit=2)
    pgq_queue.fail(ca, "later", retry_in=dt.timedelta(minutes=10))
    [row] = db("SELECT run_at - now() > interval '9 minutes' AS later FROM pgq.jobs WHERE id = %s", [a])
    assert row["later"]
    assert pgq_queue.fail(cb, "fatal", final=True).status is JobStatus.FAILED
    with pytest.raises(InvalidJob):
        pgq_queue.fail(cb, "x", retry_in=-1)


def test_default_backoff_grows_exponentially_and_never_under_one_second(pgq_queue: Queue, db: SQL) -> None:
    job_id = pgq_queue.enqueue("k", max_attempts=10)
    waits = []
    for _ in range(6):
        db("UPDATE pgq.jobs SET run_at = now() WHERE id = %s", [job_id])
        [claim] = pgq_queue.claim(worker="w")
        pgq_queue.fail(claim, "e")
        [row] = db("SELECT extract(epoch FROM run_at - now())::float AS s FROM pgq.jobs WHERE id = %s", [job_id])
        waits.append(row["s"])
    assert all(w >= 0.95 for w in waits)
    for attempt, wait in enumerate(waits, start=1):  # 2^n seconds times jitter in [0.75, 1.25)
        assert 0.75 * 2**attempt - 0.1 <= wait <= 1.25 * 2**attempt + 0.1 or (attempt == 1 and wait < 2.6)


def test_heartbeat_extends_leases_in_one_call_and_reports_lost(pgq_queue: Queue, db: SQL) -> None:
    pgq_queue.enqueue_many([{"kind": "k"} for _ in range(3)])
    claims = pgq_queue.claim(worker="w", limit=3, lease=5)
    pgq_queue.heartbeat(claims, lease=dt.timedelta(minutes=10))
    rows = db("SELECT lease_expires_at - now() > interval '9 minutes' AS long FROM pgq.jobs")
    assert all(r["long"] for r in rows)
    forged = _forged(claims[1])
    with pytest.raises(LeaseLost) as lost:
        pgq_queue.heartbeat([claims[0], forged], lease=1000)
    assert lost.value.job_ids == [claims[1].id]
    [row] = db("SELECT lease_expires_at - now() > interval '15 minutes' AS renewed FROM pgq.jobs WHERE id = %s",
               [claims[0].id])
    assert row["renewed"]  # the valid one was renewed despite the lost one
    pgq_queue.heartbeat(claims)  # default: each claim's own lease
    with pytest.raises(InvalidJob):
        pgq_queue.heartbeat(claims, lease=0)


def test_snooze_requeues_without_spending_an_attempt(pgq_queue: Queue, db: SQL) -> None:
    job_id = pgq_queue.enqueue("poll", max_attempts=1)
    for _ in range(3):
        db("UPDATE pgq.jobs SET run_at = now() WHERE id = %s", [job_id])
        [claim] = pgq_queue.claim(worker="w")
        job = pgq_queue.snooze(claim, dt.timedelta(seconds=30))
        assert job.status is JobStatus.QUEUED and job.attempts == 0
    [row] = db("SELECT run_at - now() > interval '25 seconds' AS later FROM pgq.jobs WHERE id = %s", [job_id])
    assert row["later"]
    with pytest.raises(LeaseLost):
        pgq_queue.snooze(claim, 1)
    with pytest.raises(InvalidJob):
        pgq_queue.snooze(claim, -1)


def test_release_hands_jobs_back_at_once(pgq_queue: Queue) -> None:
    pgq_queue.enqueue_many([{"kind": "k"}, {"kind": "k"}])
    claims = pgq_queue.claim(worker="w", limit=2)
    assert sorted(pgq_queue.release(claims)) == sorted(c.id for c in claims)
    again = pgq_queue.claim(worker="w2", limit=2)
    assert sorted(c.id for c in again) == sorted(c.id for c in claims)
    assert all(c.job.attempts == 1 for c in again)


def test_rescue_requeues_expired_and_fails_exhausted_and_fences_old_worker(pgq_queue: Queue, db: SQL) -> None:
    retry_id = pgq_queue.enqueue("k", max_attempts=3)
    last_id = pgq_queue.enqueue("k", max_attempts=1, dedupe_key="only-once")
    healthy_id = pgq_queue.enqueue("k")
    claims = {c.id: c for c in pgq_queue.claim(worker="dead-host", limit=3)}
    expire_lease(db, retry_id)
    expire_lease(db, last_id)
    assert sorted(pgq_queue.rescue_expired()) == sorted([retry_id, last_id])
    retried, exhausted, healthy = (pgq_queue.get(i) for i in (retry_id, last_id, healthy_id))
    assert retried is not None and retried.status is JobStatus.QUEUED and retried.attempts == 1
    assert retried.last_error is not None and "lease expired" in retried.last_error
    assert "dead-host" in retried.last_error
    assert exhausted is not None and exhausted.status is JobStatus.FAILED and exhausted.finished_at is not None
    assert healthy is not None and healthy.status is JobStatus.RUNNING
    assert pgq_queue.enqueue("k", dedupe_key="only-once") != last_id  # key freed
    for stale in (claims[retry_id], claims[last_id]):
        with pytest.raises(LeaseLost):
            pgq_queue.complete(stale)
        with pytest.raises(LeaseLost):
            pgq_queue.heartbeat([stale])
    [fresh] = pgq_queue.claim(worker="new-host", queues=["default"], kinds=["k"])
    assert fresh.id == retry_id and fresh.job.attempts == 2
    assert pgq_queue.rescue_expired() == []


def test_rescue_is_not_blocked_by_a_locked_row(pgq_queue: Queue, db: SQL, pgq_dsn: str) -> None:
    ids = pgq_queue.enqueue_many([{"kind": "k"} for _ in range(4)])
    pgq_queue.claim(worker="w", limit=4)
    for i in ids:
        expire_lease(db, i)
    with psycopg.connect(pgq_dsn) as locker:
        locker.execute("SELECT 1 FROM pgq.jobs WHERE id = %s FOR UPDATE", [ids[0]])
        assert sorted(pgq_queue.rescue_expired()) == sorted(ids[1:])
        locker.rollback()
    assert pgq_queue.rescue_expired() == [ids[0]]


def test_rescue_handles_more_than_one_batch(pgq_queue: Queue, db: SQL, monkeypatch: pytest.MonkeyPatch) -> None:
    from pgq import _ops

    monkeypatch.setattr(_ops.jobs, "RESCUE_BATCH", 7)
    pgq_queue.enqueue_many([{"kind": "k"} for _ in range(20)])
    pgq_queue.claim(worker="w", limit=20)
    db("UPDATE pgq.jobs SET lease_expires_at = now() - interval '1 second'")
    assert len(pgq_queue.rescue_expired()) == 20


def test_cancel_queued_and_running_then_not_finished(pgq_queue: Queue) -> None:
    running = pgq_queue.enqueue("k", dedupe_key="c")
    queued = pgq_queue.enqueue("k")
    [claim] = pgq_queue.claim(worker="w", limit=1)
    assert claim.id == running
    assert pgq_queue.cancel(queued).status is JobStatus.CANCELLED
    cancelled = pgq_queue.cancel(running)
    assert cancelled.status is JobStatus.CANCELLED and cancelled.lease_token is None
    with pytest.raises(LeaseLost):
        pgq_queue.complete(claim)  # the worker of a cancelled job is fenced out
    with pytest.raises(InvalidState, match="cancelled"):
        pgq_queue.cancel(running)
    with pytest.raises(NotFound):
        pgq_queue.cancel(10**12)
    assert pgq_queue.enqueue("k", dedupe_key="c") != running  # key freed


def test_retry_failed_or_cancelled_job(pgq_queue: Queue) -> None:
    job_id = pgq_queue.enqueue("k", max_attempts=1, dedupe_key="r")
    [claim] = pgq_queue.claim(worker="w")
    pgq_queue.fail(claim, "bad")
    job = pgq_queue.retry(job_id)
    assert job.status is JobStatus.QUEUED and job.attempts == 0 and job.finished_at is None
    with pytest.raises(InvalidState, match="queued"):
        pgq_queue.retry(job_id)
    pgq_queue.cancel(job_id)
    other = pgq_queue.enqueue("k", dedupe_key="r")
    with pytest.raises(InvalidState, match="dedupe key"):
        pgq_queue.retry(job_id)
    pgq_queue.cancel(other)
    assert pgq_queue.retry(job_id).status is JobStatus.QUEUED
    with pytest.raises(NotFound):
        pgq_queue.retry(10**12)


def test_get_and_list_filters(pgq_queue: Queue) -> None:
    assert pgq_queue.get(10**12) is None
    a = pgq_queue.enqueue("a", queue="q1")
    b = pgq_queue.enqueue("b", queue="q1")
    c = pgq_queue.enqueue("a", queue="q2")
    [claim] = pgq_queue.claim(worker="w", queues=["q2"])
    assert [j.id for j in pgq_queue.list()] == [c, b, a]
    assert [j.id for j in pgq_queue.list(status="running")] == [c]
    assert [j.id for j in pgq_queue.list(status=JobStatus.QUEUED, queue="q1", kind="a")] == [a]
    assert [j.id for j in pgq_queue.list(limit=1)] == [c]
    assert [j.id for j in pgq_queue.list(before_id=c)] == [b, a]
    with pytest.raises(InvalidJob, match=r"unknown status 'done'.*queued"):
        pgq_queue.list(status="done")
    with pytest.raises(InvalidJob):
        pgq_queue.list(limit=0)
    assert claim.id == c


def test_purge_deletes_old_finished_jobs_in_batches(pgq_queue: Queue, db: SQL,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    from pgq import _ops

    monkeypatch.setattr(_ops.admin, "PURGE_BATCH", 10)
    ids = pgq_queue.enqueue_many([{"kind": "k"} for _ in range(40)])
    claims = pgq_queue.claim(worker="w", limit=30)
    pgq_queue.complete_many([(c, None) for c in claims[:25]])
    pgq_queue.fail(claims[25], "x", final=True)
    pgq_queue.cancel(ids[35])
    db("UPDATE pgq.jobs SET finished_at = now() - interval '8 days' WHERE finished_at IS NOT NULL AND id <> %s",
       [claims[0].id])
    # 24 old succeeded + 1 old failed + 1 old cancelled; the fresh success, running and queued stay
    deleted = pgq_queue.purge(dt.timedelta(days=7))
    assert deleted == 26
    left = db("SELECT status::text, count(*) AS n FROM pgq.jobs GROUP BY 1 ORDER BY 1")
    assert left == [{"status": "queued", "n": 9}, {"status": "running", "n": 4},
                    {"status": "succeeded", "n": 1}]
    assert pgq_queue.purge(dt.timedelta(days=7)) == 0
    with pytest.raises(InvalidJob):
        pgq_queue.purge(-1)
    with pytest.raises(InvalidJob):
        pgq_queue.purge(dt.timedelta(seconds=-1))
    assert db("SELECT count(*) AS n FROM pgq.jobs") == [{"n": 14}]  # nothing deleted by the refusals
    # timedelta(0) (or 0): every finished job, however recent.
    assert pgq_queue.purge(dt.timedelta(0)) == 1
    assert pgq_queue.purge(0) == 0
    left = db("SELECT status::text, count(*) AS n FROM pgq.jobs GROUP BY 1 ORDER BY 1")
    assert left == [{"status": "queued", "n": 9}, {"status": "running", "n": 4}]


def test_operations_on_an_unmigrated_database_say_so(pgq_empty_dsn: str) -> None:
    from pgq import NotMigrated

    with Queue(pgq_empty_dsn) as queue, pytest.raises(NotMigrated, match="pgq migrate"):
        queue.enqueue("k")
