"""Fixtures of the dashboard's tests: a Starlette TestClient on `create_app` over the test's own
migrated database (real PostgreSQL, real queue), and reading a page's CSRF token."""

from __future__ import annotations

import base64
import re
from collections.abc import Callable, Iterator
from typing import Any

import pytest

pytest.importorskip("starlette", reason="the dashboard's tests need the web extra: pip install 'pgq-jobs[web]'")

from starlette.testclient import TestClient

from pgq.web import create_app
from tests.privileges.conftest import Roles, roles  # noqa: F401 - the role fixture, shared

Client = Callable[..., TestClient]

__all__ = ["Client", "Roles", "basic", "csrf_token"]


@pytest.fixture
def dashboard(pgq_dsn: str) -> Iterator[Client]:
    """A factory of TestClients on `create_app(dsn, **options)` (default dsn: the test's database;
    trust_network=True unless given), entered (so the app's lifespan runs and its pool closes) and
    closed at the end of the test."""
    clients: list[TestClient] = []

    def make(dsn: str | None = None, *, client_options: dict[str, Any] | None = None, **options: Any) -> TestClient:
        options.setdefault("trust_network", True)
        client = TestClient(create_app(dsn or pgq_dsn, **options), **(client_options or {}))
        client.__enter__()
        clients.append(client)
        return client

    yield make
    for client in clients:
        client.__exit__(None, None, None)


_TOKEN = re.compile(r'name="csrf_token" value="([^"]+)"')


def csrf_token(client: TestClient, path: str) -> str:
    """The CSRF token of the first form on page `path` (the client keeps the cookie it came with)."""
    response = client.get(path)
    assert response.status_code == 200, response.text
    match = _TOKEN.search(response.text)
    assert match, f"no form with a CSRF token on {path}"
    return match.group(1)


def basic(user: str, password: str) -> dict[str, str]:
    """The Authorization header of HTTP Basic credentials."""
    return {"Authorization": "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()}
