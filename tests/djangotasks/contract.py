"""Helpers of the Django task-contract tests (test_contract*.py): running the contract tasks as
`pgq_worker` would, and the API's names that differ between Django 6 and the backport."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from importlib import import_module
from typing import Any

from pgq.testing import drain


def run(backend: Any, *, queues: list[str] | None = None) -> list[Any]:
    """Run every ready job of the contract tasks inline, as `pgq_worker` would (one failure raises:
    call again to go on). `queues`: only those (None: all)."""
    from tests.djangotasks import contract_tasks

    tasks = [value for value in vars(contract_tasks).values() if type(value).__name__ == "Task"]
    return drain(backend.worker_app(tasks), backend.dsn, queues=queues)


def run_all(backend: Any, *, queues: list[str] | None = None) -> list[BaseException]:
    """Run every ready job of the contract tasks, going on past failures, as a worker does; returns
    the failures' exceptions, in order."""
    failures: list[BaseException] = []
    while True:
        try:
            run(backend, queues=queues)
        except BaseException as exc:  # SystemExit and KeyboardInterrupt of tasks too
            failures.append(exc)
        else:
            return failures


def api(name: str) -> Any:
    """A name of the task API's exceptions or base module, under Django 6's spelling or the
    backport's (InvalidTask / InvalidTaskError, InvalidTaskBackend / InvalidTaskBackendError)."""
    from pgq.contrib.django._tasks import SOURCE

    for module in (f"{SOURCE}.exceptions", f"{SOURCE}.base", SOURCE):
        found = vars(import_module(module))
        for spelling in (name, f"{name}Error"):
            if spelling in found:
                return found[spelling]
    raise LookupError(f"{SOURCE} has no {name}")


@contextmanager
def enqueue_signals() -> Iterator[list[tuple[Any, Any]]]:
    """The (sender, task_result) of each `task_enqueued` signal sent inside the block."""
    from pgq.contrib.django._tasks import task_enqueued

    received: list[tuple[Any, Any]] = []

    def capture(sender: Any, task_result: Any, **_: Any) -> None:
        received.append((sender, task_result))

    task_enqueued.connect(capture)
    try:
        yield received
    finally:
        task_enqueued.disconnect(capture)
