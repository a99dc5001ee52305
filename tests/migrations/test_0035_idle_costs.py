"""Revision 0035: the idle worker's query is pgq.next_run_at over the live partition, pgq.settle reads
pgq.jobs only when something may be left to settle, acknowledgements insert into the history unsorted,
and the live partition's CHECK of finished_at is `finished_at IS NULL`. Its downgrade restores 0034's
functions and CHECK and drops pgq.next_run_at; both directions keep every job."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import psycopg
import pytest

import pgq
from pgq import migrate

SQL = Callable[..., list[dict[str, Any]]]

CHECK = ("SELECT pg_get_constraintdef(c.oid) AS d FROM pg_constraint c "
         "WHERE c.conrelid = 'pgq.live_jobs'::regclass AND c.conname = 'jobs_finished_at_iff_finished'")
HAS_NEXT = "SELECT to_regprocedure('pgq.next_run_at(text[])') IS NOT NULL AS has"


def _jobs(db: SQL) -> list[dict[str, Any]]:
    return db("SELECT id, queue, status::text AS status FROM pgq.jobs ORDER BY id")


def test_0035_up_and_down_keep_the_jobs_and_swap_the_check_and_function(pgq_dsn: str, db: SQL) -> None:
    db("INSERT INTO pgq.jobs (queue, kind, run_at) VALUES ('q', 'k', now() + interval '1 hour'), ('q', 'k', now())")
    db("INSERT INTO pgq.jobs (queue, kind, status, attempts, finished_at) VALUES ('q', 'k', 'succeeded', 1, now())")
    before = _jobs(db)
    assert db(CHECK) == [{"d": "CHECK ((finished_at IS NULL)) NOT VALID"}]
    assert db(HAS_NEXT) == [{"has": True}]
    assert db("SELECT pgq.next_run_at(ARRAY['q']) <= 0 AS due")[0]["due"]
    # The CHECK still refuses what it refused: a live job with a finish time.
    with pytest.raises(psycopg.errors.CheckViolation, match="jobs_finished_at_iff_finished"):
        db("INSERT INTO pgq.jobs (queue, kind, finished_at) VALUES ('q', 'k', now())")

    migrate.downgrade(pgq_dsn, "0034")
    try:
        assert _jobs(db) == before
        assert db(HAS_NEXT) == [{"has": False}]
        [check] = db(CHECK)
        assert "succeeded" in check["d"] and "finished_at IS NOT NULL" in check["d"]
        with pytest.raises(psycopg.errors.CheckViolation, match="jobs_finished_at_iff_finished"):
            db("INSERT INTO pgq.jobs (queue, kind, finished_at) VALUES ('q', 'k', now())")
        assert db("SELECT pgq.settle(100) AS n") == [{"n": 0}]
    finally:
        migrate.upgrade(pgq_dsn)
    assert _jobs(db) == before
    assert db(CHECK) == [{"d": "CHECK ((finished_at IS NULL)) NOT VALID"}]
    assert db("SELECT pgq.settle(100) AS n") == [{"n": 0}]


def test_settle_still_settles_each_kind_of_work_after_its_guards(pgq_dsn: str, db: SQL) -> None:
    """Each guarded read runs when its table has a row: a finished parent whose finish released
    nothing (its triggers off, as when the edge committed after the finish), a wait on a finished job,
    and a wait on a job that is gone."""
    with pgq.Queue(pgq_dsn) as q:
        parent = q.enqueue("k", queue="q")
        child = q.enqueue("k", queue="q", depends_on=[parent])
    gone = parent + 10**9
    db("SET session_replication_role = replica")  # the finish's own release and notice do not run
    db("UPDATE pgq.jobs SET status = 'succeeded', attempts = 1, finished_at = now() WHERE id = %s", (parent,))
    db("RESET session_replication_role")
    db("INSERT INTO pgq.awaited_jobs (job_id) VALUES (%s), (%s)", (parent, gone))
    assert db("SELECT status::text AS s FROM pgq.jobs WHERE id = %s", (child,)) == [{"s": "waiting"}]
    with psycopg.connect(pgq_dsn, autocommit=True) as listener:
        listener.execute(b"LISTEN pgq_finished")
        assert db("SELECT pgq.settle(100) AS n")[0]["n"] >= 2
        told = sorted(int(n.payload) for n in listener.notifies(timeout=5, stop_after=2))
    assert told == sorted([parent, gone])
    assert db("SELECT status::text AS s FROM pgq.jobs WHERE id = %s", (child,)) == [{"s": "queued"}]
    assert db("SELECT count(*) AS n FROM pgq.awaited_jobs") == [{"n": 0}]
    assert db("SELECT count(*) AS n FROM pgq.job_dependencies WHERE parent_outcome IS NULL") == [{"n": 0}]
    assert db("SELECT pgq.settle(100) AS n") == [{"n": 0}]
