"""What the management commands and the dashboard share: the pgq backend they work for."""

from __future__ import annotations

from django.core.management.base import CommandError

from ._tasks import InvalidTaskBackend, task_backends
from .backend import PgqBackend


def pgq_backend_of(alias: str) -> PgqBackend:
    """The backend `alias` of settings.TASKS; CommandError unless it is a PgqBackend."""
    try:
        backend = task_backends[alias]
    except InvalidTaskBackend as exc:
        raise CommandError(f"no task backend {alias!r} in settings.TASKS ({exc})") from None
    if not isinstance(backend, PgqBackend):
        raise CommandError(f"task backend {alias!r} is {type(backend).__name__}, not "
                           "pgq.contrib.django.PgqBackend")
    return backend
