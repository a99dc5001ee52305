"""Tasks of the Django task-contract tests (test_contract.py), kept out of the shop app's tasks
module so that `pgq_worker`'s task count there stays the shop's."""

from __future__ import annotations

import sys
from typing import Any

from pgq.contrib.django._tasks import TaskContext, task


@task()
def noop() -> None:
    """Does nothing."""


@task()
def calculate(a: int, b: int, *, times: int = 1) -> int:
    """(a + b) * times."""
    return (a + b) * times


@task(takes_context=True)
def describe(context: TaskContext) -> dict[str, Any]:
    """What the context says of the running attempt."""
    result = context.task_result
    return {"attempt": context.attempt, "id": result.id, "status": str(result.status),
            "run_after": None if result.task.run_after is None else result.task.run_after.isoformat()}


@task()
def value_error() -> None:
    """Fails with a ValueError."""
    raise ValueError("This task failed due to ValueError")


@task()
def nested_error() -> None:
    """Fails with an exception whose argument is an exception."""
    raise ValueError(ValueError("This task failed"))


@task()
def not_json() -> object:
    """Returns a value JSON cannot hold."""
    return {"when": sys}


@task()
def exits() -> None:
    """Raises SystemExit, as `sys.exit` does."""
    sys.exit(1)


@task()
def interrupted() -> None:
    """Raises KeyboardInterrupt, as a Ctrl-C in the task's thread would."""
    raise KeyboardInterrupt


@task(queue_name="mail", priority=-5)
async def async_add(a: int, b: int) -> int:
    """An async task on another queue."""
    return a + b
