"""Fixtures shared by the test packages (the database fixtures come from the pgq.testing plugin)."""

from __future__ import annotations

import signal
import subprocess
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


def stop_with_sigterm(proc: subprocess.Popen[str], timeout: float) -> str:
    """SIGTERM a worker subprocess started with text pipes, wait up to `timeout` s for it to exit
    (TimeoutExpired otherwise) and return what it wrote on stderr."""
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=timeout)
    return str(err)


def reap(proc: subprocess.Popen[str]) -> None:
    """Kill and reap `proc` if it still runs (a test's `finally`: a failure leaves no process behind)."""
    if proc.poll() is None:
        proc.kill()
        proc.communicate()


def enqueue_after(db: SQL, kind: str, parents: list[int], *, queue: str = "default", run: bool = False) -> int:
    """Enqueue a job of `kind` that depends on `parents` through the SQL API (pgq.enqueue with
    depends_on; on_parent_failure 'run' when `run`, else 'cancel') and return its id."""
    rows = db("SELECT pgq.enqueue(%s, queue => %s, depends_on => %s::bigint[], on_parent_failure => %s) AS id",
              [kind, queue, parents, "run" if run else "cancel"])
    return int(rows[0]["id"])
