"""Helpers for the integration tests: raw SQL access to the test database, next to the Queue API."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import psycopg
import pytest
from psycopg.rows import dict_row

SQL = Callable[..., list[dict[str, Any]]]


@pytest.fixture
def db(pgq_dsn: str) -> Iterator[SQL]:
    """Run one SQL statement on the test database (autocommit) and return its rows as dicts."""
    conn = psycopg.connect(pgq_dsn, autocommit=True, row_factory=dict_row)

    def run(query: str, params: Any = None) -> list[dict[str, Any]]:
        cur = conn.execute(query.encode(), params)  # bytes: tests pass ad-hoc SQL text
        return cur.fetchall() if cur.description else []

    try:
        yield run
    finally:
        conn.close()


def expire_lease(db: SQL, job_id: int) -> None:
    """Move a running job's lease into the past (database clock) instead of sleeping through it."""
    db("UPDATE pgq.jobs SET lease_expires_at = now() - interval '1 second' WHERE id = %s", [job_id])
