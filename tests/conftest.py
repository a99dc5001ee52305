"""Fixtures shared by the test packages (the database fixtures come from the pgq.testing plugin)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from typing import Any

import psycopg
import pytest
from psycopg.conninfo import conninfo_to_dict
from psycopg.rows import dict_row

from pgq.testing import Server

SQL = Callable[..., list[dict[str, Any]]]


def pytest_configure(config: pytest.Config) -> None:
    # pytest-xdist registers it too; without xdist (plain pytest) the marker is inert, and known.
    config.addinivalue_line("markers", "xdist_group(name): run on one process of a parallel run (dev.py test)")


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


def run_until(args: list[str], done: Callable[[], bool], timeout: float, cwd: str | os.PathLike[str]) -> str:
    """Run the command `args` (a worker) in `cwd` until `done()` holds (polled; the test fails after
    `timeout` s or when the command exits first), then SIGTERM it; it must exit 0. Returns its stdout.
    The process never outlives the call."""
    proc = subprocess.Popen(args, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + timeout
        while not done():
            assert proc.poll() is None and time.monotonic() < deadline, proc.communicate(timeout=10)
            time.sleep(0.05)
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=30)
        assert proc.returncode == 0, err
        return str(out)
    finally:
        reap(proc)


def enqueue_after(db: SQL, kind: str, parents: list[int], *, queue: str = "default", run: bool = False) -> int:
    """Enqueue a job of `kind` that depends on `parents` through the SQL API (pgq.enqueue with
    depends_on; on_parent_failure 'run' when `run`, else 'cancel') and return its id."""
    rows = db("SELECT pgq.enqueue(%s, queue => %s, depends_on => %s::bigint[], on_parent_failure => %s) AS id",
              [kind, queue, parents, "run" if run else "cancel"])
    return int(rows[0]["id"])


@pytest.fixture(scope="session")
def django_dsn(pgq_server: Server, pgq_template_dsn: str) -> Iterator[str]:
    """A database migrated for pgq and for the small Django project of tests/djangotasks, with Django
    configured on it (tests.djangotasks.settings) for the rest of the session: Django is set up once
    per process. Tests that use it clean up what they write."""
    django = pytest.importorskip("django")
    from django.core.management import call_command
    from django.db import connections

    template = str(conninfo_to_dict(pgq_template_dsn)["dbname"])
    with pgq_server.scratch_database("pgq_dj_", template) as dsn:
        os.environ["PGQ_DJANGO_DSN"] = dsn
        os.environ["DJANGO_SETTINGS_MODULE"] = "tests.djangotasks.settings"
        django.setup()
        call_command("migrate", verbosity=0)
        try:
            yield dsn
        finally:
            connections.close_all()


@pytest.fixture
def default_recursion_limit() -> Iterator[None]:
    """Python's default recursion limit (1000) for the test: what a value nested past it does in pgq
    (a RecursionError that pgq turns into its own error) is only seen below it, and a library another
    test used may have raised it (Hypothesis raises it while a property runs)."""
    old = sys.getrecursionlimit()
    sys.setrecursionlimit(1000)
    try:
        yield
    finally:
        sys.setrecursionlimit(old)
