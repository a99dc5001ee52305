"""Sequences (revision 0017) with real workers: two in-process workers, several slots each, run the
jobs of three sequence keys; afterwards the database shows that the jobs of each key ran one at a
time, in id order, each exactly once."""

from __future__ import annotations

import asyncio
import itertools
import random

import pgq

from .conftest import DB, async_wait_for
from .test_workflows import in_loop

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
