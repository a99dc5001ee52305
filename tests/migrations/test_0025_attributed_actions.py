"""Revision 0025: pgq.cancel, pgq.pause and pgq.resume take an actor and audit themselves; a queue
paused before it keeps its row (paused_role NULL, explain names paused_by alone); the downgrade drops
pgq.control_audit and paused_role, keeps pgq.job_audit's rows and the paused queues, and the earlier
one-argument functions work again; upgrading again works with the data left."""

from __future__ import annotations

import psycopg
import pytest

from pgq import migrate


def _rows(dsn: str, sql: str) -> list[tuple[object, ...]]:
    with psycopg.connect(dsn, autocommit=True) as conn:
        cur = conn.execute(sql.encode())
        return cur.fetchall() if cur.description else []


def test_0025_audits_the_sql_functions_and_its_downgrade_keeps_the_rest(pgq_empty_dsn: str) -> None:
    migrate.upgrade(pgq_empty_dsn, "0023")
    _rows(pgq_empty_dsn, "SELECT pgq.pause('old')")
    [(job,)] = _rows(pgq_empty_dsn, "SELECT pgq.enqueue('k', queue => 'old')")
    _rows(pgq_empty_dsn, f"SELECT * FROM pgq.cancel({job})")
    assert _rows(pgq_empty_dsn, "SELECT count(*) FROM pgq.job_audit") == [(0,)]  # not audited before 0025

    migrate.upgrade(pgq_empty_dsn, "0025")
    assert _rows(pgq_empty_dsn, "SELECT paused_by, paused_role FROM pgq.paused_queues") == [("postgres", None)]
    [(waiting,)] = _rows(pgq_empty_dsn, "SELECT pgq.enqueue('k', queue => 'old')")
    [(detail,)] = _rows(pgq_empty_dsn, f"SELECT detail FROM pgq.explain({waiting}) WHERE reason = 'queue_paused'")
    assert str(detail).startswith("queue old is paused (by postgres since ")
    _rows(pgq_empty_dsn, f"SELECT * FROM pgq.cancel({waiting}, 'alice')")
    _rows(pgq_empty_dsn, "SELECT pgq.resume('old', 'alice'), pgq.pause('new', 'bob')")
    assert _rows(pgq_empty_dsn, "SELECT action, target, actor FROM pgq.control_audit ORDER BY id") == [
        ("resume", "old", "alice"), ("pause", "new", "bob")]

    migrate.downgrade(pgq_empty_dsn, "0023")
    assert _rows(pgq_empty_dsn, "SELECT action, actor FROM pgq.job_audit") == [("cancel", "alice")]
    assert _rows(pgq_empty_dsn, "SELECT queue, paused_by FROM pgq.paused_queues") == [("new", "bob")]
    assert _rows(pgq_empty_dsn, "SELECT to_regclass('pgq.control_audit') IS NULL") == [(True,)]
    with pytest.raises(psycopg.errors.UndefinedFunction):
        _rows(pgq_empty_dsn, "SELECT pgq.pause('x', 'bob')")
    assert _rows(pgq_empty_dsn, "SELECT pgq.resume('new'), pgq.pause('again')") == [(True, True)]

    migrate.upgrade(pgq_empty_dsn)
    assert _rows(pgq_empty_dsn, "SELECT queue, paused_role FROM pgq.paused_queues") == [("again", None)]
    assert _rows(pgq_empty_dsn, "SELECT pgq.resume('again', 'carol')") == [(True,)]
    assert _rows(pgq_empty_dsn, "SELECT action, actor, db_role FROM pgq.control_audit") == [
        ("resume", "carol", "postgres")]
