"""Tasks of the Django task-contract tests (test_contract*.py), kept out of the shop app's tasks
module so that `pgq_worker`'s task count there stays the shop's (settings_contract.py adds this
module to the backend's MODULES for the tests that run `pgq_worker` on them)."""

from __future__ import annotations

import sys
import time
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


@task()
def accept_anything(*args: Any, **kwargs: Any) -> None:
    """Takes any arguments and returns None."""


@task
def bare(*args: Any, **kwargs: Any) -> None:
    """Declared with the bare decorator (no parentheses)."""


@task()
async def async_accept_anything(*args: Any, **kwargs: Any) -> None:
    """The async twin of `accept_anything`."""


@task()
def answer() -> int:
    """Returns a constant."""
    return 42


@task()
def exits_with_message() -> None:
    """Raises SystemExit with a message."""
    raise SystemExit("stopped by the task itself")


@task()
def interrupted_with_message() -> None:
    """Raises KeyboardInterrupt with a message."""
    raise KeyboardInterrupt("interrupted by the task itself")


@task()
def returns_a_function() -> object:
    """Returns a value neither JSON nor pickle can hold."""
    return lambda: None


@task(takes_context=True)
def own_id(context: TaskContext) -> str:
    """The id of the result this attempt belongs to."""
    return context.task_result.id


@task(takes_context=True)
def expect_attempt(context: TaskContext, expected: int) -> int:
    """Fails unless the context is a TaskContext whose attempt is `expected`."""
    if not isinstance(context, TaskContext) or context.attempt != expected:
        raise AssertionError(f"context {context!r} is not attempt {expected}")
    return context.attempt


@task()
def pause(seconds: float) -> float:
    """Sleeps `seconds`: a task that is still running a moment later."""
    time.sleep(seconds)
    return seconds
