"""Revision 0026: the counts of finished jobs count the history a database already has (the first
pass starts at its oldest finished job), keep the counts of deleted jobs, and its downgrade drops the
counts, the trigger and the function while the jobs stay; upgrading again counts them again."""

from __future__ import annotations

from typing import Any

import psycopg
import pytest

from pgq import migrate


def _one(dsn: str, sql: str) -> Any:
    with psycopg.connect(dsn, autocommit=True) as conn:
        cur = conn.execute(sql.encode())
        row = cur.fetchone() if cur.description else None
        return None if row is None else row[0]


FINISHED = ("INSERT INTO pgq.jobs (kind, queue, status, attempts, finished_at) "
            "SELECT 'k', 'q', 'succeeded', 1, now() - (g - 0.5) * interval '1 hour' FROM generate_series(1, 30) g")
PASS = "SELECT pgq.count_finished('2 minutes', '400 days')"
KEPT = "SELECT coalesce(sum(jobs), 0) FROM pgq.finished_counts"


def test_0026_counts_the_history_and_its_downgrade_keeps_the_jobs(pgq_empty_dsn: str) -> None:
    migrate.upgrade(pgq_empty_dsn, "0023")
    _one(pgq_empty_dsn, FINISHED)
    migrate.upgrade(pgq_empty_dsn, "0026")
    assert _one(pgq_empty_dsn, PASS) is not None and _one(pgq_empty_dsn, KEPT) == 30
    _one(pgq_empty_dsn, "DELETE FROM pgq.jobs WHERE finished_at < now() - interval '20 hours'")
    _one(pgq_empty_dsn, PASS)
    assert _one(pgq_empty_dsn, KEPT) == 30

    migrate.downgrade(pgq_empty_dsn, "0023")
    assert _one(pgq_empty_dsn, "SELECT count(*) FROM pgq.jobs") == 20
    with pytest.raises(psycopg.errors.UndefinedFunction):
        _one(pgq_empty_dsn, PASS)
    _one(pgq_empty_dsn, "DELETE FROM pgq.jobs WHERE finished_at < now() - interval '10 hours'")  # no trigger left
    migrate.upgrade(pgq_empty_dsn)
    _one(pgq_empty_dsn, PASS)
    assert _one(pgq_empty_dsn, KEPT) == 10
