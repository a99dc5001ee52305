"""Sequences (revision 0017) on real PostgreSQL: jobs with one sequence key chain in enqueue order,
a failure holds the rest until a retry or a cancel, 'continue' moves on, explain says who holds a
job, and concurrent producers of the same keys build one chain per key, in id order, without deadlocking."""

from __future__ import annotations

import threading

import psycopg
import pytest

from pgq import InvalidJob, JobSpec, JobStatus, Queue

from .. import history
from .conftest import SQL


def _rows(db: SQL, query: str, params: list[object] | None = None) -> list[tuple[object, ...]]:
    return [tuple(r.values()) for r in db(query, params)]


def _chain(db: SQL, key: str) -> list[tuple[int, int | None]]:
    """(job, the job it waits on through a sequence edge) for every job of `key`, in id order."""
    return [(int(r[0]), None if r[1] is None else int(r[1])) for r in _rows(
        db, "SELECT j.id, (SELECT d.parent_id FROM pgq.job_dependencies d "
        "              WHERE d.job_id = j.id AND d.sequence_hold IS NOT NULL) "
        "FROM pgq.jobs j WHERE j.sequence_key = %s ORDER BY j.id", [key])]


def _statuses(queue: Queue, ids: list[int]) -> list[JobStatus]:
    return [queue.get(i).status for i in ids]


def test_jobs_of_one_key_run_one_at_a_time_in_enqueue_order(pgq_queue: Queue, db: SQL) -> None:
    a = pgq_queue.enqueue("k", sequence_key="acct-1")
    other = pgq_queue.enqueue("k", sequence_key="acct-2")
    b, c = pgq_queue.enqueue_many([JobSpec("k", sequence_key="acct-1"), JobSpec("k", sequence_key="acct-1")])
    assert _statuses(pgq_queue, [a, other, b, c]) == [JobStatus.QUEUED, JobStatus.QUEUED, JobStatus.WAITING,
                                                       JobStatus.WAITING]
    assert _chain(db, "acct-1") == [(a, None), (b, a), (c, b)]
    seen = []
    for _ in range(3):
        claims = pgq_queue.claim(worker="w", limit=10)
        assert len([x for x in claims if x.id in (a, b, c)]) == 1  # never two of one key at once
        for claim in claims:
            seen.append(claim.id)
            # The claim returns the job's key (a handler's pgq.current_job() has it).
            assert claim.job.sequence_key == ("acct-2" if claim.id == other else "acct-1")
            pgq_queue.complete(claim)
    assert [i for i in seen if i != other] == [a, b, c]
    # A key whose jobs all finished starts again at once.
    d = pgq_queue.enqueue("k", sequence_key="acct-1")
    assert pgq_queue.get(d).status is JobStatus.QUEUED


def test_a_failure_holds_the_sequence_until_a_retry_succeeds(pgq_queue: Queue, db: SQL) -> None:
    a = pgq_queue.enqueue("k", sequence_key="s", max_attempts=1)
    b = pgq_queue.enqueue("k", sequence_key="s")
    (claim,) = pgq_queue.claim(worker="w")
    pgq_queue.fail(claim, "boom")
    assert _statuses(pgq_queue, [a, b]) == [JobStatus.FAILED, JobStatus.WAITING]
    db("SELECT pgq.settle(100)")  # the sweep leaves a held edge alone
    c = pgq_queue.enqueue("k", sequence_key="s")  # enqueued behind the hold
    assert _statuses(pgq_queue, [b, c]) == [JobStatus.WAITING, JobStatus.WAITING]
    reasons = pgq_queue.explain(b).reasons
    assert reasons[0].code == "sequence_held"
    assert reasons[0].detail == f"held by job {a} (sequence s, which failed: retry or cancel it)"
    assert reasons[0].facts["held_by"] == a
    assert pgq_queue.claim(worker="w") == []

    pgq_queue.retry(a)
    (claim,) = pgq_queue.claim(worker="w")
    assert claim.id == a
    pgq_queue.complete(claim)
    assert _statuses(pgq_queue, [b, c]) == [JobStatus.QUEUED, JobStatus.WAITING]
    assert pgq_queue.explain(c).reasons[0].detail == f"held by job {b} (sequence s, queued)"


def test_cancelling_the_failed_job_lets_the_sequence_move_on(pgq_queue: Queue) -> None:
    a = pgq_queue.enqueue("k", sequence_key="s", max_attempts=1)
    b = pgq_queue.enqueue("k", sequence_key="s")
    (claim,) = pgq_queue.claim(worker="w")
    pgq_queue.fail(claim, "boom")
    assert pgq_queue.cancel(a).status is JobStatus.CANCELLED
    assert pgq_queue.get(b).status is JobStatus.QUEUED
    # A waiting job cancelled by an operator likewise passes its turn on.
    c = pgq_queue.enqueue("k", sequence_key="s")
    d = pgq_queue.enqueue("k", sequence_key="s")
    pgq_queue.cancel(c)
    (claim,) = pgq_queue.claim(worker="w")
    assert claim.id == b
    pgq_queue.complete(claim)
    assert pgq_queue.get(d).status is JobStatus.QUEUED


def test_continue_moves_the_sequence_on_after_a_failure(pgq_queue: Queue) -> None:
    a = pgq_queue.enqueue("k", sequence_key="s", max_attempts=1, sequence_on_failure="continue")
    b = pgq_queue.enqueue("k", sequence_key="s", max_attempts=1)
    (claim,) = pgq_queue.claim(worker="w")
    pgq_queue.fail(claim, "boom")
    assert _statuses(pgq_queue, [a, b]) == [JobStatus.FAILED, JobStatus.QUEUED]
    # After a failed 'continue' tail, a new job of the key is queued at once; after a held one, not.
    (claim,) = pgq_queue.claim(worker="w")
    pgq_queue.fail(claim, "boom")
    c = pgq_queue.enqueue("k", sequence_key="s")
    assert pgq_queue.get(c).status is JobStatus.WAITING


def test_the_sql_api_and_task_options_take_sequences(pgq_queue: Queue, db: SQL) -> None:
    (a,) = _rows(db, "SELECT pgq.enqueue('k', sequence_key => 'q')")[0]
    (b,) = _rows(db, "SELECT pgq.enqueue('k', sequence_key => 'q', sequence_on_failure => 'continue')")[0]
    assert _chain(db, "q") == [(a, None), (b, a)]
    assert _rows(db, "SELECT hold FROM pgq.sequence_tails WHERE sequence_key = 'q'") == [(False,)]
    with pytest.raises(Exception, match="sequence_on_failure must be"):
        db("SELECT pgq.enqueue('k', sequence_key => 'q', sequence_on_failure => 'skip')")
    with pytest.raises(InvalidJob, match="sequence_key cannot be combined"):
        JobSpec("k", sequence_key="q", dedupe_key="d")
    with pytest.raises(InvalidJob, match="sequence_on_failure"):
        JobSpec("k", sequence_on_failure="skip")


def test_concurrent_producers_build_one_chain_per_key(pgq_queue: Queue, db: SQL) -> None:
    keys = ["a", "b", "c"]
    errors: list[BaseException] = []

    def produce(n: int) -> None:
        try:
            for i in range(20):
                # Batches mixing keys, in varying orders, with two jobs of one key: no deadlock.
                order = keys[n % 3:] + keys[:n % 3]
                pgq_queue.enqueue_many([JobSpec("k", {"n": n, "i": i}, sequence_key=k) for k in order]
                                       + [JobSpec("k", sequence_key=order[0])])
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=produce, args=(n,)) for n in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert errors == []
    for key in keys:
        chain = _chain(db, key)
        assert len(chain) == 6 * 20 + (6 // 3) * 20
        # Each job waits on the job of its key with the next lower id: ids are taken under the key's
        # lock, so the chain follows id order whatever order the producers committed in.
        ids = [j for j, _ in chain]
        assert chain == list(zip(ids, [None, *ids[:-1]], strict=True))
        assert _tail(db, key) == ids[-1]
        edges = _rows(db, "SELECT count(*) FROM pgq.job_dependencies d JOIN pgq.jobs j ON j.id = d.job_id "
                   "WHERE j.sequence_key = %s", [key])
        assert edges == [(len(chain) - 1,)]
    assert _rows(db, "SELECT count(*) FROM pgq.jobs WHERE status = 'queued'") == [(3,)]


def _tail(db: SQL, key: str) -> int:
    return int(str(_rows(db, "SELECT job_id FROM pgq.sequence_tails WHERE sequence_key = %s", [key])[0][0]))


def test_a_purge_keeps_a_failed_job_that_holds_its_sequence(pgq_queue: Queue, db: SQL) -> None:
    a = pgq_queue.enqueue("k", sequence_key="s", max_attempts=1)
    b = pgq_queue.enqueue("k", sequence_key="s", max_attempts=1)
    done = pgq_queue.enqueue("other")  # finished too, but holds nothing
    claims = {c.id: c for c in pgq_queue.claim(worker="w", limit=10)}
    assert sorted(claims) == [a, done]
    pgq_queue.fail(claims[a], "boom")
    pgq_queue.complete(claims[done])
    assert pgq_queue.purge(0) == 1  # the unsequenced job only
    assert pgq_queue.delete_where(kind="k").changed == 0  # nor does the bulk delete take it
    assert _statuses(pgq_queue, [a, b]) == [JobStatus.FAILED, JobStatus.WAITING]
    assert pgq_queue.explain(b).reasons[0].code == "sequence_held"

    # Retried and failing for good again, it holds again: still kept.
    pgq_queue.retry(a)
    (claim,) = pgq_queue.claim(worker="w")
    assert claim.id == a
    pgq_queue.fail(claim, "boom again")
    assert pgq_queue.purge(0) == 0
    # The operator's cancel lets the sequence move on, and the purge take it.
    pgq_queue.cancel(a)
    assert pgq_queue.get(b).status is JobStatus.QUEUED
    assert pgq_queue.purge(0) == 1
    (claim,) = pgq_queue.claim(worker="w")
    assert claim.id == b
    pgq_queue.fail(claim, "boom")  # the key's tail, with no job behind it: nothing to hold
    assert pgq_queue.purge(0) == 1
    # Once it is gone, nothing holds the key (docs/fairness.md): its next job is ready at once, and
    # a plain job's claim carries no key.
    d = pgq_queue.enqueue("k", sequence_key="s")
    plain = pgq_queue.enqueue("other")
    assert pgq_queue.get(d).status is JobStatus.QUEUED
    assert {c.id: c.job.sequence_key for c in pgq_queue.claim(worker="w", limit=10)} == {d: "s", plain: None}


def test_the_history_checker_finds_a_sequence_run_out_of_order(pgq_dsn: str, pgq_queue: Queue, db: SQL) -> None:
    with psycopg.connect(pgq_dsn, autocommit=True) as conn:
        history.install(conn)
    pgq_queue.enqueue_many([JobSpec("k", sequence_key=key) for key in ("s", "s", "t", "t")])
    for _ in range(2):  # in order: each key's first job, then its second
        for claim in pgq_queue.claim(worker="w", limit=10):
            pgq_queue.complete(claim)
    with psycopg.connect(pgq_dsn, autocommit=True) as conn:
        report = history.check(conn, effects=False)
    assert report.violations == {} and report.counts["sequenced jobs"] == 4
    e, f = pgq_queue.enqueue_many([JobSpec("k", sequence_key="s"), JobSpec("k", sequence_key="s")])
    # A claim that ignored the sequence (an UPDATE as the owner, as a broken release would do): f
    # runs while e, ahead of it, has not even started.
    db("UPDATE pgq.jobs SET status = 'running', lease_token = gen_random_uuid(), attempts = 1, "
       "lease_expires_at = now() + interval '1 minute', started_at = clock_timestamp() WHERE id = %s", [f])
    with psycopg.connect(pgq_dsn, autocommit=True) as conn:
        report = history.check(conn, effects=False)
    assert set(report.violations) == {"a sequence's job ran before the job ahead of it finished"}
    assert report.violations["a sequence's job ran before the job ahead of it finished"] == [
        (("default", "s"), e, f, None)]
    # And once e ran after f started: still out of order.
    (claim,) = pgq_queue.claim(worker="w")
    assert claim.id == e
    pgq_queue.complete(claim)
    with psycopg.connect(pgq_dsn, autocommit=True) as conn:
        report = history.check(conn, effects=False)
    [(key, prev, job, claimed, finished)] = report.violations[
        "a sequence's job ran before the job ahead of it finished"]
    assert (key, prev, job) == (("default", "s"), e, f) and claimed < finished


def test_the_purge_prunes_the_tails_of_purged_sequences(pgq_queue: Queue, db: SQL) -> None:
    """pgq.sequence_tails shrinks as jobs are purged (revision 0020), like pgq.key_finishes: a
    purged tail orders nothing, and the key's next job starts the sequence anew."""
    a, b = (pgq_queue.enqueue("k", sequence_key=key) for key in ("s1", "s2"))
    running = pgq_queue.enqueue("k", sequence_key="s3")
    claims = {c.id: c for c in pgq_queue.claim(worker="w", limit=10)}
    assert sorted(claims) == [a, b, running]
    pgq_queue.complete(claims[a])
    pgq_queue.complete(claims[b])
    assert len(_rows(db, "SELECT * FROM pgq.sequence_tails")) == 3
    assert pgq_queue.purge(0) == 2
    assert _rows(db, "SELECT sequence_key, job_id FROM pgq.sequence_tails") == [("s3", running)]
    again = pgq_queue.enqueue("k", sequence_key="s1")
    assert _statuses(pgq_queue, [again]) == [JobStatus.QUEUED] and _chain(db, "s1") == [(again, None)]
    behind = pgq_queue.enqueue("k", sequence_key="s3")  # the live tail still orders its key
    assert _chain(db, "s3") == [(running, None), (behind, running)]
