"""The shop's Django tasks (Django's task API, run by pgq)."""

from __future__ import annotations

import time
from typing import Any

from django.contrib.auth.models import User

from pgq.contrib.django._tasks import TaskContext, task  # django.tasks on Django 6, else the backport


@task()
def ship(username: str, items: list[str]) -> dict[str, Any]:
    """Ship an order: reads the ORM (the user committed with the enqueue) from the worker."""
    user = User.objects.get(username=username)
    return {"shipped_to": user.username, "count": len(items)}


@task(priority=10, queue_name="mail")
async def mail(to: str) -> str:
    """An async task on another queue, with a priority."""
    return f"mailed {to}"


@task(takes_context=True)
def attempt(context: TaskContext, tag: str) -> dict[str, Any]:
    """Reports what the task context says."""
    return {"tag": tag, "attempt": context.attempt, "id": context.task_result.id}


@task()
def explode(why: str) -> None:
    """Always fails."""
    raise ValueError(why)


@task()
def nap(seconds: float) -> str:
    """Sleeps: a task still running when the worker is told to stop."""
    time.sleep(seconds)
    return "rested"
