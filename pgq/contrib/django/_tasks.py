"""The task API that pgq.contrib.django is written against, from where this Django has it.

Django 6.0 ships it as `django.tasks`; on Django 5.2 the `django-tasks` backport provides the same
classes and functions as `django_tasks`. Only what both share is used, under the names both give it
(the backport's `InvalidTaskBackendError` is `InvalidTaskBackend` here, and `normalize_json` comes
from `django.utils.json` on Django 6). Where Django has `django.tasks`, that is the API used, the
backport being ignored even if installed: tasks must then be declared with `django.tasks.task`.
`SOURCE` names the package in use ("django.tasks" or "django_tasks").
"""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING

__all__ = [
    "SOURCE",
    "TASK_MAX_PRIORITY",
    "TASK_MIN_PRIORITY",
    "BaseTaskBackend",
    "InvalidTaskBackend",
    "Task",
    "TaskContext",
    "TaskError",
    "TaskResult",
    "TaskResultDoesNotExist",
    "TaskResultStatus",
    "normalize_json",
    "task",
    "task_backends",
    "task_enqueued",
    "task_finished",
    "task_started",
]


def _source() -> str:
    try:
        import_module("django.tasks")
    except ImportError:
        return "django_tasks"
    return "django.tasks"


SOURCE = _source()

if TYPE_CHECKING:  # the backport's annotations (Django ships none)
    from django_tasks import task, task_backends
    from django_tasks.backends.base import BaseTaskBackend
    from django_tasks.base import (
        TASK_MAX_PRIORITY,
        TASK_MIN_PRIORITY,
        Task,
        TaskContext,
        TaskError,
        TaskResult,
        TaskResultStatus,
    )
    from django_tasks.exceptions import InvalidTaskBackendError as InvalidTaskBackend
    from django_tasks.exceptions import TaskResultDoesNotExist
    from django_tasks.signals import task_enqueued, task_finished, task_started
    from django_tasks.utils import normalize_json
else:
    _package, _base, _exceptions = (import_module(SOURCE + part) for part in ("", ".base", ".exceptions"))
    task, task_backends = _package.task, _package.task_backends
    BaseTaskBackend = import_module(f"{SOURCE}.backends.base").BaseTaskBackend
    TASK_MAX_PRIORITY, TASK_MIN_PRIORITY = _base.TASK_MAX_PRIORITY, _base.TASK_MIN_PRIORITY
    Task, TaskContext, TaskError = _base.Task, _base.TaskContext, _base.TaskError
    TaskResult, TaskResultStatus = _base.TaskResult, _base.TaskResultStatus
    # The backport's name for it ends in Error; Django's does not.
    InvalidTaskBackend = getattr(_exceptions, "InvalidTaskBackend", None) or _exceptions.InvalidTaskBackendError
    TaskResultDoesNotExist = _exceptions.TaskResultDoesNotExist
    _signals = import_module(f"{SOURCE}.signals")
    task_enqueued, task_started, task_finished = _signals.task_enqueued, _signals.task_started, _signals.task_finished
    _utils = "django.utils.json" if SOURCE == "django.tasks" else "django_tasks.utils"
    normalize_json = import_module(_utils).normalize_json
