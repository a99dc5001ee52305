"""Every way a running job gets cancelled tells its worker once (revision 0034): pgq's own cancels
(pgq.cancel, pgq.cancel_core, the bulk cancel) notify pgq_cancel themselves; an UPDATE of pgq.jobs,
which moves the row to pgq.finished_jobs as a delete and an insert, notifies through the table's
triggers, whether it clears the lease or leaves it, and so does a delete and insert written by hand
that keeps the lease. Queued jobs cancelled alongside send nothing; neither does a running job that
fails or succeeds."""

from __future__ import annotations

import hashlib

import psycopg
import pytest

from pgq import JobSpec, Queue

from .conftest import SQL

CLAIM = "SELECT id, lease_token::text AS token FROM pgq.claim(ARRAY['q'], NULL, %s, 60, 'w') ORDER BY id"
END = "end of test"

# Each cancels the jobs of `ids` (running ones and a queued one) its own way.
HAND_MOVE = """
    WITH gone AS (DELETE FROM pgq.live_jobs WHERE id = ANY(%s) RETURNING *)
    INSERT INTO pgq.finished_jobs
    SELECT r.* FROM gone g,
           jsonb_populate_record(NULL::pgq.finished_jobs,
                                 to_jsonb(g) || jsonb_build_object('status', 'cancelled', 'finished_at', now())) r
"""
WAYS = {
    "update keeping the lease": "UPDATE pgq.jobs SET status = 'cancelled', finished_at = now() WHERE id = ANY(%s)",
    "update clearing the lease": ("UPDATE pgq.jobs SET status = 'cancelled', finished_at = now(), lease_token = NULL, "
                                  "lease_expires_at = NULL WHERE id = ANY(%s)"),
    "delete and insert by hand": HAND_MOVE,
    "pgq.cancel": "SELECT pgq.cancel(i, 'dba') FROM unnest(%s::bigint[]) i",
    "pgq.cancel_core": "SELECT c.id FROM unnest(%s::bigint[]) i, pgq.cancel_core(i) c",
}


def _notices_until_end(listener: psycopg.Connection[tuple[object, ...]]) -> list[str]:
    """The pgq_cancel payloads `listener` got before END (sent last, in a transaction of its own:
    notices arrive in commit order)."""
    got: list[str] = []
    for note in listener.notifies(timeout=10):
        if note.payload == END:
            return got
        got.append(note.payload)
    pytest.fail(f"no end marker within 10 s; got {got}")


def _md5(token: str) -> str:
    return hashlib.md5(token.encode()).hexdigest()


def _setup(db: SQL, queue: Queue) -> tuple[list[dict[str, str]], int]:
    """Four running jobs of one claim (one token), and a queued one; the first and third running
    jobs and the queued one are of kind "doomed"."""
    queue.enqueue_many([JobSpec(kind, queue="q") for kind in ("doomed", "k", "doomed", "k", "doomed")])
    running = db(CLAIM, (4,))
    [queued] = db("SELECT id FROM pgq.jobs WHERE status = 'queued'")
    return running, queued["id"]


@pytest.mark.parametrize("way", [*sorted(WAYS), "bulk cancel"])
def test_each_way_to_cancel_running_jobs_tells_their_worker_once(pgq_queue: Queue, pgq_dsn: str, db: SQL,
                                                                 way: str) -> None:
    running, queued = _setup(db, pgq_queue)
    cancel = [running[0]["id"], running[2]["id"], queued]
    with psycopg.connect(pgq_dsn, autocommit=True) as listener:
        listener.execute(b"LISTEN pgq_cancel")
        if way == "bulk cancel":  # sql/job_cancel_many.sql
            assert pgq_queue.cancel_where(kind="doomed", actor="dba").changed == 3
        else:
            db(WAYS[way], (cancel,))
        db("SELECT pg_notify('pgq_cancel', %s)", (END,))
        notices = _notices_until_end(listener)
    assert sorted(notices) == sorted(f"{r['id']}:{_md5(r['token'])}" for r in (running[0], running[2]))
    rows = db("SELECT id, status::text FROM pgq.jobs ORDER BY id")
    assert [r["status"] for r in rows] == ["cancelled", "running", "cancelled", "running", "cancelled"]


def test_updates_that_do_not_cancel_a_running_job_send_no_notice(pgq_queue: Queue, pgq_dsn: str, db: SQL) -> None:
    running, queued = _setup(db, pgq_queue)
    ids = [r["id"] for r in running]
    with psycopg.connect(pgq_dsn, autocommit=True) as listener:
        listener.execute(b"LISTEN pgq_cancel")
        db("UPDATE pgq.jobs SET priority = 3 WHERE id = ANY(%s)", ([*ids, queued],))
        db("UPDATE pgq.jobs SET status = 'failed', finished_at = now(), lease_token = NULL, lease_expires_at = NULL "
           "WHERE id = %s", (ids[0],))
        db("UPDATE pgq.jobs SET status = 'succeeded', finished_at = now() WHERE id = %s", (ids[1],))
        db("UPDATE pgq.jobs SET status = 'cancelled', finished_at = now() WHERE id = %s", (queued,))
        # A cancelled job moved to another day (its row arrives in another partition) was no longer running.
        db("UPDATE pgq.jobs SET finished_at = now() + interval '1 day' WHERE id = %s", (queued,))
        db("SELECT pg_notify('pgq_cancel', %s)", (END,))
        assert _notices_until_end(listener) == []


def test_an_update_of_the_live_partition_cannot_cancel_a_job(pgq_queue: Queue, db: SQL) -> None:
    """The third way past pgq's functions, closed by the partition's bound: the row would have to leave
    pgq.live_jobs, which an UPDATE of the partition itself may not do."""
    running, _ = _setup(db, pgq_queue)
    with pytest.raises(psycopg.errors.CheckViolation, match="partition constraint"):
        db("UPDATE pgq.live_jobs SET status = 'cancelled', finished_at = now(), lease_token = NULL, "
           "lease_expires_at = NULL WHERE id = %s", (running[0]["id"],))
    assert db("SELECT status::text FROM pgq.jobs WHERE id = %s", (running[0]["id"],)) == [{"status": "running"}]
