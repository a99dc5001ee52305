"""Acknowledgements racing heartbeats (and admin cancels) of the same jobs, with real concurrency.

Since revision 0033 a job that finishes moves from pgq.live_jobs to pgq.finished_jobs (a delete and
an insert in one statement). A heartbeat or a cancel of a row that an acknowledgement moved must
find it gone (a lost lease, a finished job), never fail with "tuple ... was already moved to
another partition", and every job must end up exactly once where it belongs.
"""

from __future__ import annotations

import contextlib
import random
import threading
import time
from typing import Any

import psycopg
import pytest
from psycopg.rows import dict_row

from pgq import Claim, JobSpec, JobStatus, Queue
from pgq.errors import InvalidState, LeaseLost

from .conftest import SQL
from .test_races import _run_threads

N = 360  # jobs: a third completed, a third failed for good, a third failed with attempts left


def _claim_all(q: Queue, n: int) -> list[Claim]:
    claims: list[Claim] = []
    while len(claims) < n:
        got = q.claim(worker="racer", kinds=["race"], limit=100, lease=300)
        assert got, f"claimed {len(claims)} of {n}"
        claims.extend(got)
    return claims


def _enqueue(q: Queue, db: SQL) -> tuple[list[Claim], dict[int, int]]:
    """N jobs of kind race (max_attempts 1 for the middle third: failing them finishes them), each
    with a child of kind child that needs it to succeed; all claimed. Returns the claims and
    {parent id: child id}."""
    ids = q.enqueue_many([JobSpec("race", {"i": i}, max_attempts=1 if i % 3 == 1 else 5) for i in range(N)])
    children = {}
    for parent in ids:
        rows = db("SELECT pgq.enqueue('child', depends_on => %s::bigint[]) AS id", [[parent]])
        children[parent] = int(rows[0]["id"])
    claims = _claim_all(q, N)
    assert sorted(c.id for c in claims) == sorted(ids)
    return claims, children


def _race(pgq_dsn: str, claims: list[Claim], cancel: bool) -> tuple[dict[int, Any], dict[int, Any], set[int], int]:
    """Two ackers (complete / fail, batches of 1 to 12 in random order), three heartbeaters of
    random claims and, when `cancel`, one admin cancelling random jobs; all at
    once. Returns (completed {id: status}, failed {id: job}, cancelled ids, heartbeats sent)."""
    by_third: dict[int, list[Claim]] = {0: [], 1: [], 2: []}
    for i, c in enumerate(sorted(claims, key=lambda c: c.id)):  # enqueue order: i % 3 as in _enqueue
        by_third[i % 3].append(c)
    completed: dict[int, Any] = {}
    failed: dict[int, Any] = {}
    cancelled: set[int] = set()
    beats = [0]
    lock = threading.Lock()
    done = threading.Event()
    ackers_left = [2]
    start = threading.Barrier(6 if cancel else 5)

    def acker(which: int) -> None:
        mine = list(by_third[0]) if which == 0 else list(by_third[1] + by_third[2])
        random.shuffle(mine)
        with Queue(pgq_dsn, max_size=1) as q:
            start.wait()
            try:
                while mine:
                    batch = mine[:random.randint(1, 12)]
                    del mine[:len(batch)]
                    if which == 0:
                        got: dict[int, Any] = dict(q.complete_many([(c, {"id": c.id}) for c in batch]))
                    else:
                        got = dict(q.fail_many([(c, f"boom {c.id}") for c in batch]))
                    with lock:
                        (completed if which == 0 else failed).update(got)
            finally:
                with lock:
                    ackers_left[0] -= 1
                    if ackers_left[0] == 0:
                        done.set()

    def heartbeater() -> None:
        with Queue(pgq_dsn, max_size=1) as q:
            start.wait()
            while not done.is_set():
                # One job per heartbeat: a heartbeat of several locks them in the order its plan
                # meets them, not in id order, so two of them (or one and an acknowledgement) could
                # deadlock over the same rows, which is not what this test is about.
                with contextlib.suppress(LeaseLost):  # finished (or cancelled) meanwhile: what it must say
                    q.heartbeat([random.choice(claims)], lease=300)
                with lock:
                    beats[0] += 1

    def canceller() -> None:
        with Queue(pgq_dsn, max_size=1) as q:
            start.wait()
            for c in random.sample(claims, N // 6):
                if done.is_set():
                    return
                try:
                    job = q.cancel(c.id, actor="race")
                except InvalidState:
                    continue  # finished first
                assert job.status is JobStatus.CANCELLED
                with lock:
                    cancelled.add(c.id)

    workers = [lambda: acker(0), lambda: acker(1), heartbeater, heartbeater, heartbeater]
    if cancel:
        workers.append(canceller)
    _run_threads(len(workers), lambda i: workers[i]())
    return completed, failed, cancelled, beats[0]


def _check(db: SQL, claims: list[Claim], children: dict[int, int], completed: dict[int, Any],
           failed: dict[int, Any], cancelled: set[int]) -> None:
    ids = {c.id for c in claims}
    # Every acknowledgement was applied or lost to a cancel, never both, never neither; a job that
    # failed with attempts left was queued again, and may be cancelled after that.
    requeued = {job_id for job_id, job in failed.items() if job.status is JobStatus.QUEUED}
    assert not (completed.keys() & failed.keys())
    assert not ((completed.keys() | (failed.keys() - requeued)) & cancelled)
    assert completed.keys() | failed.keys() | cancelled == ids
    assert set(completed.values()) <= {JobStatus.SUCCEEDED}
    rows = db("SELECT id, status::text AS status, tableoid::regclass::text AS part, lease_token, finished_at, "
              "attempts, last_error, result FROM pgq.jobs WHERE kind = 'race'")
    assert len(rows) == N and {r["id"] for r in rows} == ids, "a job was lost or duplicated"
    live = {r["id"]: r for r in rows if r["part"] == "pgq.live_jobs"}
    finished = {r["id"]: r for r in rows if r["part"] != "pgq.live_jobs"}
    # Each finished job is in the history once, nowhere else.
    twice = db("SELECT id FROM pgq.finished_jobs WHERE kind = 'race' GROUP BY id HAVING count(*) > 1")
    assert twice == []
    assert not (db("SELECT id FROM pgq.live_jobs WHERE id = ANY(%s)", [list(finished)]))
    for job_id, job in failed.items():
        if job_id in cancelled:
            continue  # re-queued, then cancelled: checked below
        if job.status is JobStatus.QUEUED:  # attempts left: re-queued, still live
            assert job_id in live and live[job_id]["status"] == "queued" and live[job_id]["lease_token"] is None
            assert live[job_id]["last_error"] == f"boom {job_id}"
        else:
            assert job.status is JobStatus.FAILED and finished[job_id]["status"] == "failed"
            assert finished[job_id]["finished_at"] is not None and finished[job_id]["last_error"] == f"boom {job_id}"
    for job_id in completed:
        assert finished[job_id]["status"] == "succeeded" and finished[job_id]["result"] == {"id": job_id}
    for job_id in cancelled:
        assert finished[job_id]["status"] == "cancelled"
    assert all(r["lease_token"] is None for r in rows)
    # The history's triggers released the children: queued after a success, cancelled otherwise
    # (a failure or cancel), waiting while the parent is live (re-queued after a failure).
    kids = {r["id"]: r["status"] for r in db("SELECT id, status::text AS status FROM pgq.jobs WHERE kind = 'child'")}
    for parent, child in children.items():
        if parent in completed:
            assert kids[child] == "queued", (parent, child)
        elif parent in live:
            assert kids[child] == "waiting", (parent, child)
        else:
            assert kids[child] == "cancelled", (parent, child)


@pytest.mark.slow
@pytest.mark.parametrize("cancel", [
    pytest.param(False, id="heartbeats"),
    pytest.param(True, id="heartbeats-and-cancels"),
])
def test_acks_racing_heartbeats_move_each_job_once(pgq_dsn: str, db: SQL, cancel: bool) -> None:
    with Queue(pgq_dsn) as q:
        claims, children = _enqueue(q, db)
    completed, failed, cancelled, beats = _race(pgq_dsn, claims, cancel)
    assert beats > 30, "no real race: the heartbeats hardly ran while the jobs were acknowledged"
    if cancel:
        assert cancelled, "no real race: no cancel came before its job's acknowledgement"
    _check(db, claims, children, completed, failed, cancelled)


def _lock_waiters(db: SQL) -> int:
    rows = db("SELECT count(*) AS n FROM pg_stat_activity WHERE datname = current_database() "
              "AND wait_event_type = 'Lock'")
    return int(rows[0]["n"])


def _until_waiting(db: SQL, thread: threading.Thread) -> None:
    deadline = time.monotonic() + 10
    while _lock_waiters(db) == 0:
        assert thread.is_alive() and time.monotonic() < deadline, "the second statement never waited"
        time.sleep(0.02)


@pytest.mark.parametrize("ack", ["complete", "fail"])
def test_a_heartbeat_waiting_for_an_ack_finds_the_job_gone(pgq_dsn: str, db: SQL, ack: str) -> None:
    # The acknowledgement moves the job and holds its transaction open; a heartbeat of the same job
    # waits for it, then finds no row to renew (a lost lease), not a row "moved to another partition".
    with Queue(pgq_dsn) as q:
        job_id = q.enqueue("race", max_attempts=1)
        [claim] = q.claim(worker="w", kinds=["race"])
        renewed: list[list[dict[str, Any]]] = []
        with psycopg.connect(pgq_dsn) as acker:
            if ack == "complete":
                acker.execute("SELECT * FROM pgq.complete(%s, %s, ARRAY['1']::jsonb[], ARRAY[NULL]::bigint[], "
                              "NULL, NULL)", [[job_id], [claim.token]])
            else:
                acker.execute("SELECT * FROM pgq.fail(%s, %s, ARRAY['e'], ARRAY[NULL]::float8[], ARRAY[false], "
                              "NULL, NULL)", [[job_id], [claim.token]])
            def heartbeat() -> None:
                with psycopg.connect(pgq_dsn, autocommit=True, row_factory=dict_row) as conn:
                    renewed.append(conn.execute(
                        "SELECT * FROM pgq.heartbeat(%s, %s, ARRAY[30]::float8[], NULL, NULL)",
                        [[job_id], [claim.token]]).fetchall())

            beat = threading.Thread(target=heartbeat)
            beat.start()
            _until_waiting(db, beat)
            acker.commit()
        beat.join(10)
        assert renewed == [[]]
    assert db("SELECT status::text AS status FROM pgq.finished_jobs WHERE id = %s", [job_id]) == [
        {"status": "succeeded" if ack == "complete" else "failed"}]
    assert db("SELECT id FROM pgq.live_jobs WHERE id = %s", [job_id]) == []


def test_an_ack_waiting_for_a_raised_watermark_re_queues_the_job(pgq_dsn: str, db: SQL) -> None:
    # The run processed watermark 1; a newer one is written on the job's row (as pgq.settle folds a
    # key's raise into it) in a transaction still open. The completion waits for that row, then
    # decides on the row as it is now: a dirty re-run, queued again in pgq.live_jobs, no success.
    with Queue(pgq_dsn) as q:
        job_id = q.enqueue("build")
        db("UPDATE pgq.live_jobs SET input_watermark = 1 WHERE id = %s", [job_id])
        [claim] = q.claim(worker="w", kinds=["build"])
        assert claim.id == job_id and claim.job.input_watermark == 1
        answers: list[JobStatus] = []
        with psycopg.connect(pgq_dsn) as producer:
            producer.execute("UPDATE pgq.live_jobs SET input_watermark = 2 WHERE id = %s", [job_id])
            finisher = threading.Thread(target=lambda: answers.append(q.complete(claim, {"built": 1})))
            finisher.start()
            _until_waiting(db, finisher)
            producer.commit()
        finisher.join(10)
        assert answers == [JobStatus.QUEUED]
    rows = db("SELECT tableoid::regclass::text AS part, status::text AS status, input_watermark, done_watermark, "
              "attempts, result FROM pgq.jobs WHERE id = %s", [job_id])
    assert rows == [{"part": "pgq.live_jobs", "status": "queued", "input_watermark": 2, "done_watermark": 1,
                     "attempts": 0, "result": {"built": 1}}]
