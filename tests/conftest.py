"""Fixtures shared by the test packages (the database fixtures come from the pgq.testing plugin)."""

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
