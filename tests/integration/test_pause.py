"""Pausing and resuming queues through the client and the SQL functions: claims skip a paused queue,
enqueue still works, and the state shows in pgq.queue_stats."""

from __future__ import annotations

import threading
import time

import psycopg
import pytest

from pgq import InvalidJob, Queue


def test_a_paused_queue_is_not_claimed_until_resumed(pgq_queue: Queue) -> None:
    pgq_queue.enqueue("k", queue="mail")
    pgq_queue.enqueue("k", queue="other")
    assert pgq_queue.pause("mail") is True
    assert pgq_queue.pause("mail") is False  # idempotent

    pgq_queue.enqueue("k", queue="mail")  # enqueue still works
    assert pgq_queue.claim(worker="w", queues=["mail"], limit=10) == []  # the one-queue fast claim
    claimed = pgq_queue.claim(worker="w", queues=None, limit=10)  # the general claim, every queue
    assert [c.job.queue for c in claimed] == ["other"]
    assert pgq_queue.claim(worker="w", queues=["mail", "other"], limit=10) == []

    stats = {r["queue"]: r for r in pgq_queue.stats()}
    assert stats["mail"]["paused"] is True and stats["mail"]["ready"] == 2
    assert stats["mail"]["paused_at"] is not None
    assert stats["other"]["paused"] is False and stats["other"]["paused_at"] is None

    assert pgq_queue.resume("mail") is True
    assert pgq_queue.resume("mail") is False
    assert len(pgq_queue.claim(worker="w", queues=["mail"], limit=10)) == 2


def test_a_paused_queue_without_jobs_is_listed(pgq_queue: Queue) -> None:
    pgq_queue.pause("empty")
    [row] = pgq_queue.stats()
    assert row["queue"] == "empty" and row["paused"] is True and row["ready"] == 0


@pytest.mark.parametrize("name", ["", None, 3])
def test_bad_queue_names_are_refused_before_any_write(pgq_queue: Queue, name: object) -> None:
    with pytest.raises(InvalidJob):
        pgq_queue.pause(name)  # type: ignore[arg-type]
    assert pgq_queue.stats() == []


def test_the_sql_functions_are_what_dbas_call(pgq_dsn: str, pgq_queue: Queue) -> None:
    with psycopg.connect(pgq_dsn, autocommit=True) as conn:
        assert conn.execute("SELECT pgq.pause('reports')").fetchone() == (True,)
        assert conn.execute("SELECT queue, paused FROM pgq.queue_stats").fetchall() == [("reports", True)]
        with pytest.raises(psycopg.errors.InvalidParameterValue):
            conn.execute("SELECT pgq.pause('')")
        conn.execute("LISTEN pgq")
        assert conn.execute("SELECT pgq.resume('reports')").fetchone() == (True,)
        # resume wakes idle workers: a notification on channel pgq naming the queue
        notes = [n.payload for n in conn.notifies(timeout=2, stop_after=1)]
        assert notes == ["reports"]


def test_pause_waits_for_a_claim_in_flight_and_gives_up_on_a_hung_one(pgq_dsn: str, pgq_queue: Queue) -> None:
    # A claim transaction that read pgq.paused_queues and has not committed (a worker frozen mid-claim)
    # holds the lock pause needs: pause waits, then fails after its lock timeout with nothing written.
    pgq_queue.enqueue("k", queue="mail")
    hung = psycopg.connect(pgq_dsn)
    hung.execute("SELECT 1 FROM pgq.paused_queues")
    started = time.monotonic()
    with pytest.raises(psycopg.errors.LockNotAvailable):
        pgq_queue.pause("mail")
    assert 4 < time.monotonic() - started < 15
    assert pgq_queue.stats()[0]["paused"] is False

    # Once the claim commits, a waiting pause goes through.
    result: list[bool] = []
    pauser = threading.Thread(target=lambda: result.append(pgq_queue.pause("mail")))
    pauser.start()
    with psycopg.connect(pgq_dsn, autocommit=True) as watch:  # until the pause waits on the claim's lock
        deadline = time.monotonic() + 10
        while watch.execute("SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
                            "AND wait_event_type = 'Lock'").fetchone() == (0,):
            assert time.monotonic() < deadline, "the pause never waited for the claim in flight"
            time.sleep(0.01)
    assert result == []  # still waiting for the claim in flight
    hung.commit()
    pauser.join(10)
    hung.close()
    assert result == [True]
