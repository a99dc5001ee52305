"""`PgqBackend`: Django's task API on pgq's jobs table, and the worker side of it."""

from __future__ import annotations

import dataclasses
import datetime as dt
import importlib
import traceback
from collections.abc import Callable, Iterable, Mapping
from inspect import iscoroutinefunction
from typing import Any

import psycopg
from asgiref.sync import async_to_sync
from django.apps import apps as django_apps
from django.core.exceptions import ImproperlyConfigured
from django.db import DEFAULT_DB_ALIAS, close_old_connections, connections
from psycopg.conninfo import make_conninfo

from ... import _ops
from ...app import App
from ...bounds import INT8_MAX
from ...context import current_job, set_progress
from ...models import Job, JobSpec, JobStatus
from ._cursor import django_cursor
from ._tasks import (
    TASK_MAX_PRIORITY,
    TASK_MIN_PRIORITY,
    BaseTaskBackend,
    Task,
    TaskContext,
    TaskError,
    TaskResult,
    TaskResultDoesNotExist,
    normalize_json,
    task_enqueued,
    task_finished,
    task_started,
)
from ._tasks import TaskResultStatus as Status

__all__ = ["OPTIONS", "STATUSES", "PgqBackend"]

OPTIONS = ("DATABASE", "DSN", "MAX_ATTEMPTS", "MODULES")
"""The keys `OPTIONS` may hold (see `PgqBackend`)."""

STATUSES: Mapping[JobStatus, Any] = {
    JobStatus.WAITING: Status.READY, JobStatus.QUEUED: Status.READY, JobStatus.RUNNING: Status.RUNNING,
    JobStatus.SUCCEEDED: Status.SUCCESSFUL, JobStatus.FAILED: Status.FAILED, JobStatus.CANCELLED: Status.FAILED,
}
"""The Django result status of each pgq job status."""

RUN_AFTER_KEY = "run_after"
"""The payload key holding the task's `run_after` (ISO 8601), present only when the task was enqueued
with one: a result's task is the task as enqueued, not as pgq rescheduled it."""

ERROR_CLASS_KEY = "django_exception_class"
"""The key of the job's progress under which a failed attempt records its exception's class path
(pgq's last_error holds the message and traceback only)."""


class PgqBackend(BaseTaskBackend):
    """A Django tasks backend whose tasks are pgq jobs.

    `OPTIONS`: ``DATABASE``, the Django database alias whose connection enqueues and reads (default
    "default"; PostgreSQL through psycopg 3, with pgq's schema: `manage.py pgq_migrate`); ``DSN``, the
    libpq DSN of workers and the dashboard (default: that database's connection settings);
    ``MAX_ATTEMPTS``, attempts per job (default 1: Django's tasks do not retry; more lets pgq retry
    with its backoff); ``MODULES``, modules defining tasks beyond each installed app's `tasks` module,
    which the worker imports. `QUEUES` as Django's: the queues tasks may name (empty: any), which
    `pgq_worker` serves by default.

    Signals: `task_enqueued` on enqueue; `task_started` and `task_finished` on the worker around each
    attempt (`task_finished`'s result has the attempt's status, return value or error, and no
    `finished_at` yet: the outcome is stored after it; receivers' exceptions are logged, not raised).

    The mapping: a task's job kind is its `module_path`, its payload ``{"args": [...], "kwargs":
    {...}}`` (and ``"run_after"`` when the task has one), its queue `queue_name`; Django's
    `priority` (higher first, -100..100) is pgq's with the sign turned (lower first); `run_after` is
    the job's run_at (and is kept in the payload, so that a result's task is the task as enqueued);
    the result id is the job id. A result's status is READY for queued and waiting jobs, RUNNING,
    SUCCESSFUL, or FAILED for failed and cancelled ones; `return_value` is the job's result;
    `enqueued_at`, `started_at`, `finished_at` come from the database clock (`last_attempted_at` is the
    last attempt's start). What does not map: `errors` holds the last attempt's error only (pgq keeps
    one), `worker_ids` repeats the last attempt's worker once per attempt, a result lasts as long as
    pgq's retention keeps its finished job, and a task enqueued through this backend runs only on
    `pgq_worker` (not on a plain `pgq worker`, which does not know Django's tasks). The task API is
    Django's `django.tasks` where Django has it (6.0 and later), else the `django-tasks` backport's (see
    `_tasks`).
    """

    supports_defer = True
    supports_async_task = True
    supports_get_result = True
    supports_priority = True

    def __init__(self, alias: str, params: dict[str, Any]) -> None:
        super().__init__(alias, params)
        unknown = sorted(set(self.options) - set(OPTIONS))
        if unknown:
            raise ImproperlyConfigured(f"TASKS[{alias!r}]: unknown OPTIONS {', '.join(unknown)} "
                                       f"(known: {', '.join(OPTIONS)})")
        self.database: str = self.options.get("DATABASE", DEFAULT_DB_ALIAS)
        attempts = self.options.get("MAX_ATTEMPTS", 1)
        if isinstance(attempts, bool) or not isinstance(attempts, int) or attempts < 1:
            raise ImproperlyConfigured(f"TASKS[{alias!r}]: MAX_ATTEMPTS must be an int >= 1, got {attempts!r}")
        self.max_attempts: int = attempts
        self.modules: list[str] = list(self.options.get("MODULES", []))
        self._dsn: str | None = self.options.get("DSN")
        self._known: dict[str, Task[Any, Any]] | None = None  # tasks(), by module path, once looked up
        self._enqueued: dict[str, Task[Any, Any]] = {}  # tasks enqueued here, by module path

    # -- the producer side (Django's API) ----------------------------------------------------------

    def enqueue(self, task: Task[Any, Any], args: Any, kwargs: Any) -> TaskResult[Any]:
        """Write `task`'s job through the Django connection (in its transaction, if one is open) and
        return its result, status READY."""
        self.validate_task(task)
        payload: dict[str, Any] = {"args": normalize_json(args), "kwargs": normalize_json(kwargs)}
        if task.run_after is not None:
            payload[RUN_AFTER_KEY] = task.run_after.isoformat()  # kept as given: run_at moves with retries
        self._enqueued.setdefault(task.module_path, task)
        spec = JobSpec(task.module_path, payload,
                       queue=task.queue_name, priority=-task.priority, run_at=task.run_after,
                       max_attempts=self.max_attempts)
        conn = self.connection()
        with django_cursor(connections[self.database]) as cursor:
            [job_id] = _ops.run_sync(conn, _ops.enqueue([spec]), own_transaction=True, cursor=cursor)
        result = self._read(conn, job_id)
        assert result is not None  # written just now, in this transaction
        task_enqueued.send(type(self), task_result=result)
        return result

    def get_result(self, result_id: str) -> TaskResult[Any]:
        """The result of job `result_id`, read now through the Django connection; raises
        TaskResultDoesNotExist for an id that is no job of one of this backend's tasks."""
        try:
            job_id = int(result_id)
        except (TypeError, ValueError):
            raise TaskResultDoesNotExist(result_id) from None
        if not 0 < job_id <= INT8_MAX:  # no job has such an id, and pgq refuses to look one up
            raise TaskResultDoesNotExist(result_id)
        result = self._read(self.connection(), job_id)
        if result is None:
            raise TaskResultDoesNotExist(result_id)
        return result

    def connection(self) -> psycopg.Connection[Any]:
        """The psycopg 3 connection of Django's database `DATABASE` (opened if needed)."""
        wrapper = connections[self.database]
        wrapper.ensure_connection()
        raw = wrapper.connection
        if not isinstance(raw, psycopg.Connection):
            raise ImproperlyConfigured(f"TASKS[{self.alias!r}]: database {self.database!r} must be PostgreSQL "
                                       f"through psycopg 3 (found {type(raw).__module__})")
        return raw

    @property
    def dsn(self) -> str:
        """The libpq DSN of workers and the dashboard: OPTIONS' DSN, else Django's settings of the
        database (its libpq parameters; Django-only options are left out)."""
        if self._dsn is not None:
            return self._dsn
        known = {d.keyword.decode() for d in psycopg.pq.Conninfo.get_defaults()}
        params = connections[self.database].get_connection_params()
        return make_conninfo("", **{str(k): v for k, v in params.items() if k in known and isinstance(v, str | int)})

    def _read(self, conn: psycopg.Connection[Any], job_id: int) -> TaskResult[Any] | None:
        with django_cursor(connections[self.database]) as cursor:
            job = _ops.run_sync(conn, _ops.get(job_id), own_transaction=True, cursor=cursor)
        return None if job is None else self.result_of(job)

    def result_of(self, job: Job) -> TaskResult[Any] | None:
        """`job` as a Django TaskResult; None when its kind is no task of this backend."""
        task = self.task_of(job.kind)
        payload = job.payload if isinstance(job.payload, dict) else {}
        run_after = payload.get(RUN_AFTER_KEY)
        changes: dict[str, Any] = {"queue_name": job.queue,
                                   "run_after": None if run_after is None else dt.datetime.fromisoformat(run_after)}
        if TASK_MIN_PRIORITY <= -job.priority <= TASK_MAX_PRIORITY:
            changes["priority"] = -job.priority
        if task is None or (self.queues and job.queue not in self.queues):
            return None
        errors = []
        if job.last_error and job.status is not JobStatus.SUCCEEDED:
            progress = job.progress if isinstance(job.progress, dict) else {}
            errors.append(TaskError(exception_class_path=str(progress.get(ERROR_CLASS_KEY, "builtins.Exception")),
                                    traceback=job.last_error))
        result: TaskResult[Any] = TaskResult(
            task=dataclasses.replace(task, **changes), id=str(job.id), status=STATUSES[job.status],
            enqueued_at=job.created_at, started_at=job.started_at, finished_at=job.finished_at,
            last_attempted_at=job.started_at, args=list(payload.get("args", [])),
            kwargs=dict(payload.get("kwargs", {})), backend=self.alias, errors=errors,
            worker_ids=[job.claimed_by or "pgq"] * job.attempts)
        object.__setattr__(result, "_return_value", job.result)
        return result

    def task_of(self, kind: str) -> Task[Any, Any] | None:
        """The Django task whose `module_path` is `kind`, if it is one of this backend's: one of
        `tasks()` (found once, then remembered) or one this backend enqueued in this process. A kind
        is never imported: it is read from the database, where any producer may have written any
        name."""
        known = self._known
        if known is None:
            known = self._known = {task.module_path: task for task in self.tasks()}
        return known.get(kind) or self._enqueued.get(kind)

    # -- the worker side (`manage.py pgq_worker`) --------------------------------------------------

    def tasks(self) -> list[Task[Any, Any]]:
        """This backend's tasks, found in each installed app's `tasks` module and in OPTIONS'
        MODULES (imported here), by module path."""
        names = [f"{config.name}.tasks" for config in django_apps.get_app_configs()]
        found: dict[str, Task[Any, Any]] = {}
        for name in [*names, *self.modules]:
            try:
                module = importlib.import_module(name)
            except ModuleNotFoundError as exc:
                if exc.name == name and name not in self.modules:
                    continue  # an app without a tasks module
                raise
            for value in vars(module).values():
                if isinstance(value, Task) and value.backend == self.alias:
                    found.setdefault(value.module_path, value)
        return [found[path] for path in sorted(found)]

    def worker_app(self, tasks: Iterable[Task[Any, Any]] | None = None) -> App:
        """A pgq App on `dsn` whose tasks run `tasks` (default: `tasks()`), each as the job kind of
        its module path: what `pgq_worker` runs."""
        app = App(self.dsn)
        for task in self.tasks() if tasks is None else tasks:
            app.task(name=task.module_path, queue=task.queue_name, max_attempts=self.max_attempts,
                     priority=-task.priority)(self._handler(task))
        return app

    def _handler(self, task: Task[Any, Any]) -> Callable[[list[Any], dict[str, Any]], Any]:
        func: Callable[..., Any] = async_to_sync(task.func) if iscoroutinefunction(task.func) else task.func

        def run(args: list[Any], kwargs: dict[str, Any], run_after: str | None = None) -> Any:
            close_old_connections()  # as Django does around a request: no stale connection of this thread
            # None for a job outside QUEUES (enqueued by other means than Django's): no signals then.
            result = self.result_of(current_job())
            if result is not None:
                result = dataclasses.replace(result, status=Status.RUNNING)  # type: ignore[arg-type]  # stubs
                task_started.send_robust(type(self), task_result=result)
            try:
                if task.takes_context:
                    if result is None:
                        raise ImproperlyConfigured(f"job {current_job().id} is in queue {current_job().queue!r}, "
                                                   f"not one of TASKS[{self.alias!r}]['QUEUES']")
                    value = func(TaskContext(task_result=result), *args, **kwargs)
                else:
                    value = func(*args, **kwargs)
                value = normalize_json(value)  # a value JSON cannot hold fails the task, as Django's do
            except BaseException as exc:  # SystemExit and KeyboardInterrupt too: the worker fails the job
                path = f"{type(exc).__module__}.{type(exc).__qualname__}"
                set_progress({ERROR_CLASS_KEY: path})
                if result is not None:
                    _finished(self, result, Status.FAILED, error=TaskError(exception_class_path=path,
                                                                            traceback=_traceback(exc)))
                raise
            finally:
                close_old_connections()
            if result is not None:
                _finished(self, result, Status.SUCCESSFUL, value=value)
            return value

        run.__name__ = task.name
        return run


def _finished(backend: PgqBackend, result: TaskResult[Any], status: Any, *, value: Any = None,
              error: TaskError | None = None) -> None:
    """Send Django's `task_finished` for `result`, as it is about to be stored: `status`, its return
    value or its error (a receiver that raises is logged by Django's signal, never fails the job)."""
    finished = dataclasses.replace(result, status=status, errors=[*result.errors, *([error] if error else [])])
    object.__setattr__(finished, "_return_value", value)
    task_finished.send_robust(type(backend), task_result=finished)


def _traceback(exc: BaseException) -> str:
    return "".join(traceback.format_exception(exc))
