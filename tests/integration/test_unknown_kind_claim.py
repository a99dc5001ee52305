"""Claims that name their kinds behind jobs of other kinds (issue #42, revision 0027): however many
jobs of kinds the claimer does not ask for wait ahead of its own, at the same or a better priority,
the claim reads its kinds' rows only (jobs_claim_kind_idx), never theirs. Measured as pages of the
claim's indexes read, against the same claim from a twin queue without the other kinds (never as a
time); and the claim's rules still hold: claim order across kinds, busy rows, untouched others."""

from __future__ import annotations

import datetime as dt
import random

import psycopg

from pgq import JobSpec, Queue, _ops

from .conftest import SQL
from .test_scheduled_backlog import SLACK, _claim_counting

BACKLOG = 20_000


def _backlog(queue: str, priority: int) -> list[JobSpec]:
    return [JobSpec("unknown", queue=queue, priority=priority) for _ in range(BACKLOG)]


def test_a_claim_reads_no_row_of_a_kind_it_does_not_ask_for(pgq_queue: Queue, pgq_dsn: str, db: SQL) -> None:
    """20,000 jobs of a kind the claimer does not know, enqueued first (earlier run_at) at the same
    priority as its jobs (queue q) and at a better one (queue b): a claim of 16 naming its two kinds
    takes its jobs in claim order across both kinds, reading what the same claim reads from a queue
    with nothing else (before revision 0027 it read every unknown row; 0.8 s a claim at 1,000,000).
    The unknown rows keep their versions: never locked, never written."""
    pgq_queue.enqueue_many(_backlog("q", 1) + _backlog("b", 0))
    before = db("SELECT count(*) AS n, max(xmin::text::bigint) AS x FROM pgq.jobs WHERE kind = 'unknown'")
    expected = {}
    for queue in ("q", "b", "e"):
        expected[queue] = pgq_queue.enqueue_many(
            [JobSpec("a" if i % 3 else "b", queue=queue, priority=1) for i in range(20)])
    db("VACUUM ANALYZE pgq.jobs")
    twin, twin_read = _claim_counting(pgq_dsn, "e", kinds=["b", "a"])
    assert [c.id for c in twin] == expected["e"][:16]
    for queue in ("q", "b"):
        claims, read = _claim_counting(pgq_dsn, queue, kinds=["b", "a", "missing", "a"])
        assert [c.id for c in claims] == expected[queue][:16], queue
        assert read < twin_read + SLACK, (queue, read, twin_read)
    # A claim of one kind (pgq.claim's one-kind path): the same, in claim order.
    twin, twin_read = _claim_counting(pgq_dsn, "e", kinds=["a"], limit=2)
    for queue in ("q", "b"):
        claims, read = _claim_counting(pgq_dsn, queue, kinds=["a"], limit=2)
        assert [c.id for c in claims] == expected[queue][16:18], queue  # the next two of kind a
        assert read < twin_read + SLACK, (queue, read, twin_read)
    assert db("SELECT count(*) AS n, max(xmin::text::bigint) AS x FROM pgq.jobs WHERE kind = 'unknown'") == before
    assert db("SELECT DISTINCT status::text AS s, attempts FROM pgq.jobs WHERE kind = 'unknown'") == [
        {"s": "queued", "attempts": 0}]
    # A claim that names no kinds (a tool, psql) still takes the oldest jobs of any kind.
    claims, _ = _claim_counting(pgq_dsn, "q", kinds=None, limit=3)
    assert {c.job.kind for c in claims} == {"unknown"}


def test_a_claim_of_its_kinds_reads_past_rows_other_claims_hold(pgq_queue: Queue, pgq_dsn: str, db: SQL) -> None:
    """Another claim holds (not yet committed) the first 100 jobs of the asked kinds, more than the
    claim reads of a kind at first: it reads on (four times as many) and takes the 16 after them, in
    claim order; once the holder rolls back, they are claimable again (rows a transaction just
    released may come after later ones: busy rows are tried last)."""
    pgq_queue.enqueue_many(_backlog("q", 1))
    ids = pgq_queue.enqueue_many([JobSpec("a" if i % 2 else "b", queue="q", priority=1) for i in range(150)])
    with psycopg.connect(pgq_dsn) as holder:
        held = _ops.run_sync(holder, _ops.claim(worker="h", queues=["q"], kinds=["a", "b"], limit=100, lease=60),
                             own_transaction=False)
        assert [c.id for c in held] == ids[:100]
        claims, _ = _claim_counting(pgq_dsn, "q", kinds=["a", "b"])
        assert [c.id for c in claims] == ids[100:116]
        holder.rollback()
    claims, _ = _claim_counting(pgq_dsn, "q", kinds=["a", "b"], limit=100)
    taken = [c.id for c in claims]
    assert len(taken) == len(set(taken)) == 100 and not set(taken) & set(ids[100:116])
    assert set(ids[:100]) <= set(taken) | {c.id for c in _claim_counting(pgq_dsn, "q", kinds=["a", "b"], limit=50)[0]}


def test_limited_kinds_and_unknown_kinds_in_one_queue(pgq_queue: Queue, pgq_dsn: str, db: SQL) -> None:
    """A known kind with a concurrency limit and a plain known kind behind unknown jobs: the limit
    holds (2 of the limited kind), the plain jobs fill the rest, no unknown job is taken."""
    pgq_queue.set_concurrency_limit("lim", 2)
    pgq_queue.enqueue_many(_backlog("q", 0))
    lim = pgq_queue.enqueue_many([JobSpec("lim", queue="q") for _ in range(5)])
    plain = pgq_queue.enqueue_many([JobSpec("plain", queue="q") for _ in range(20)])
    claims, _ = _claim_counting(pgq_dsn, "q", kinds=["lim", "plain"])
    assert sorted(c.id for c in claims if c.job.kind == "lim") == lim[:2]
    assert [c.id for c in claims if c.job.kind == "plain"] == plain[:14]


def test_claims_of_some_kinds_take_those_kinds_first_jobs_in_claim_order(pgq_queue: Queue, pgq_dsn: str,
                                                                         db: SQL) -> None:
    """Random jobs of five kinds over four priorities, some scheduled: a claim naming one, two or
    three kinds takes exactly the first jobs of those kinds in claim order (priority, run_at, id), as
    a claim naming no kinds would if the other kinds were not there; repeated until the queue has
    none left of them, and no job is taken twice."""
    rng = random.Random(42)
    pgq_queue.enqueue_many([
        JobSpec(rng.choice("abcde"), queue="q", priority=rng.randrange(4),
                delay=dt.timedelta(days=1) if rng.random() < 0.2 else None)
        for _ in range(600)])
    db("UPDATE pgq.jobs SET run_at = run_at - make_interval(secs => random() * 60) WHERE run_at <= now()")
    for kinds in (["b"], ["c", "a"], ["a", "d", "e"]):
        order = [r["id"] for r in db("SELECT id FROM pgq.jobs WHERE status = 'queued' AND kind = ANY(%s) "
                                     "AND run_at <= now() ORDER BY priority, run_at, id", [kinds])]
        taken: list[int] = []
        while claims := _claim_counting(pgq_dsn, "q", kinds=kinds, limit=7)[0]:
            assert {c.job.kind for c in claims} <= set(kinds)
            taken += [c.id for c in claims]
        assert taken == order, kinds
