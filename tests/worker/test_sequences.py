"""Sequences (revision 0017) with real workers: two in-process workers, several slots each, run the
jobs of three sequence keys; afterwards the database shows that the jobs of each key ran one at a
time, in id order, each exactly once. Then the same with worker processes, producer processes racing
them, checked against the recorded history (tests/history.py)."""

from __future__ import annotations

import asyncio
import itertools
import random
from collections.abc import Callable

import pytest

import pgq

from .. import history, producers
from .conftest import DB, WorkerProcess, async_wait_for, wait_for
from .test_workflows import in_loop

Spawn = Callable[..., WorkerProcess]

KEYS = ["acct-a", "acct-b", "acct-c"]


@in_loop
async def test_workers_run_each_sequence_one_job_at_a_time_in_order(pgq_dsn: str, db: DB) -> None:
    app = pgq.App(pgq_dsn)
    rng = random.Random(32)

    @app.task(sequence_by="key")
    async def step(key: str, n: int) -> None:
        await asyncio.sleep(rng.uniform(0.005, 0.03))  # long enough for the other slots to try

    async with pgq.AsyncQueue(pgq_dsn) as q:
        # The keys interleaved in id order.
        await q.enqueue_many([step.spec(key=KEYS[n % 3], n=n) for n in range(60)])
    workers = [pgq.Worker(app, claimed_by=f"seq-{i}", concurrency=4, poll_interval=0.05, lease=10)
               for i in range(2)]
    runners = [asyncio.create_task(w.run_async()) for w in workers]
    try:
        async def done() -> bool:
            for r in runners:
                if r.done():
                    r.result()
            return db.value("SELECT count(*) FROM pgq.jobs WHERE status <> 'succeeded'") == 0

        await async_wait_for(done, 60, "the workers to run every job")
    finally:
        for w in workers:
            w.stop()
        await asyncio.wait_for(asyncio.gather(*runners), 20)

    assert all(w.stats["succeeded"] > 0 for w in workers)  # both took part
    # Jobs of different keys did run at the same time: the slots were there to break the order.
    assert db.value("SELECT count(*) FROM pgq.jobs a JOIN pgq.jobs b ON a.sequence_key < b.sequence_key "
                    "AND a.started_at < b.finished_at AND b.started_at < a.finished_at") > 0
    for key in KEYS:
        runs = db.rows("SELECT id, status::text AS status, attempts, started_at, finished_at FROM pgq.jobs "
                       "WHERE sequence_key = %s ORDER BY id", [key])
        assert len(runs) == 20
        assert {(r["status"], r["attempts"]) for r in runs} == {("succeeded", 1)}
        for prev, cur in itertools.pairwise(runs):
            assert cur["started_at"] >= prev["finished_at"], (key, prev, cur)


@in_loop
async def test_a_follow_up_with_a_sequence_key_joins_the_end_of_its_sequence(pgq_dsn: str, db: DB) -> None:
    """`pgq.after_success` follow-ups with a sequence key are enqueued by their parent's completion
    and join the key's sequence there, at its end: behind the jobs of the key enqueued before,
    behind the parent itself when it is the key's last job (and not stuck behind it), and behind a
    job of the key still running when a parent outside the sequence asks for one (with a group key
    as well, which the follow-up keeps)."""
    app = pgq.App(pgq_dsn)
    seen: dict[int, str | None] = {}

    @app.task(sequence_by="key")
    async def step(n: int, key: str | None = None, follow: str | None = None, ms: float = 0) -> None:
        seen[n] = pgq.current_job().sequence_key
        await asyncio.sleep(ms / 1000)
        if follow == "task":  # the task's sequence_by gives the follow-up its key
            pgq.after_success(step, {"key": key, "n": n + 100})
        elif follow:  # a kind and an explicit key (another sequence's, from this job)
            pgq.after_success("step", {"key": follow, "n": n + 100}, sequence_key=follow, group_key=f"g:{follow}")

    async with pgq.AsyncQueue(pgq_dsn, app=app) as q:
        # a: the first job asks for a follow-up, two more are behind it. b: the key's only job asks.
        # c: a slow job of c runs while a job of no sequence asks for a follow-up of c.
        first_a, _, last_a = await q.enqueue_many([step.spec(key="a", n=1, follow="task", ms=50),
                                                   step.spec(key="a", n=2), step.spec(key="a", n=3)])
        only_b, slow_c, _ = await q.enqueue_many([
            step.spec(key="b", n=11, follow="task"), step.spec(key="c", n=21, ms=1000),
            step.spec(n=31, follow="c", ms=50)])  # no key field: no sequence
    worker = pgq.Worker(app, concurrency=4, poll_interval=0.05, lease=10)
    runner = asyncio.create_task(worker.run_async())
    try:
        async def done() -> bool:
            if runner.done():
                runner.result()
            return db.value("SELECT count(*) FROM pgq.jobs WHERE status = 'succeeded'") == 9

        await async_wait_for(done, 30, "the jobs and their three follow-ups to succeed")
    finally:
        worker.stop()
        await asyncio.wait_for(runner, 20)

    jobs = {r["n"]: r for r in db.rows(
        "SELECT (payload->>'n')::int AS n, id, sequence_key, group_key, status::text AS status, started_at, "
        "finished_at, "
        "(SELECT array_agg(d.parent_id ORDER BY d.parent_id) FROM pgq.job_dependencies d "
        " WHERE d.job_id = j.id AND d.sequence_hold IS NOT NULL) AS after FROM pgq.jobs j")}
    assert {n: j["sequence_key"] for n, j in jobs.items()} == {
        1: "a", 2: "a", 3: "a", 101: "a", 11: "b", 111: "b", 21: "c", 31: None, 131: "c"}
    assert seen == {n: j["sequence_key"] for n, j in jobs.items()}  # and each handler's job had its key
    assert {n: j["group_key"] for n, j in jobs.items() if j["group_key"]} == {131: "g:c"}  # a group too
    # The follow-ups are the last of their keys, chained behind the key's tail when they were enqueued.
    assert jobs[101]["after"] == [last_a]
    assert jobs[111]["after"] in ([only_b], None), jobs[111]  # behind its parent, or ready once it finished
    assert jobs[131]["after"] == [slow_c]
    for key in ("a", "b", "c"):
        runs = sorted((j for j in jobs.values() if j["sequence_key"] == key), key=lambda j: j["id"])
        assert runs[-1]["n"] > 100 and runs[0]["id"] in (first_a, only_b, slow_c)
        for prev, cur in itertools.pairwise(runs):
            assert cur["started_at"] >= prev["finished_at"], (key, prev, cur)


@pytest.mark.slow
def test_worker_processes_run_each_sequence_in_order_with_producers_racing(
    pgq_dsn: str, db: DB, spawn_worker: Spawn, capsys: pytest.CaptureFixture[str]
) -> None:
    """Three worker processes, four slots each, run four sequence keys while three producer
    processes add to the same keys; the history shows each key's jobs strictly in id order, never
    overlapping (across retries too: a few jobs fail their first attempt), every job run once."""
    history.install(db.conn)
    keys = ["s0", "s1", "s2", "s3"]
    with pgq.Queue(pgq_dsn) as queue:  # some before the workers start, the keys interleaved
        queue.enqueue_many([pgq.JobSpec("sequenced", {"key": keys[n % 4], "n": n, "ms": n % 10,
                                                      "fail_first": n % 9 == 4},
                                        queue="sequences", sequence_key=keys[n % 4]) for n in range(40)])
    workers = [spawn_worker("--queue", "sequences", "--concurrency", "4", "--poll-interval", "0.2",
                            "--log-level", "WARNING", "--name", f"seq{i}") for i in range(3)]
    rounds = 12
    producers.finish(producers.start(pgq_dsn, "sequences", [
        {"kind": "sequenced", "queue": "sequences", "keys": keys, "rounds": rounds, "fail_every": 11}] * 3))
    total = 40 + 3 * rounds * (len(keys) + 1)
    assert db.value("SELECT count(*) FROM pgq.jobs") == total
    wait_for(lambda: db.value("SELECT count(*) FROM pgq.jobs WHERE status <> 'succeeded'") == 0, 120,
             "every sequenced job to succeed", interval=0.1)

    report = history.check(db.conn)
    with capsys.disabled():
        print(f"\nsequences under 3 worker processes and 3 producer processes: {report.summary()}")
    assert report.violations == {}
    assert report.counts["sequenced jobs"] == total
    retried = db.value("SELECT count(*) FROM pgq.jobs WHERE (payload->>'fail_first')::boolean")
    assert retried > 0
    # Nothing lost, nothing run twice: one claim per job, one more per failed first attempt, one
    # success each.
    assert report.counts["claim"] == total + retried
    assert report.counts["ends succeeded"] == total
    # Each handler's job carried its sequence key (the claim returns it).
    assert db.value("SELECT count(*) FROM effects e JOIN pgq.jobs j ON j.id = e.job_id "
                    "WHERE e.note = 'seq:' || j.sequence_key AND j.sequence_key = j.payload->>'key'") == total
    # The race was real: every process ran jobs, and jobs of different keys ran at the same time.
    assert db.value("SELECT count(DISTINCT claimed_by) FROM pgq.jobs") == 3
    assert db.value("SELECT count(*) FROM pgq.jobs a JOIN pgq.jobs b ON a.sequence_key < b.sequence_key "
                    "AND a.started_at < b.finished_at AND b.started_at < a.finished_at") > 0
    for worker in workers:
        assert worker.alive()
