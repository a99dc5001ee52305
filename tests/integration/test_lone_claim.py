"""Revision 0024: a claim alone in its queue locks its rows in one ordered scan and may take up to
1,024 of them; claims that overlap in a queue reserve each row, at most 256 a statement, as before.
Both paths racing each other still claim every job exactly once."""

from __future__ import annotations

import threading
from typing import Any

import psycopg

from pgq import JobSpec, Queue, _ops

from .conftest import SQL


def _claim(dsn: str, queues: list[str] | None, limit: int) -> list[Any]:
    with psycopg.connect(dsn, autocommit=True) as conn:
        return _ops.run_sync(conn, _ops.claim(worker="t", queues=queues, kinds=None, limit=limit, lease=60),
                             own_transaction=True)


def _statement(dsn: str, queues: list[str], limit: int) -> list[int]:
    """One pgq.claim statement (no client-side chunking); the ids it took, in its order."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        rows = conn.execute("SELECT c.id FROM pgq.claim(%s, NULL, %s, 60, 'stmt') AS c", (queues, limit)).fetchall()
    return [r[0] for r in rows]


def test_a_lone_claim_takes_up_to_1024_rows_in_one_statement_in_claim_order(pgq_queue: Queue, pgq_dsn: str) -> None:
    """Nobody else claims the queue: one statement takes 1,024 of 1,500 jobs (the cap), the best
    first, then the rest; a scheduled job and a higher priority number come last or not at all."""
    ids = pgq_queue.enqueue_many([JobSpec("k", queue="q") for _ in range(1500)])
    late = pgq_queue.enqueue_many([JobSpec("k", queue="q", priority=5)])
    pgq_queue.enqueue_many([JobSpec("k", queue="q", delay=3600)])
    first = _statement(pgq_dsn, ["q"], 5000)
    assert first == ids[:1024]
    assert _statement(pgq_dsn, ["q"], 5000) == ids[1024:] + late


def test_a_claim_overlapping_another_in_its_queue_reserves_at_most_256(pgq_queue: Queue, pgq_dsn: str) -> None:
    """While a claim of the queue is open (it holds the queue's key), another claim of the queue
    reserves: 256 rows a statement, none of the open claim's; the client's claim of 600 goes on
    past a statement of exactly 256 and gets all 600."""
    ids = pgq_queue.enqueue_many([JobSpec("k", queue="q") for _ in range(1000)])
    with psycopg.connect(pgq_dsn) as holder:  # a transaction left open after its claim
        held = [r[0] for r in holder.execute("SELECT c.id FROM pgq.claim(ARRAY['q'], NULL, 10, 60, 'h') AS c")]
        assert held == ids[:10]
        reserved = _statement(pgq_dsn, ["q"], 600)
        assert reserved == ids[10:266]
        more = [c.id for c in _claim(pgq_dsn, ["q"], 600)]
        assert more == ids[266:866]
        holder.rollback()
    assert [c.id for c in _claim(pgq_dsn, ["q"], 2000)] == ids[:10] + ids[866:]


def test_a_claim_of_several_queues_or_with_limits_reserves(pgq_queue: Queue, pgq_dsn: str) -> None:
    """The lone path is for one queue with no limit defined: a claim of two queues, or one made while
    any kind has a concurrency limit, takes at most 256 rows a statement."""
    pgq_queue.enqueue_many([JobSpec("k", queue="a") for _ in range(1000)])
    pgq_queue.enqueue_many([JobSpec("k", queue="b") for _ in range(400)])
    assert len(_statement(pgq_dsn, ["a", "b"], 1000)) == 256
    pgq_queue.set_concurrency_limit("other", 2)
    assert len(_statement(pgq_dsn, ["a"], 1000)) == 256
    pgq_queue.set_concurrency_limit("other", None)
    assert len(_statement(pgq_dsn, ["a"], 1000)) == 1000 - 512


def test_grouped_jobs_queued_in_the_queue_keep_the_claim_on_the_fair_walk(pgq_queue: Queue, pgq_dsn: str) -> None:
    """Grouped jobs are limited rows: with any queued in the queue, claims take the walk that gives
    groups their turns, and plain jobs are claimed beside them as before."""
    plain = pgq_queue.enqueue_many([JobSpec("p", queue="q") for _ in range(300)])
    grouped = pgq_queue.enqueue_many([JobSpec("g", queue="q", group_key=f"g{i % 3}") for i in range(30)])
    got = _statement(pgq_dsn, ["q"], 1000)
    assert len(got) <= 256
    rest = [c.id for c in _claim(pgq_dsn, ["q"], 1000)]
    assert sorted(got + rest) == sorted(plain + grouped)


def test_lone_and_reserving_claims_racing_claim_every_job_exactly_once(pgq_queue: Queue, pgq_dsn: str,
                                                                       db: SQL) -> None:
    """Twelve connections claim at once: eight from queue q alone in claims of up to 1,000 (lone
    whenever they find the queue free, reserving otherwise), four from q and r together (always
    reserving), each completing what it took. Every job of both queues is claimed exactly once, and
    nothing deadlocks."""
    n = 12_000
    pgq_queue.enqueue_many([JobSpec("k", queue="q") for _ in range(n)])
    pgq_queue.enqueue_many([JobSpec("k", queue="r") for _ in range(n // 4)])
    seen: list[list[int]] = [[] for _ in range(12)]
    errors: list[BaseException] = []
    barrier = threading.Barrier(12)

    def claimer(i: int) -> None:
        queues, limit = (["q"], 1000) if i < 8 else (["q", "r"], 300)
        try:
            with Queue(pgq_dsn, max_size=1) as q:
                barrier.wait()
                while True:
                    claims = q.claim(worker=f"w{i}", queues=queues, limit=limit)
                    if not claims:
                        return
                    seen[i].extend(c.id for c in claims)
                    q.complete_many([(c, None) for c in claims])
        except BaseException as exc:  # reported below
            errors.append(exc)

    threads = [threading.Thread(target=claimer, args=(i,)) for i in range(12)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(180)
    assert not any(t.is_alive() for t in threads)
    assert not errors, errors
    claimed = [i for s in seen for i in s]
    total = n + n // 4
    assert len(claimed) == total and len(set(claimed)) == total
    assert db("SELECT status::text, attempts, count(*) AS n FROM pgq.jobs GROUP BY 1, 2") == [
        {"status": "succeeded", "attempts": 1, "n": total}]


def test_a_claim_of_one_paused_queue_takes_nothing_until_it_is_resumed(pgq_queue: Queue, pgq_dsn: str) -> None:
    """The claim of a single queue reads the pauses through its own statement (revision 0024): a
    paused queue yields nothing, another queue's pause nothing of this one's, and a resume all."""
    ids = pgq_queue.enqueue_many([JobSpec("k", queue="q") for _ in range(3)])
    pgq_queue.pause("q")
    pgq_queue.pause("other")
    assert _statement(pgq_dsn, ["q"], 10) == []
    pgq_queue.resume("q")
    assert _statement(pgq_dsn, ["q"], 10) == ids


def test_a_lone_claim_skips_a_row_another_transaction_holds_and_takes_the_next(pgq_queue: Queue,
                                                                              pgq_dsn: str) -> None:
    """An operator's transaction holds the first job FOR UPDATE: a lone claim of one job, of any kind
    and of its one kind, takes the next job in its place (the skipped row does not use up the batch)."""
    ids = pgq_queue.enqueue_many([JobSpec("k", queue="q") for _ in range(3)])
    with psycopg.connect(pgq_dsn) as operator:
        operator.execute("SELECT 1 FROM pgq.jobs WHERE id = %s FOR UPDATE", (ids[0],))
        assert _statement(pgq_dsn, ["q"], 1) == [ids[1]]
        with psycopg.connect(pgq_dsn, autocommit=True) as conn:
            rows = conn.execute("SELECT c.id FROM pgq.claim(ARRAY['q'], ARRAY['k'], 1, 60, 'one') AS c").fetchall()
        assert [r[0] for r in rows] == [ids[2]]
