"""Revision 0028 (issue #47) replaces the run_at and lease bounds of revision 0020 by the same
bounds in hours. On a small pgq.jobs it checks every row at once; on one over 64 MB it leaves them
NOT VALID, so that the upgrade does not hold the table locked for a scan: every new row version is
checked all the same, and a DBA validates them later without blocking writes."""

from __future__ import annotations

from typing import Any

import psycopg
import pytest

from pgq import migrate

BOUNDS = ("SELECT conname, convalidated, pg_get_constraintdef(oid) NOT LIKE '%%day%%' AS in_hours FROM pg_constraint "
          "WHERE conrelid = 'pgq.jobs'::regclass AND conname IN ('jobs_run_at_bounded', 'jobs_lease_bounded') "
          "ORDER BY conname")


def query(dsn: str, statement: str, *params: Any) -> list[tuple[Any, ...]]:
    """Rows of one statement (none for a command), over a connection of its own."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        cur = conn.execute(statement.encode(), params or None)
        return cur.fetchall() if cur.description else []


def _refused_and_accepted(dsn: str) -> None:
    """The bounds hold for new rows: a run_at 200 years ahead and a lease 2 days ahead are refused,
    100 years minus a day and a lease of 24 hours are taken."""
    with pytest.raises(psycopg.errors.CheckViolation):
        query(dsn, "INSERT INTO pgq.jobs (kind, run_at) VALUES ('k', now() + interval '200 years')")
    [(job,)] = query(dsn, "INSERT INTO pgq.jobs (kind, run_at) VALUES ('k', now() + interval '36525 days') "
                          "RETURNING id")
    query(dsn, "UPDATE pgq.jobs SET run_at = now() WHERE id = %s", job)
    query(dsn, "SELECT * FROM pgq.claim(ARRAY['default'], NULL, 1, 86400, 'w')")
    with pytest.raises(psycopg.errors.CheckViolation):
        query(dsn, "UPDATE pgq.jobs SET lease_expires_at = now() + interval '2 days' WHERE id = %s", job)
    query(dsn, "DELETE FROM pgq.jobs WHERE id = %s", job)


def test_0028_checks_a_small_table_at_once(pgq_dsn: str) -> None:
    migrate.downgrade(pgq_dsn, "0027")
    assert query(pgq_dsn, BOUNDS) == [("jobs_lease_bounded", True, False), ("jobs_run_at_bounded", True, False)]
    query(pgq_dsn, "INSERT INTO pgq.jobs (kind) SELECT 'k' FROM generate_series(1, 1000)")
    migrate.upgrade(pgq_dsn, "0028")
    assert query(pgq_dsn, BOUNDS) == [("jobs_lease_bounded", True, True), ("jobs_run_at_bounded", True, True)]
    _refused_and_accepted(pgq_dsn)


@pytest.mark.slow
def test_0028_leaves_the_bounds_of_a_large_table_to_validate_later(pgq_dsn: str) -> None:
    migrate.downgrade(pgq_dsn, "0027")
    # Past 64 MB: 150,000 rows of 400-byte payloads (stored inline).
    query(pgq_dsn, "INSERT INTO pgq.jobs (kind, payload) SELECT 'k', jsonb_build_object('p', repeat('x', 400)) "
                   "FROM generate_series(1, 150000)")
    assert query(pgq_dsn, "SELECT pg_relation_size('pgq.jobs') > 64 * 1024 * 1024") == [(True,)]
    migrate.upgrade(pgq_dsn, "0028")
    assert query(pgq_dsn, BOUNDS) == [("jobs_lease_bounded", False, True), ("jobs_run_at_bounded", False, True)]
    _refused_and_accepted(pgq_dsn)
    query(pgq_dsn, "ALTER TABLE pgq.jobs VALIDATE CONSTRAINT jobs_run_at_bounded")
    query(pgq_dsn, "ALTER TABLE pgq.jobs VALIDATE CONSTRAINT jobs_lease_bounded")
    assert query(pgq_dsn, BOUNDS) == [("jobs_lease_bounded", True, True), ("jobs_run_at_bounded", True, True)]
    migrate.downgrade(pgq_dsn, "0027")
    assert query(pgq_dsn, BOUNDS) == [("jobs_lease_bounded", True, False), ("jobs_run_at_bounded", True, False)]
