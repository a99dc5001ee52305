"""The claim and the enqueue under the shapes real teams run (revision 0010): limits that cost a
claim O(batch), claimers of different queues that never wait on each other's limit rows, the
`limited` mark kept right whoever inserts, keyed batches in opposite orders, delays counted from the
statement, and racing claimers that reserve before they lock (nothing claimed twice)."""

from __future__ import annotations

import threading
import time
from typing import Any

import psycopg
import pytest

from pgq import JobSpec, Queue, _ops

from .conftest import SQL


def _claim(dsn: str, queues: list[str] | None, limit: int = 16) -> list[Any]:
    with psycopg.connect(dsn, autocommit=True) as conn:
        return _ops.run_sync(conn, _ops.claim(worker="t", queues=queues, kinds=None, limit=limit, lease=60),
                             own_transaction=True)


def test_a_full_rate_window_ahead_of_plain_work_costs_the_claim_nothing(pgq_queue: Queue, pgq_dsn: str,
                                                                         db: SQL) -> None:
    """20,000 jobs of a kind whose rate window is full sit ahead of one plain job, and a limit is
    defined on a kind with no jobs. The claim takes the plain job reading a handful of rows; before
    revision 0010 it walked (and filtered) every limited row ahead of it."""
    pgq_queue.set_rate_limit("slow", "5/h")
    pgq_queue.set_concurrency_limit("nothing", 3)
    pgq_queue.enqueue_many([JobSpec("slow", queue="q") for _ in range(20_000)])
    assert len(_claim(pgq_dsn, ["q"], limit=5)) == 5  # the window is full now
    [plain] = pgq_queue.enqueue_many([JobSpec("plain", queue="q")])
    db("VACUUM ANALYZE pgq.jobs")
    with psycopg.connect(pgq_dsn) as conn:  # one transaction: its own statistics
        claims = _ops.run_sync(conn, _ops.claim(worker="t", queues=["q"], kinds=None, limit=16, lease=60),
                               own_transaction=True)
        fetched = conn.execute("SELECT coalesce(idx_tup_fetch, 0) + coalesce(seq_tup_read, 0) "
                               "FROM pg_stat_xact_user_tables WHERE relid = 'pgq.jobs'::regclass").fetchone()
        conn.rollback()
    assert [c.id for c in claims] == [plain]
    assert fetched is not None and fetched[0] < 200, fetched


def test_a_claim_behind_full_limits_locks_no_limit_row_and_finds_a_freed_slot(pgq_queue: Queue, pgq_dsn: str,
                                                                             db: SQL) -> None:
    """Kinds whose concurrency limit or rate window is full, read without a lock, are left out of the
    locked path: the claim takes the plain job and writes no row lock on their limit rows (their xmax
    stays as it was). Once a slot frees, the next claim takes the next job of that kind."""
    pgq_queue.set_concurrency_limit("busy", 1)
    pgq_queue.set_rate_limit("slow", "1/h")
    pgq_queue.enqueue_many([JobSpec("busy", queue="q") for _ in range(3)]
                           + [JobSpec("slow", queue="q") for _ in range(3)])
    first = _claim(pgq_dsn, ["q"])
    assert sorted(c.job.kind for c in first) == ["busy", "slow"]  # both limits are full now
    [plain] = pgq_queue.enqueue_many([JobSpec("plain", queue="q")])

    def limit_row_xmax() -> list[str]:
        return [r["x"] for r in db("SELECT xmax::text AS x FROM pgq.concurrency_limits WHERE kind = 'busy'"
                                   " UNION ALL SELECT xmax::text FROM pgq.rate_limits WHERE kind = 'slow'")]

    before = limit_row_xmax()
    assert [c.id for c in _claim(pgq_dsn, ["q"])] == [plain]
    assert limit_row_xmax() == before  # no FOR UPDATE on a full kind's limit rows
    pgq_queue.complete_many([(c, None) for c in first if c.job.kind == "busy"])
    assert [c.job.kind for c in _claim(pgq_dsn, ["q"])] == ["busy"]  # the freed slot, at once


def test_unmarked_jobs_of_a_limited_kind_are_marked_not_run_past_the_limit(pgq_queue: Queue, pgq_dsn: str,
                                                                           db: SQL) -> None:
    """A row of a limited kind inserted without the mark (a DBA's INSERT) is marked by the claim
    that meets it and then claimed as the limit allows; a marked row of a kind that lost its limit
    is claimed as plain work."""
    pgq_queue.set_concurrency_limit("lim", 1)
    db("INSERT INTO pgq.jobs (kind, queue) SELECT 'lim', 'q' FROM generate_series(1, 3)")
    db("INSERT INTO pgq.jobs (kind, queue, limited) VALUES ('free', 'q', true), ('free', 'q', true)")
    first = _claim(pgq_dsn, ["q"])
    assert sorted(c.job.kind for c in first) in (["free", "free"], ["free", "free", "lim"])
    second = _claim(pgq_dsn, ["q"])
    kinds = sorted(c.job.kind for c in first + second)
    assert kinds == ["free", "free", "lim"], kinds  # one `lim` at a time, never three
    assert db("SELECT count(*) AS n FROM pgq.jobs WHERE kind = 'lim' AND NOT limited")[0]["n"] == 0


def test_claimers_of_other_queues_never_wait_for_each_others_limit_rows(pgq_queue: Queue, pgq_dsn: str) -> None:
    """A claim of queue `a` holds its transaction open after claiming a limited kind of its own; a
    claim of queue `b`, whose limited kind has free slots, still gets its job. Before revision 0010
    the first claimer locked every limit row and the second got nothing."""
    pgq_queue.set_concurrency_limit("ka", 5)
    pgq_queue.set_concurrency_limit("kb", 5)
    pgq_queue.enqueue_many([JobSpec("ka", queue="a"), JobSpec("kb", queue="b")])
    with psycopg.connect(pgq_dsn) as holder:  # a claim whose transaction stays open
        held = holder.execute("SELECT id, kind FROM pgq.claim(ARRAY['a'], NULL, 5, 60, 'holder')").fetchall()
        assert [k for _, k in held] == ["ka"]
        other = _claim(pgq_dsn, ["b"])
        holder.rollback()
    assert [c.job.kind for c in other] == ["kb"]


def test_setting_and_removing_a_limit_marks_and_unmarks_queued_jobs(pgq_queue: Queue, db: SQL) -> None:
    pgq_queue.enqueue_many([JobSpec("k", queue="q") for _ in range(3)])
    pgq_queue.set_rate_limit("k", "100/s")
    assert db("SELECT count(*) AS n FROM pgq.jobs WHERE limited")[0]["n"] == 3
    pgq_queue.set_concurrency_limit("k", 2)  # a second limit: still marked
    pgq_queue.set_rate_limit("k", None)
    assert db("SELECT count(*) AS n FROM pgq.jobs WHERE limited")[0]["n"] == 3
    pgq_queue.set_concurrency_limit("k", None)
    assert db("SELECT count(*) AS n FROM pgq.jobs WHERE limited")[0]["n"] == 0
    pgq_queue.set_concurrency_limit("k", 2)
    pgq_queue.enqueue("k", queue="q")  # enqueued while limited: marked at once
    assert db("SELECT count(*) AS n FROM pgq.jobs WHERE limited")[0]["n"] == 4


@pytest.mark.slow
def test_racing_claimers_split_the_queue_and_claim_nothing_twice(pgq_queue: Queue, pgq_dsn: str, db: SQL) -> None:
    """Eight connections claim from one queue at once, in claims of up to 300 (over the 256 that
    one statement reserves), while a ninth completes what they took: every job is claimed exactly
    once, and each claim that came back short found the queue empty."""
    n = 20_000
    pgq_queue.enqueue_many([JobSpec("k", queue="q") for _ in range(n)])
    seen: list[list[int]] = [[] for _ in range(8)]
    errors: list[BaseException] = []
    barrier = threading.Barrier(8)

    def claimer(i: int) -> None:
        try:
            with Queue(pgq_dsn, max_size=1) as q:
                barrier.wait()
                while True:
                    claims = q.claim(worker=f"w{i}", queues=["q"], limit=300)
                    if not claims:
                        return
                    seen[i].extend(c.id for c in claims)
                    q.complete_many([(c, None) for c in claims])
        except BaseException as exc:  # reported below
            errors.append(exc)

    threads = [threading.Thread(target=claimer, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert not errors, errors
    claimed = [i for s in seen for i in s]
    assert len(claimed) == n and len(set(claimed)) == n
    assert db("SELECT attempts, count(*) AS n FROM pgq.jobs GROUP BY 1") == [{"attempts": 1, "n": n}]


def _race_keyed_batches(dsn: str, keys: list[str]) -> tuple[list[BaseException], list[list[int]]]:
    """Enqueue `keys` and `keys` reversed as two batches at once, each in a transaction that holds
    its keys a moment; return the errors and the two answers."""
    barrier = threading.Barrier(2)
    errors: list[BaseException] = []
    answers: list[list[int]] = []

    def enqueue(order: list[str]) -> None:
        try:
            with Queue(dsn, max_size=1) as q, psycopg.connect(dsn) as conn:
                barrier.wait()
                answers.append(q.enqueue_many([JobSpec("k", queue="q", dedupe_key=k) for k in order], conn=conn))
                time.sleep(0.05)  # hold the keys while the other batch runs into them
        except BaseException as exc:  # reported to the caller
            errors.append(exc)

    threads = [threading.Thread(target=enqueue, args=(o,)) for o in (keys, keys[::-1])]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    return errors, answers


def test_keyed_batches_in_opposite_orders_never_deadlock(pgq_dsn: str, db: SQL) -> None:
    """Two enqueue_many batches of the same 200 new dedupe keys, one in reverse order, race 20
    times. Revision 0007's enqueue inserted in the caller's order and deadlocked on the unique
    index; inserting in (queue, key) order, it cannot."""
    for race in range(20):
        errors, answers = _race_keyed_batches(pgq_dsn, [f"r{race}:{i:03d}" for i in range(200)])
        assert not errors, f"race {race}: {errors!r}"
        assert sorted(answers[0]) == sorted(answers[1])  # the same 200 jobs, whoever won each key
    assert db("SELECT count(*) AS n FROM pgq.jobs")[0]["n"] == 20 * 200


def test_a_delay_counts_from_the_enqueue_statement_not_the_transaction(pgq_dsn: str, db: SQL) -> None:
    """A job enqueued with delay=2 three seconds into a transaction is due two seconds after the
    enqueue, not one second before its commit; so is the default run_at, by every enqueue path."""
    with Queue(pgq_dsn) as q, psycopg.connect(pgq_dsn) as conn:  # one transaction, committed at the end
        conn.execute("SELECT pg_sleep(1.5)")
        delayed = q.enqueue("k", delay=2, conn=conn)
        now_job = q.enqueue("k", conn=conn)
        batch = q.enqueue_many([JobSpec("k", delay=2), JobSpec("k", dedupe_key="d", delay=2)], conn=conn)
        sql_job = conn.execute("SELECT pgq.enqueue('k') AS id").fetchone()
        stamp = conn.execute("SELECT statement_timestamp() - now() AS lag").fetchone()
    assert stamp is not None and sql_job is not None and stamp[0].total_seconds() >= 1.5
    rows = {r["id"]: r for r in db("SELECT id, run_at - created_at AS ahead FROM pgq.jobs")}
    for job in (delayed, *batch):
        assert rows[job]["ahead"].total_seconds() >= 3.4, (job, rows[job])  # 1.5 s in, plus 2 s
    for job in (now_job, sql_job[0]):
        assert rows[job]["ahead"].total_seconds() >= 1.4, (job, rows[job])


def test_a_claim_passes_over_rows_another_claim_holds_and_keeps_order_once_it_rolls_back(
        pgq_queue: Queue, pgq_dsn: str) -> None:
    """Rows another claim has taken but not committed are busy: a claim takes the rows behind them
    (it tries at most two busy ones first, and tries the rest only when it would come up short).
    Once that claim rolls back, its rows are no longer busy (their xmax is older than any new
    snapshot's xmin) and the next claims take them first, in order."""
    ids = pgq_queue.enqueue_many([JobSpec("k", queue="q") for _ in range(40)])
    with psycopg.connect(pgq_dsn) as holder:
        held = _ops.run_sync(holder, _ops.claim(worker="h", queues=["q"], kinds=None, limit=20, lease=60),
                             own_transaction=True)
        assert [c.id for c in held] == ids[:20]
        assert [c.id for c in _claim(pgq_dsn, ["q"], limit=5)] == ids[20:25]  # nothing waits for the holder
        (holder_xid,) = holder.execute("SELECT pg_current_xact_id()::text::bigint").fetchone() or (None,)
        holder.rollback()
    # Its rows stop being busy once every snapshot's xmin has passed the holder: the xmin is the
    # cluster's, so a transaction of another database (a test running beside this one) holds it back.
    with psycopg.connect(pgq_dsn, autocommit=True) as conn:
        for _ in range(500):
            row = conn.execute("SELECT pg_snapshot_xmin(pg_current_snapshot())::text::bigint").fetchone()
            if row is not None and holder_xid is not None and row[0] > holder_xid:
                break
            time.sleep(0.02)
        else:
            pytest.fail("another transaction of this cluster stayed open for 10 s")
    assert [c.id for c in _claim(pgq_dsn, ["q"], limit=5)] == ids[:5]
    assert [c.id for c in _claim(pgq_dsn, ["q"], limit=5)] == ids[5:10]
    rest = _claim(pgq_dsn, ["q"], limit=100)
    assert [c.id for c in rest] == ids[10:20] + ids[25:]  # every job claimed once


def test_rows_a_producer_holds_for_key_share_are_still_claimed_in_one_claim(pgq_queue: Queue, pgq_dsn: str) -> None:
    """A producer's pgq.enqueue_after in a transaction left open holds its parents FOR KEY SHARE:
    busy rows that a claim may still take. A claim asking for all of them gets all of them (its
    second scan tries every busy row), and one asking for fewer gets the oldest first."""
    parents = pgq_queue.enqueue_many([JobSpec("k", queue="q") for _ in range(10)])
    with psycopg.connect(pgq_dsn) as producer:
        pgq_queue.enqueue("child", queue="q", depends_on=parents, conn=producer)
        assert [c.id for c in _claim(pgq_dsn, ["q"], limit=2)] == parents[:2]
        assert [c.id for c in _claim(pgq_dsn, ["q"], limit=100)] == parents[2:]
        producer.rollback()
