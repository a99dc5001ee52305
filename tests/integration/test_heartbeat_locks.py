"""A heartbeat locks only the rows whose lease it holds (revision 0034). A worker that lost a lease
(its job rescued and claimed again by another worker) still sends the old token until it learns of
the loss; the row is the new owner's, and the heartbeat neither locks it nor waits for it. Rows
under the tokens sent are locked and renewed as before, waiting for a lock another transaction
holds up to the lock_timeout given (pgq.heartbeat) or for as long as it takes (pgq.heartbeat_skip
with wait)."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import psycopg
import pytest

from pgq import JobSpec, Queue

from .conftest import SQL, expire_lease

CLAIM = "SELECT id, lease_token::text AS token FROM pgq.claim(ARRAY['q'], NULL, %s, 60, 'w') ORDER BY id"
ARGS = "%s::bigint[], %s::uuid[], array_fill(600::float8, ARRAY[3]), array_fill(NULL::jsonb, ARRAY[3])"
BEATS = {
    "heartbeat": f"SELECT h.id FROM pgq.heartbeat({ARGS}, %s) h ORDER BY h.id",
    # The patient renewal: it waits for every lock, with no timeout of its own.
    "heartbeat_skip": f"SELECT h.id FROM pgq.heartbeat_skip({ARGS}, true) h ORDER BY h.id",
}
LEASES = "SELECT id, lease_token::text AS token, lease_expires_at FROM pgq.jobs ORDER BY id"


def _claimed_again(db: SQL, queue: Queue) -> tuple[list[int], str]:
    """Three jobs claimed under one token, the middle one's lease since lost: rescued after expiry and
    claimed again, under another token. Returns the ids and the first claim's token."""
    queue.enqueue_many([JobSpec("k", queue="q") for _ in range(3)])
    first = db(CLAIM, (3,))
    ids = [r["id"] for r in first]
    expire_lease(db, ids[1])
    assert [r["id"] for r in db("SELECT id FROM pgq.rescue(10)")] == [ids[1]]
    [again] = db(CLAIM, (1,))
    assert again["id"] == ids[1] and again["token"] != first[0]["token"]
    return ids, first[0]["token"]


@contextmanager
def _holding(dsn: str, job_id: int) -> Iterator[psycopg.Connection[Any]]:
    """Another transaction holding the row of `job_id` FOR UPDATE (its claimer, a cancel, ...)."""
    with psycopg.connect(dsn) as conn:
        conn.execute(b"SELECT 1 FROM pgq.live_jobs WHERE id = %s FOR UPDATE", (job_id,))
        yield conn
        conn.rollback()


def _beat(dsn: str, name: str, ids: list[int], token: str, lock_timeout: str | None = "200ms") -> list[int]:
    # A statement_timeout turns a heartbeat that waits where it must not into an error, not a hang.
    with psycopg.connect(dsn, autocommit=True, options="-c statement_timeout=5s") as conn:
        params: tuple[Any, ...] = (ids, [token] * 3) + ((lock_timeout,) if name == "heartbeat" else ())
        return [r[0] for r in conn.execute(BEATS[name].encode(), params).fetchall()]


@pytest.mark.parametrize("name", sorted(BEATS))
def test_a_lost_lease_is_neither_locked_nor_waited_for(pgq_queue: Queue, pgq_dsn: str, db: SQL, name: str) -> None:
    ids, token = _claimed_again(db, pgq_queue)
    before = {r["id"]: r for r in db(LEASES)}
    with _holding(pgq_dsn, ids[1]):  # the new owner holds its row
        assert _beat(pgq_dsn, name, ids, token) == [ids[0], ids[2]]
    after = {r["id"]: r for r in db(LEASES)}
    assert after[ids[1]] == before[ids[1]]  # the new owner's lease untouched
    assert all(after[i]["lease_expires_at"] > before[i]["lease_expires_at"] for i in (ids[0], ids[2]))


def test_a_held_lease_locked_elsewhere_is_waited_for_up_to_the_lock_timeout(pgq_queue: Queue, pgq_dsn: str,
                                                                           db: SQL) -> None:
    ids, token = _claimed_again(db, pgq_queue)
    before = db(LEASES)
    with _holding(pgq_dsn, ids[0]), pytest.raises(psycopg.errors.LockNotAvailable):
        _beat(pgq_dsn, "heartbeat", ids, token, lock_timeout="100ms")
    assert db(LEASES) == before  # nothing renewed: the statement failed as a whole


def test_a_held_lease_is_renewed_once_the_other_transaction_lets_go(pgq_queue: Queue, pgq_dsn: str,
                                                                  db: SQL) -> None:
    ids, token = _claimed_again(db, pgq_queue)
    got: list[list[int]] = []
    with _holding(pgq_dsn, ids[2]) as holder:
        beat = threading.Thread(target=lambda: got.append(_beat(pgq_dsn, "heartbeat", ids, token, lock_timeout=None)))
        beat.start()
        waiting = ("SELECT count(*) AS n FROM pg_stat_activity WHERE datname = current_database() "
                   "AND wait_event_type = 'Lock' AND query LIKE '%%pgq.heartbeat%%'")
        for _ in range(200):
            if db(waiting)[0]["n"] == 1:
                break
            threading.Event().wait(0.025)
        else:
            pytest.fail("the heartbeat never waited for the held row")
        holder.commit()
    beat.join(10)
    assert got == [[ids[0], ids[2]]]
