"""Cancels racing a worker's heartbeats and acknowledgements of the same running jobs, with real
concurrency (revision 0033): a cancel moves a job from pgq.live_jobs to pgq.finished_jobs in one
statement, so a heartbeat, completion or failure of that job finds it gone (its lease lost) instead
of failing on a row moved to another partition; and the cancel tells the job's worker itself."""

from __future__ import annotations

import contextlib
import hashlib
import random
import threading
import time

import psycopg
import pytest

from pgq import Claim, JobSpec, Queue
from pgq.errors import InvalidState, LeaseLost

from .conftest import SQL
from .test_races import _run_threads


@pytest.mark.slow
@pytest.mark.parametrize("rounds", range(3))
def test_admin_cancels_race_heartbeats_and_acknowledgements_of_the_same_running_jobs(
        pgq_dsn: str, db: SQL, rounds: int) -> None:
    n = 120
    with Queue(pgq_dsn) as producer:
        producer.enqueue_many([JobSpec("k", {"i": i}, queue="race", max_attempts=1) for i in range(n)])
        claims: list[Claim] = []
        while len(claims) < n:  # several claims, several lease tokens
            claims += producer.claim(worker="w", queues=["race"], limit=random.randint(1, 9), lease=120)
    tokens = {c.id: hashlib.md5(str(c.token).encode()).hexdigest() for c in claims}
    ids = sorted(tokens)
    halves = [claims[0::2], claims[1::2]]

    notices: list[str] = []
    listening = threading.Event()
    stop = threading.Event()

    def listener() -> None:
        with psycopg.connect(pgq_dsn, autocommit=True) as conn:
            conn.execute("LISTEN pgq_cancel")
            listening.set()
            while not stop.is_set():
                notices.extend(note.payload for note in conn.notifies(timeout=0.2))
            notices.extend(note.payload for note in conn.notifies(timeout=0.5))

    listen = threading.Thread(target=listener)
    listen.start()
    assert listening.wait(10)
    barrier = threading.Barrier(5)
    cancelled_by_call: list[int] = []

    def racer(i: int) -> None:
        with Queue(pgq_dsn, max_size=1) as q:
            barrier.wait()
            if i == 0:  # one admin cancels job by job, in a random order
                for job_id in random.sample(ids, len(ids)):
                    with contextlib.suppress(InvalidState):  # acknowledged first
                        cancelled_by_call.append(q.cancel(job_id, actor="racer").id)
            elif i == 1:  # another in bulk batches (sql/job_cancel_many.sql), lowest ids first
                q.cancel_where(queue="race", batch=7, actor="racer")
            else:  # two workers heartbeat their claims and acknowledge them a few at a time; a third
                # only heartbeats every claim, until none is left running
                live = list(halves[i - 2] if i < 4 else claims)
                while live:
                    try:
                        q.heartbeat(live, lease=120)
                    except LeaseLost as lost:
                        gone = set(lost.job_ids)
                        live = [c for c in live if c.id not in gone]
                    if i == 2:
                        q.complete_many([(c, {"ok": True}) for c in live[:3]])
                        live = live[3:]
                    elif i == 3:
                        q.fail_many([(c, "boom") for c in live[:3]])
                        live = live[3:]
                    time.sleep(random.random() / 500)

    try:
        _run_threads(5, racer)
    finally:
        time.sleep(0.2)
        stop.set()
        listen.join(timeout=10)

    # Every job exactly once, in the partition its status belongs to.
    rows = db("SELECT tableoid::regclass::text AS part, id, status::text, lease_token IS NULL AS no_lease "
              "FROM pgq.jobs WHERE queue = 'race' ORDER BY id")
    assert [r["id"] for r in rows] == ids
    live = db("SELECT count(*) AS n FROM pgq.live_jobs WHERE queue = 'race'")[0]["n"]
    finished = db("SELECT count(*) AS n FROM pgq.finished_jobs WHERE queue = 'race'")[0]["n"]
    assert (live, finished) == (0, n)
    assert all(r["status"] in ("succeeded", "failed", "cancelled") and r["no_lease"]
               and r["part"].startswith("pgq.finished_jobs") for r in rows)
    cancelled = {r["id"] for r in rows if r["status"] == "cancelled"}
    assert set(cancelled_by_call) <= cancelled
    assert cancelled, "no real race: every job was acknowledged first"
    # Each job cancelled while running told its worker once, by the md5 of the token it held.
    assert sorted(notices) == sorted(f"{job_id}:{tokens[job_id]}" for job_id in cancelled)
    audited = db("SELECT coalesce(array_agg(x ORDER BY x), '{}') AS ids FROM pgq.job_audit, unnest(job_ids) x "
                 "WHERE action = 'cancel' AND actor = 'racer'")[0]["ids"]
    assert audited == sorted(cancelled)
