"""Revision 0020 (issue 40) on a database holding the rows the attacks of revision 0018's days left:
the upgrade brings them inside the new bounds, so that the prune, the rescue and every listing work
again, prunes the tails of purged sequences, and its downgrade drops what it added."""

from __future__ import annotations

from typing import Any

import psycopg
import pytest

import pgq
from pgq import migrate


def query(dsn: str, statement: str, *params: Any) -> list[tuple[Any, ...]]:
    """Rows of one statement (none for a command), over a connection of its own."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        cur = conn.execute(statement.encode(), params or None)
        return cur.fetchall() if cur.description else []


OBJECTS = ("SELECT to_regprocedure('pgq.leases_lost(bigint[], uuid[])') IS NOT NULL,"
           "       to_regprocedure('pgq.concurrency_limit_set(text, integer)') IS NOT NULL,"
           "       to_regprocedure('pgq.sequence_tail_prune()') IS NOT NULL,"
           "       (SELECT count(DISTINCT conname) FROM pg_constraint"  # one per partition since 0033
           "        WHERE conname IN ('jobs_run_at_bounded', 'jobs_lease_bounded', 'workers_lease_s_bounded',"
           "                          'workers_refresh_s_bounded'))")


def _hostile_rows(dsn: str) -> dict[str, int]:
    """At revision 0018, what a producer's INSERT and a worker's calls could store."""
    ids = {}
    for name, run_at in (("late", "infinity"), ("early", "-infinity"), ("far", "9000-01-01")):
        [(ids[name],)] = query(dsn, f"INSERT INTO pgq.jobs (kind, queue, run_at) VALUES ('k', 'q', '{run_at}') "
                                    "RETURNING id")
    [(ids["held"],)] = query(dsn, "INSERT INTO pgq.jobs (kind, queue) VALUES ('k', 'held') RETURNING id")
    query(dsn, "SELECT * FROM pgq.claim(ARRAY['held'], NULL, 1, 60, 'w')")
    query(dsn, "UPDATE pgq.jobs SET lease_expires_at = 'infinity' WHERE id = %s", ids["held"])
    query(dsn, "SELECT * FROM pgq.worker_register('w', 'h', 1, NULL, '{k}', 1, 1e12, 'NaN', 'x')")
    query(dsn, "INSERT INTO pgq.rate_limit_starts (kind, at, starts) VALUES ('k', 'infinity', 1), ('k', now(), 1)")
    [(ids["tail"],)] = query(dsn, "SELECT pgq.enqueue('k', '{}', 'seq', sequence_key => 's')")
    query(dsn, "UPDATE pgq.jobs SET status = 'succeeded', finished_at = now() WHERE id = %s", ids["tail"])
    query(dsn, "DELETE FROM pgq.jobs WHERE id = %s", ids["tail"])
    return ids


def test_0020_repairs_hostile_rows_so_maintenance_and_reads_work_again(pgq_dsn: str) -> None:
    migrate.downgrade(pgq_dsn, "0018")
    assert query(pgq_dsn, OBJECTS) == [(False, False, False, 0)]
    ids = _hostile_rows(pgq_dsn)
    # The findings, reproduced at 0018: the prune raises, and no client can list the jobs.
    with pytest.raises(psycopg.errors.DatetimeFieldOverflow):
        query(pgq_dsn, "SELECT pgq.worker_prune()")
    with pytest.raises(psycopg.DataError), psycopg.connect(pgq_dsn) as conn:
        conn.execute("SELECT run_at FROM pgq.jobs").fetchall()
    assert query(pgq_dsn, "SELECT count(*) FROM pgq.sequence_tails") == [(1,)]

    migrate.upgrade(pgq_dsn)

    assert query(pgq_dsn, OBJECTS) == [(True, True, True, 4)]
    with pgq.Queue(pgq_dsn) as q:
        jobs = {j.id: j for j in q.list(limit=10)}
        assert jobs[ids["early"]].run_at == jobs[ids["early"]].created_at
        [(late_ok, far_ok)] = query(pgq_dsn, "SELECT bool_and(run_at <= now() + interval '36525 days') "
                                             "FILTER (WHERE id = %s), bool_and(run_at <= now() + interval "
                                             "'36525 days') FILTER (WHERE id = %s) FROM pgq.jobs",
                                    ids["late"], ids["far"])
        assert late_ok and far_ok
        assert jobs[ids["held"]].lease_expires_at is not None
        assert q.workers()[0].lease_s == 86400
    assert query(pgq_dsn, "SELECT pgq.worker_prune()") == [(0,)]
    assert query(pgq_dsn, "SELECT count(*) FROM pgq.rate_limit_starts") == [(1,)]
    assert query(pgq_dsn, "SELECT count(*) FROM pgq.sequence_tails") == [(0,)]

    migrate.downgrade(pgq_dsn, "0018")
    assert query(pgq_dsn, OBJECTS) == [(False, False, False, 0)]
    assert query(pgq_dsn, "SELECT count(*) FROM pg_constraint WHERE conname IN "
                          "('workers_lease_s_check', 'workers_refresh_s_check')") == [(2,)]
    migrate.upgrade(pgq_dsn)
    assert query(pgq_dsn, OBJECTS) == [(True, True, True, 4)]
