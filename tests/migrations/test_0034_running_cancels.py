"""Revision 0034: an UPDATE of pgq.jobs that cancels a running job notifies pgq_cancel again (a
statement trigger of UPDATE on pgq.jobs, and the trigger of a cancelled job's arrival in the history),
and pgq.heartbeat locks only the rows whose lease it holds. Its downgrade gives back 0033's schema,
whose own downgrade then restores 0032's row trigger with its function."""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from typing import Any

import psycopg

from pgq import migrate

SQL = Callable[..., list[dict[str, Any]]]

CLAIM = "SELECT id, lease_token::text AS token FROM pgq.claim(ARRAY['q'], NULL, 1, 30, 'w')"
# What a DBA types, clearing the lease as the table's CHECK required up to revision 0032.
CANCEL = ("UPDATE pgq.jobs SET status = 'cancelled', finished_at = now(), lease_token = NULL, "
          "lease_expires_at = NULL WHERE id = %s")
END = "end of test"


def _cancel_a_running_job(pgq_dsn: str, db: SQL) -> tuple[list[str], str]:
    """Claim a job, cancel it with the DBA's UPDATE; the pgq_cancel notices sent, and the one expected."""
    db("INSERT INTO pgq.jobs (queue, kind) VALUES ('q', 'k')")
    [job] = db(CLAIM)
    with psycopg.connect(pgq_dsn, autocommit=True) as listener:
        listener.execute(b"LISTEN pgq_cancel")
        db(CANCEL, (job["id"],))
        db("SELECT pg_notify('pgq_cancel', %s)", (END,))
        got = []
        for note in listener.notifies(timeout=10):
            if note.payload == END:
                break
            got.append(note.payload)
    return got, f"{job['id']}:{hashlib.md5(job['token'].encode()).hexdigest()}"


def test_0034_notifies_a_dbas_cancel_and_its_downgrades_restore_the_schemas_below(pgq_dsn: str, db: SQL) -> None:
    got, expected = _cancel_a_running_job(pgq_dsn, db)
    assert got == [expected]

    migrate.downgrade(pgq_dsn, "0033")
    try:
        # 0033's schema: nobody told the worker (what 0034 repairs).
        got, _ = _cancel_a_running_job(pgq_dsn, db)
        assert got == []
        # Down to 0032: the row trigger of UPDATE of revisions 0004 to 0032, with its function again.
        migrate.downgrade(pgq_dsn, "0032")
        got, expected = _cancel_a_running_job(pgq_dsn, db)
        assert got == [expected]
    finally:
        migrate.upgrade(pgq_dsn)
    got, expected = _cancel_a_running_job(pgq_dsn, db)
    assert got == [expected]
