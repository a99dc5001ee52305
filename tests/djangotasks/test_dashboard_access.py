"""The Django mount's permissions (issue #46): staff read, superusers (or a permission) act, every
action is recorded under the Django user; result lookups never import a kind read from the
database; a raw non-ASCII query string is served."""

from __future__ import annotations

import re
import sys
from typing import Any
from urllib.parse import urlencode

import psycopg
import pytest

from .test_backend import project

# A value nested past Python's default recursion limit is what these tests feed pgq.
pytestmark = pytest.mark.usefixtures("default_recursion_limit")

DEEP = 12_000
"""Levels of a payload too deep for Python's json on every version CI runs (3.12+ decodes about
10,000 whatever the recursion limit) and still shallow enough for PostgreSQL's default stack."""

__all__ = ["project"]


def _enqueue(dsn: str, kind: str = "shop.ship", n: int = 1) -> list[int]:
    with psycopg.connect(dsn, autocommit=True) as conn:
        return [conn.execute("SELECT pgq.enqueue(%s, '{}', 'shop')", [kind]).fetchone()[0] for _ in range(n)]


def _client(username: str, **flags: Any) -> Any:
    from django.contrib.auth.models import User
    from django.test import Client

    User.objects.create_user(username, password="pw", **flags)
    client = Client()
    client.login(username=username, password="pw")
    return client


def _post(client: Any, url: str, job_page: str, **fields: str) -> Any:
    """POST a dashboard form at `url` with the CSRF token of the page `job_page` (a read-only page
    has no form: then a token of none, which the read-only check refuses before looking at it)."""
    page = client.get(job_page)
    assert page.status_code == 200, page.content[:300]
    token = re.search(r'name="csrf_token" value="([^"]+)"', page.content.decode())
    return client.post(url, urlencode({"csrf_token": token.group(1) if token else "none", **fields}),
                       content_type="application/x-www-form-urlencoded", headers={"Origin": "http://testserver"})


def _statuses(dsn: str) -> list[str]:
    with psycopg.connect(dsn, autocommit=True) as conn:
        return [r[0] for r in conn.execute("SELECT status::text FROM pgq.jobs ORDER BY id")]


def _audit(dsn: str) -> list[tuple[str, str]]:
    with psycopg.connect(dsn, autocommit=True) as conn:
        return conn.execute("SELECT action, actor FROM pgq.job_audit ORDER BY id").fetchall()


def test_staff_read_only_and_superusers_act_under_their_own_name(project: str) -> None:
    [job] = _enqueue(project)
    with psycopg.connect(project, autocommit=True) as conn:
        conn.execute("DELETE FROM pgq.job_audit")
    staff = _client("clerk", is_staff=True)
    page = staff.get(f"/ops/pgq/jobs/{job}")
    assert page.status_code == 200 and b'data-field="payload"' in page.content
    assert b"/cancel" not in page.content  # no action buttons
    for url, fields in ((f"/ops/pgq/jobs/{job}/cancel", {}), ("/ops/pgq/queues/pause", {"queue": "shop"}),
                        ("/ops/pgq/jobs/bulk", {"action": "cancel", "id": str(job)})):
        refused = _post(staff, url, f"/ops/pgq/jobs/{job}", **fields)
        assert refused.status_code == 403, (url, refused.content[:300])
        assert b"your Django user may not change jobs" in refused.content
    api = staff.post(f"/ops/pgq/api/jobs/{job}/cancel", headers={"Origin": "http://testserver",
                                                                 "X-Requested-With": "pgq"})
    assert api.status_code == 403
    assert _statuses(project) == ["queued"] and _audit(project) == []

    root = _client("root", is_staff=True, is_superuser=True)
    done = _post(root, f"/ops/pgq/jobs/{job}/cancel", f"/ops/pgq/jobs/{job}")
    assert done.status_code == 303, done.content[:300]
    [second] = _enqueue(project)
    bulk = _post(root, "/ops/pgq/jobs/bulk", f"/ops/pgq/jobs/{second}", action="cancel", id=str(second))
    assert bulk.status_code in (200, 303), bulk.content[:300]
    assert _statuses(project) == ["cancelled", "cancelled"]
    assert _audit(project) == [("cancel", "django:root"), ("cancel", "django:root")]


def test_a_permission_decides_who_sees_and_who_acts(project: str) -> None:
    from django.contrib.auth.models import Permission, User

    [job] = _enqueue(project)
    outsider = _client("outsider", is_staff=True)
    assert outsider.get("/ops/pgq-perms/").status_code == 403
    viewer = _client("viewer", is_staff=True)
    User.objects.get(username="viewer").user_permissions.add(Permission.objects.get(codename="view_user"))
    assert viewer.get("/ops/pgq-perms/").status_code == 200
    assert _post(viewer, f"/ops/pgq-perms/jobs/{job}/cancel", f"/ops/pgq-perms/jobs/{job}").status_code == 403
    operator = _client("operator", is_staff=True)
    User.objects.get(username="operator").user_permissions.add(
        *Permission.objects.filter(codename__in=["view_user", "change_user"]))
    done = _post(operator, f"/ops/pgq-perms/jobs/{job}/cancel", f"/ops/pgq-perms/jobs/{job}")
    assert done.status_code == 303 and _statuses(project) == ["cancelled"]
    assert _audit(project)[-1] == ("cancel", "django:operator")


def test_a_raw_non_ascii_query_string_is_served(project: str) -> None:
    staff = _client("clerk", is_staff=True)
    page = staff.get("/ops/pgq/jobs", QUERY_STRING="q=\u20ac")
    assert page.status_code == 200, page.content[:300]
    assert "\u20ac".encode() in page.content


def test_a_result_lookup_never_imports_a_kind_from_the_database(project: str) -> None:
    from pgq.contrib.django._tasks import TaskResultDoesNotExist
    from tests.djangotasks.shop.tasks import ship

    sys.modules.pop("this", None)
    [job] = _enqueue(project, kind="this.x")
    with pytest.raises(TaskResultDoesNotExist):
        ship.get_backend().get_result(str(job))
    assert "this" not in sys.modules


def test_a_result_lookup_of_an_undecodable_job_raises_a_pgq_error(project: str) -> None:
    from pgq import PgqError
    from tests.djangotasks.shop.tasks import ship

    with psycopg.connect(project, autocommit=True) as conn:
        conn.execute("ALTER TABLE pgq.live_jobs DISABLE TRIGGER jobs_json_bounded_insert")
        try:
            [(job,)] = conn.execute("INSERT INTO pgq.jobs (kind, queue, payload) VALUES ('shop.tasks.ship', 'shop', "
                                    "%s::jsonb) RETURNING id", ["[" * DEEP + "]" * DEEP]).fetchall()
        finally:
            conn.execute("ALTER TABLE pgq.live_jobs ENABLE TRIGGER jobs_json_bounded_insert")
    with pytest.raises(PgqError, match="cannot be decoded"):
        ship.get_backend().get_result(str(job))
