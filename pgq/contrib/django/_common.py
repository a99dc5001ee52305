"""What the management commands and the dashboard share: the pgq backend they work for."""

from __future__ import annotations

from django.core.management.base import CommandError
from django_tasks import task_backends
from django_tasks.exceptions import InvalidTaskBackendError

from .backend import PgqBackend


def pgq_backend_of(alias: str) -> PgqBackend:
    """The backend `alias` of settings.TASKS; CommandError unless it is a PgqBackend."""
    try:
        backend = task_backends[alias]
    except InvalidTaskBackendError as exc:
        raise CommandError(f"no task backend {alias!r} in settings.TASKS ({exc})") from None
    if not isinstance(backend, PgqBackend):
        raise CommandError(f"task backend {alias!r} is {type(backend).__name__}, not "
                           "pgq.contrib.django.PgqBackend")
    return backend
