"""Fixtures of the Django task-contract tests (test_contract*.py)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import psycopg
import pytest


@pytest.fixture(autouse=True)
def _django_set_up(django_dsn: str) -> None:
    """Django set up on its test database (tests.djangotasks.settings) for every test here, whichever
    test of its process ran first: a test that only declares or inspects tasks needs the settings as
    much as one that enqueues (a test run alone, or first in its pytest-xdist process, failed with
    "settings are not configured")."""


@pytest.fixture
def backend(django_dsn: str) -> Iterator[Any]:
    """The project's PgqBackend, on a jobs table emptied before and after the test."""
    from pgq.contrib.django._tasks import task_backends

    def empty() -> None:
        with psycopg.connect(django_dsn, autocommit=True) as conn:
            conn.execute("DELETE FROM pgq.jobs")

    empty()
    yield task_backends["default"]
    empty()
