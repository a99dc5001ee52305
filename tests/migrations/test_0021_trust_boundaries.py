"""Revision 0021 (nothing squattable): its downgrade restores the advisory locks of revision 0018
verbatim (pgq.claim and pgq.settle of 0017, pgq.claim_group_heads of 0014, pgq.enqueue_unique of
0018) and drops what it added, with jobs claimable on either side and the grants of the replaced
functions kept; upgrading again works."""

from __future__ import annotations

from typing import Any

import psycopg

from pgq import migrate
from pgq._schema import schema_file


def query(dsn: str, statement: str) -> list[tuple[Any, ...]]:
    with psycopg.connect(dsn, autocommit=True) as conn:
        cur = conn.execute(statement.encode())
        return cur.fetchall() if cur.description else []


BODIES = ("SELECT p.proname::text, p.prosrc FROM pg_proc p WHERE p.pronamespace = 'pgq'::regnamespace "
          "AND p.proname IN ('claim', 'claim_group_heads', 'settle', 'enqueue_unique', 'enqueue_many', "
          "'enqueue_after', 'rescue', 'mark_awaited') ORDER BY 1")
OBJECTS = ("SELECT to_regclass('pgq.leaders') IS NOT NULL, to_regclass('pgq.claim_secret') IS NOT NULL, "
           "to_regclass('pgq.unique_locks') IS NOT NULL, to_regproc('pgq.lead') IS NOT NULL, "
           "to_regproc('pgq.claim_key') IS NOT NULL")


def test_0021_replaces_the_advisory_keys_and_its_downgrade_restores_them(pgq_dsn: str) -> None:
    migrate.downgrade(pgq_dsn, "0021")  # later revisions replace some of its functions again
    assert query(pgq_dsn, OBJECTS) == [(True, True, True, True, True)]
    bodies = dict(query(pgq_dsn, BODIES))
    assert all("1885827" not in body for name, body in bodies.items() if name.startswith(("claim", "settle", "enq")))
    assert all("role_scopes" in body for name, body in bodies.items() if not name.startswith(("claim_", "settle")))
    assert all(body in schema_file("0021_trust_boundaries.up.sql") for body in bodies.values())
    query(pgq_dsn, "SELECT pgq.enqueue('k', queue => 'q')")
    query(pgq_dsn, "CREATE ROLE pgq_t_0021_granted")
    granted = ("SELECT has_function_privilege('pgq_t_0021_granted', 'pgq.claim(text[], text[], integer, "
               "double precision, text)', 'EXECUTE')")
    try:
        query(pgq_dsn, "GRANT EXECUTE ON FUNCTION pgq.claim(text[], text[], integer, double precision, text) "
                       "TO pgq_t_0021_granted")
        migrate.downgrade(pgq_dsn, "0018")
        assert query(pgq_dsn, OBJECTS) == [(False, False, False, False, False)]
        old = dict(query(pgq_dsn, BODIES))
        assert old["claim"] in schema_file("0017_sequences.up.sql")
        assert old["settle"] in schema_file("0017_sequences.up.sql")
        assert old["claim_group_heads"] in schema_file("0014_fairness.up.sql")
        assert old["enqueue_unique"] in schema_file("0018_uniqueness.up.sql")
        assert old["enqueue_many"] in schema_file("0016_keyed_raises.up.sql")
        assert old["enqueue_after"] in schema_file("0017_sequences.up.sql")
        assert old["rescue"] in schema_file("0012_producer_locks.up.sql")
        assert old["mark_awaited"] in schema_file("0012_producer_locks.up.sql")
        assert query(pgq_dsn, granted) == [(True,)]
        query(pgq_dsn, "SELECT pgq.enqueue('k', queue => 'q')")
        assert query(pgq_dsn, "SELECT count(*) FROM pgq.claim('{q}', NULL, 1, 60, 'w')") == [(1,)]
        migrate.upgrade(pgq_dsn)
        assert query(pgq_dsn, OBJECTS) == [(True, True, True, True, True)]
        assert query(pgq_dsn, granted) == [(True,)]
        assert query(pgq_dsn, "SELECT count(*) FROM pgq.claim('{q}', NULL, 10, 60, 'w')") == [(1,)]
        assert query(pgq_dsn, "SELECT pgq.settle(10) >= 0") == [(True,)]
    finally:
        query(pgq_dsn, "DROP OWNED BY pgq_t_0021_granted")
        query(pgq_dsn, "DROP ROLE pgq_t_0021_granted")
