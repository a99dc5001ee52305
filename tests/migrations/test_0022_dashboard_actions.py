"""Revision 0022: pgq.job_audit takes 'run_now'; its downgrade deletes those rows, keeps the others,
and restores the bulk-only check; upgrading again works with the data left."""

from __future__ import annotations

import psycopg
import pytest

from pgq import migrate


def _rows(dsn: str, sql: str) -> list[tuple[object, ...]]:
    with psycopg.connect(dsn, autocommit=True) as conn:
        cur = conn.execute(sql.encode())
        return cur.fetchall() if cur.description else []


def test_0022_lets_the_audit_take_run_now_and_its_downgrade_keeps_the_rest(pgq_empty_dsn: str) -> None:
    migrate.upgrade(pgq_empty_dsn, "0018")
    with pytest.raises(psycopg.errors.CheckViolation):
        _rows(pgq_empty_dsn, "INSERT INTO pgq.job_audit (action, job_ids) VALUES ('run_now', '{1}')")
    migrate.upgrade(pgq_empty_dsn, "0022")
    _rows(pgq_empty_dsn, "INSERT INTO pgq.job_audit (action, actor, job_ids) VALUES ('run_now', 'a', '{1}'), "
                         "('cancel', 'b', '{2}')")
    migrate.downgrade(pgq_empty_dsn, "0018")
    assert _rows(pgq_empty_dsn, "SELECT action, actor FROM pgq.job_audit") == [("cancel", "b")]
    with pytest.raises(psycopg.errors.CheckViolation):
        _rows(pgq_empty_dsn, "INSERT INTO pgq.job_audit (action, job_ids) VALUES ('run_now', '{1}')")
    migrate.upgrade(pgq_empty_dsn)
    _rows(pgq_empty_dsn, "INSERT INTO pgq.job_audit (action, job_ids) VALUES ('run_now', '{3}')")
    assert _rows(pgq_empty_dsn, "SELECT count(*) FROM pgq.job_audit") == [(2,)]
