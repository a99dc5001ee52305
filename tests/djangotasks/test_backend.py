"""pgq.contrib.django against real Postgres, in the small project of this package: a rollback leaves
no job, a commit runs the job on a `manage.py pgq_worker` subprocess, results come back through
Django's API, and the dashboard answers staff only."""

from __future__ import annotations

import datetime as dt
import re
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

import psycopg
import pytest

from ..conftest import run_until

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def project(django_dsn: str) -> Iterator[str]:
    """The Django project's database, without jobs or users before and after the test (the session
    shares it with docs/django.md)."""
    from django.contrib.auth.models import User

    def empty() -> None:
        User.objects.all().delete()
        with psycopg.connect(django_dsn, autocommit=True) as conn:
            conn.execute("DELETE FROM pgq.jobs")

    empty()
    yield django_dsn
    empty()


def jobs(dsn: str) -> list[tuple[Any, ...]]:
    """(kind, queue, priority, status, payload) of every job, in id order, read outside Django."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        return conn.execute("SELECT kind, queue, priority, status::text, payload FROM pgq.jobs ORDER BY id").fetchall()


class Rollback(Exception):
    """Raised to roll an atomic block back."""


def test_the_backend_uses_the_task_api_of_this_django(project: str) -> None:
    import django
    from django.conf import settings

    from pgq.contrib.django import PgqBackend, _tasks
    from tests.djangotasks.shop.tasks import ship

    # Django 6 has django.tasks (the backport is not installed there: `python3 dev.py django6`).
    expected = "django.tasks" if django.VERSION >= (6,) else "django_tasks"
    assert (_tasks.SOURCE, type(ship).__module__) == (expected, f"{expected}.base")
    assert isinstance(ship.get_backend(), PgqBackend)
    assert ("django_tasks" in settings.INSTALLED_APPS) is (django.VERSION < (6,))


def test_an_enqueue_in_a_rolled_back_transaction_leaves_no_job(project: str) -> None:
    from django.contrib.auth.models import User
    from django.db import transaction

    from pgq.contrib.django._tasks import TaskResultStatus
    from tests.djangotasks.shop.tasks import ship

    with pytest.raises(Rollback), transaction.atomic():
        User.objects.create(username="ada")
        result = ship.enqueue("ada", ["book"])
        assert result.status == TaskResultStatus.READY
        assert ship.get_result(result.id).args == ["ada", ["book"]]  # visible inside the transaction
        assert jobs(project) == []  # and to nobody else
        raise Rollback
    assert jobs(project) == [] and not User.objects.exists()


@pytest.mark.slow
def test_committed_tasks_run_on_a_pgq_worker_and_their_results_read_back(project: str) -> None:
    from django.contrib.auth.models import User
    from django.db import transaction

    from pgq.contrib.django._tasks import TaskResultDoesNotExist, TaskResultStatus
    from tests.djangotasks.shop.tasks import attempt, explode, mail, ship

    later = dt.datetime.now(dt.UTC) + dt.timedelta(hours=1)
    with transaction.atomic():
        User.objects.create(username="ada")
        shipped = ship.enqueue("ada", ["book", "pen"])
        mailed = mail.enqueue(to="ada@example.com")
        context = attempt.enqueue(tag="t")
        failed = explode.enqueue("out of stock")
        deferred = ship.using(run_after=later).enqueue("ada", [])
    assert [row[:3] for row in jobs(project)] == [
        ("tests.djangotasks.shop.tasks.ship", "default", 0), ("tests.djangotasks.shop.tasks.mail", "mail", -10),
        ("tests.djangotasks.shop.tasks.attempt", "default", 0), ("tests.djangotasks.shop.tasks.explode", "default", 0),
        ("tests.djangotasks.shop.tasks.ship", "default", 0)]
    assert mail.get_result(mailed.id).task.priority == 10  # pgq's lower-first priority, turned back

    def finished() -> bool:
        for result in (shipped, mailed, context, failed):
            result.refresh()
        return all(r.is_finished for r in (shipped, mailed, context, failed))

    out = run_until([sys.executable, "-m", "tests.djangotasks.manage", "pgq_worker", "--concurrency", "2"],
                    finished, 60, ROOT)
    assert "pgq worker for backend 'default': 5 tasks, queues default, mail" in out

    assert shipped.status == TaskResultStatus.SUCCESSFUL
    assert shipped.return_value == {"shipped_to": "ada", "count": 2}
    assert shipped.attempts == 1 and shipped.errors == []
    assert shipped.started_at is not None and shipped.finished_at is not None
    assert shipped.enqueued_at is not None and shipped.enqueued_at <= shipped.started_at <= shipped.finished_at
    assert mail.get_result(mailed.id).return_value == "mailed ada@example.com"
    assert attempt.get_result(context.id).return_value == {"tag": "t", "attempt": 1, "id": context.id}
    failure = explode.get_result(failed.id)
    assert failure.status == TaskResultStatus.FAILED and failure.attempts == 1  # MAX_ATTEMPTS 1: no retry
    [error] = failure.errors
    assert error.exception_class is ValueError and "ValueError: out of stock" in error.traceback
    with pytest.raises(ValueError, match="Task failed"):
        _ = failure.return_value
    assert ship.get_result(deferred.id).status == TaskResultStatus.READY  # not due yet: left waiting
    with pytest.raises(TaskResultDoesNotExist):
        ship.get_result("999999")


def test_the_dashboard_answers_staff_only_and_pgq_migrate_reports_the_revision(project: str) -> None:
    from django.contrib.auth.models import User
    from django.core.management import call_command
    from django.test import Client

    from pgq import migrate

    client = Client()
    anonymous = client.get("/ops/pgq/")
    assert anonymous.status_code == 302 and anonymous["Location"].startswith("/admin/login/")
    User.objects.create_user("clerk", password="pw")
    client.login(username="clerk", password="pw")
    assert client.get("/ops/pgq/").status_code == 302  # logged in, not staff
    User.objects.create_user("ops", password="pw", is_staff=True, is_superuser=True)  # staff alone: read-only
    client.login(username="ops", password="pw")
    page = client.get("/ops/pgq/")
    assert page.status_code == 200, page.content[:500]
    assert b"shop jobs" in page.content and b'href="/ops/pgq/' in page.content  # links follow the mount path
    assert client.get("/ops/pgq/api/queues").status_code == 200

    # Actions (POST) pass through the mount too: the dashboard's own CSRF cookie and token, and staff only.
    with psycopg.connect(project, autocommit=True) as conn:
        [kept, cancelled] = [conn.execute("SELECT pgq.enqueue('shop.ship', '{}', 'shop')").fetchone()[0]
                             for _ in range(2)]
    form = client.get(f"/ops/pgq/jobs/{cancelled}")
    assert form.status_code == 200
    token = re.search(r'name="csrf_token" value="([^"]+)"', form.content.decode())
    assert token and client.cookies.get("pgq_csrf"), form.headers  # the cookie reached Django's client
    assert client.cookies["pgq_csrf"]["path"] == "/ops/pgq"

    def cancel(job_id: int, token: str, **headers: str) -> Any:
        """POST the job page's cancel form, urlencoded as a browser sends it."""
        return client.post(f"/ops/pgq/jobs/{job_id}/cancel", urlencode({"csrf_token": token}),
                           content_type="application/x-www-form-urlencoded", headers=headers)

    done = cancel(cancelled, token.group(1), Origin="http://testserver")
    assert done.status_code == 303, " ".join(re.sub(r"<[^>]+>", " ", done.content.decode()).split())
    assert done["Location"].startswith(f"/ops/pgq/jobs/{cancelled}")
    assert cancel(kept, "forged").status_code == 403
    assert cancel(kept, token.group(1), Origin="https://evil.example").status_code == 403
    client.logout()
    anonymous_post = cancel(kept, token.group(1))
    assert anonymous_post.status_code == 302 and anonymous_post["Location"].startswith("/admin/login/")
    with psycopg.connect(project, autocommit=True) as conn:
        statuses = conn.execute("SELECT id, status::text FROM pgq.jobs WHERE id IN (%s, %s) ORDER BY id",
                                (kept, cancelled)).fetchall()
    assert statuses == [(kept, "queued"), (cancelled, "cancelled")]

    from io import StringIO

    out = StringIO()
    call_command("pgq_migrate", stdout=out)
    assert out.getvalue().strip() == f"pgq schema already at revision {migrate.head_revision()}"
