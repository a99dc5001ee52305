"""Acknowledgements and heartbeats never wait on a row lock another transaction holds (a producer's
open transaction after an enqueue with `depends_on`, a watermark or Queue.wait): the other rows of the
batch go through, the locked one is reported busy (not lost), and goes through once the lock is gone."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

import psycopg
import pytest

from pgq import JobSpec, Queue, _ops
from pgq.errors import LeaseLost
from pgq.models import Claim

from .conftest import SQL

Batch = Callable[[list[Claim], set[int] | None, bool], _ops.Operation[Any]]

BATCHES: dict[str, Batch] = {
    "heartbeat": lambda cs, busy, lost: _ops.heartbeat([(c, 120.0) for c in cs], raise_lost=lost, busy=busy),
    "complete": lambda cs, busy, lost: _ops.complete([(c, None, None) for c in cs], raise_lost=lost, busy=busy),
    "fail": lambda cs, busy, lost: _ops.fail([(c, "e", None, False) for c in cs], raise_lost=lost, busy=busy),
    "snooze": lambda cs, busy, lost: _ops.snooze([(c, 0.0) for c in cs], raise_lost=lost, busy=busy),
}
CHANGED: dict[str, Callable[[dict[str, Any]], bool]] = {
    "heartbeat": lambda row: row["status"] == "running" and row["lease_expires_at"] > row["now"] + 90,
    "complete": lambda row: row["status"] == "succeeded",
    "fail": lambda row: row["status"] == "queued" and row["last_error"] == "e",
    "snooze": lambda row: row["status"] == "queued" and row["last_error"] is None,
}


def _rows(db: SQL, ids: list[int]) -> dict[int, dict[str, Any]]:
    rows = db("SELECT id, status::text AS status, last_error, extract(epoch FROM lease_expires_at) AS lease_expires_at,"
              " extract(epoch FROM now()) AS now FROM pgq.jobs WHERE id = ANY(%s)", [ids])
    return {r["id"]: r for r in rows}


def _run(dsn: str, op: _ops.Operation[Any], *, lock_timeout: str = "0") -> Any:
    # A lock_timeout turns a statement that waits where it must not into an error (not a hang).
    with psycopg.connect(dsn, autocommit=True, options=f"-c lock_timeout={lock_timeout}") as conn:
        return _ops.run_sync(conn, op, own_transaction=True)


def _lock_waiters(db: SQL) -> int:
    return int(db("SELECT count(*) AS n FROM pg_stat_activity WHERE datname = current_database()"
                  " AND wait_event_type = 'Lock'")[0]["n"])


@pytest.mark.parametrize("name", sorted(BATCHES))
def test_batch_skips_a_row_locked_by_another_transaction_and_reports_it_busy(
    pgq_queue: Queue, pgq_dsn: str, db: SQL, name: str
) -> None:
    pgq_queue.enqueue_many([JobSpec("k", queue="q") for _ in range(4)])
    claims = sorted(pgq_queue.claim(worker="w", queues=["q"], limit=4, lease=60), key=lambda c: c.id)
    held, gone = claims[1], claims[3]
    db("UPDATE pgq.jobs SET lease_token = gen_random_uuid() WHERE id = %s", [gone.id])  # a lost lease
    others = [c.id for c in claims if c not in (held, gone)]
    with psycopg.connect(pgq_dsn) as producer:
        producer.execute("SELECT 1 FROM pgq.jobs WHERE id = %s FOR NO KEY UPDATE", [held.id])
        busy: set[int] = set()
        with pytest.raises(LeaseLost) as lost:
            _run(pgq_dsn, BATCHES[name](claims, busy, True), lock_timeout="5s")
        assert lost.value.job_ids == [gone.id]
        assert busy == {held.id}
        rows = _rows(db, [c.id for c in claims])
        assert all(CHANGED[name](rows[i]) for i in others), rows
        assert rows[held.id]["status"] == "running" and not CHANGED[name](rows[held.id])
        assert rows[held.id]["lease_expires_at"] < rows[held.id]["now"] + 61
    # The producer committed: the busy row now goes through.
    busy = set()
    done = _run(pgq_dsn, BATCHES[name]([held], busy, True))
    assert set(done) == {held.id} and busy == set()
    assert CHANGED[name](_rows(db, [held.id])[held.id])


@pytest.mark.parametrize("name", sorted(BATCHES))
def test_batch_without_busy_set_waits_for_the_locked_row_and_changes_it(
    pgq_queue: Queue, pgq_dsn: str, db: SQL, name: str
) -> None:
    """The public API (no `busy` set) keeps its contract: one statement that waits for a locked row
    (locking the batch in id order, so never in a circle with another statement that does) and
    applies the whole batch once the lock is released."""
    pgq_queue.enqueue_many([JobSpec("k", queue="q") for _ in range(3)])
    claims = sorted(pgq_queue.claim(worker="w", queues=["q"], limit=3, lease=60), key=lambda c: c.id)
    held = claims[0]
    results: list[Any] = []
    with psycopg.connect(pgq_dsn) as producer:
        producer.execute("SELECT 1 FROM pgq.jobs WHERE id = %s FOR NO KEY UPDATE", [held.id])
        thread = threading.Thread(target=lambda: results.append(_run(pgq_dsn, BATCHES[name](claims, None, True))))
        thread.start()
        while _lock_waiters(db) == 0:  # the statement waits for the held row
            assert thread.is_alive()
            time.sleep(0.01)
        rows = _rows(db, [c.id for c in claims])
        assert not any(CHANGED[name](rows[c.id]) for c in claims), rows  # one statement: nothing yet
    thread.join(30)
    assert not thread.is_alive()
    assert set(results[0]) == {c.id for c in claims}
    assert all(CHANGED[name](r) for r in _rows(db, [c.id for c in claims]).values())


def test_waiting_heartbeat_runs_the_lease_from_when_it_got_the_row(pgq_queue: Queue, pgq_dsn: str, db: SQL) -> None:
    """A patient renewal that waited for a lock renews from the clock when it got the row."""
    pgq_queue.enqueue("k", queue="q")
    [claim] = pgq_queue.claim(worker="w", queues=["q"], limit=1, lease=60)
    results: list[Any] = []
    with psycopg.connect(pgq_dsn) as producer:
        producer.execute("SELECT 1 FROM pgq.jobs WHERE id = %s FOR NO KEY UPDATE", [claim.id])
        op = _ops.heartbeat([(claim, 5.0)], raise_lost=True, busy=set(), wait=True)
        thread = threading.Thread(target=lambda: results.append(_run(pgq_dsn, op)))
        thread.start()
        while _lock_waiters(db) == 0:
            time.sleep(0.01)
        db("SELECT pg_sleep(0.2)")
        released = db("SELECT clock_timestamp() AS t")[0]["t"]
    thread.join(30)
    assert results == [{claim.id}]
    expires = db("SELECT lease_expires_at FROM pgq.jobs WHERE id = %s", [claim.id])[0]["lease_expires_at"]
    assert (expires - released).total_seconds() >= 5.0 - 0.001


def test_rescue_skips_a_row_a_waiting_heartbeat_queues_for(pgq_queue: Queue, pgq_dsn: str, db: SQL) -> None:
    """While a patient renewal waits behind a producer, the rescue leaves the expired row alone; when
    the producer commits, the renewal gets the row first and the job keeps running."""
    pgq_queue.enqueue("k", queue="q")
    [claim] = pgq_queue.claim(worker="w", queues=["q"], limit=1, lease=60)
    db("UPDATE pgq.jobs SET lease_expires_at = now() - interval '1 second' WHERE id = %s", [claim.id])
    results: list[Any] = []
    with psycopg.connect(pgq_dsn) as producer:
        producer.execute("SELECT 1 FROM pgq.jobs WHERE id = %s FOR NO KEY UPDATE", [claim.id])
        op = _ops.heartbeat([(claim, 60.0)], raise_lost=True, busy=set(), wait=True)
        thread = threading.Thread(target=lambda: results.append(_run(pgq_dsn, op)))
        thread.start()
        while _lock_waiters(db) == 0:
            time.sleep(0.01)
        assert pgq_queue.rescue_expired() == []
    thread.join(30)
    assert results == [{claim.id}]
    assert pgq_queue.rescue_expired() == []
    assert _rows(db, [claim.id])[claim.id]["status"] == "running"


def test_heartbeat_in_descending_order_never_deadlocks_with_a_watermark_enqueue(pgq_queue: Queue,
                                                                                pgq_dsn: str) -> None:
    """A watermark enqueue locks the running jobs of its keys in id order; a heartbeat of the same
    jobs sent in descending id order locked them in that order and deadlocked with it (2 runs of 2).
    It now locks in id order, skipping what the enqueue holds: 20 races, no deadlock, no lost lease."""
    n = 1000
    keys = [f"doc:{i}" for i in range(n)]
    pgq_queue.enqueue_many([JobSpec("k", queue="q", dedupe_key=k, watermark=1) for k in keys])
    claims = sorted(pgq_queue.claim(worker="w", queues=["q"], limit=n, lease=300), key=lambda c: -c.id)
    assert len(claims) == n
    for race in range(20):
        errors, renewed, ids = _race_heartbeat_with_enqueue(pgq_dsn, claims, keys, race + 2)
        assert not errors, f"race {race}: {errors!r}"
        assert renewed == [{c.id for c in claims}]
        assert sorted(ids[0]) == sorted(c.id for c in claims)  # the running jobs took the watermark


def _race_heartbeat_with_enqueue(dsn: str, claims: list[Claim], keys: list[str], watermark: int
                                 ) -> tuple[list[BaseException], list[set[int]], list[list[int]]]:
    """Start a heartbeat of `claims` (in their order) and an enqueue of `keys` at `watermark` at once;
    return the errors, what the heartbeat renewed and the ids the enqueue answered."""
    barrier = threading.Barrier(2)
    errors: list[BaseException] = []
    renewed: list[set[int]] = []
    ids: list[list[int]] = []

    def beat() -> None:
        try:
            barrier.wait()
            renewed.append(_run(dsn, _ops.heartbeat([(c, 300.0) for c in claims], raise_lost=True)))
        except BaseException as exc:
            errors.append(exc)

    def enqueue() -> None:
        try:
            with Queue(dsn, max_size=1) as producer:
                barrier.wait()
                ids.append(producer.enqueue_many(
                    [JobSpec("k", queue="q", dedupe_key=k, watermark=watermark) for k in keys]))
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=beat), threading.Thread(target=enqueue)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    return errors, renewed, ids


@pytest.mark.parametrize("name", sorted(BATCHES))
def test_worker_batch_with_a_held_row_reports_it_busy_without_waiting_for_the_lock(
    pgq_queue: Queue, pgq_dsn: str, db: SQL, name: str
) -> None:
    """The worker's first try is one call of a SECURITY DEFINER function (revision 0011) that sets a
    50 ms lock_timeout inside itself for its own transaction: in a session that would otherwise wait
    for a lock forever, a held row still comes back busy while the lock is held (not a hang), and the
    setting does not outlive that transaction."""
    pgq_queue.enqueue_many([JobSpec("k", queue="q") for _ in range(3)])
    claims = sorted(pgq_queue.claim(worker="w", queues=["q"], limit=3, lease=60), key=lambda c: c.id)
    held = claims[1]
    busy: set[int] = set()
    results: list[Any] = []
    with psycopg.connect(pgq_dsn, autocommit=True, options="-c lock_timeout=0") as worker:
        with psycopg.connect(pgq_dsn) as producer:  # left (its lock released) before the worker's end
            producer.execute("SELECT 1 FROM pgq.jobs WHERE id = %s FOR NO KEY UPDATE", [held.id])
            thread = threading.Thread(target=lambda: results.append(
                _ops.run_sync(worker, BATCHES[name](claims, busy, False), own_transaction=True)))
            thread.start()
            thread.join(60)  # a guard that did not apply would wait here as long as the producer holds the row
            waited = thread.is_alive()
        thread.join()
        assert not waited, "the acknowledgement waited for the held row"
        assert busy == {held.id}
        assert set(results[0]) == {c.id for c in claims} - {held.id}
        rows = _rows(db, [c.id for c in claims])
        assert not CHANGED[name](rows[held.id]) and all(CHANGED[name](rows[c.id]) for c in claims if c != held)
        assert worker.execute("SHOW lock_timeout").fetchone() == ("0",)
