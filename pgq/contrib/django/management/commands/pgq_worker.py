"""`manage.py pgq_worker`: a pgq worker running the project's Django tasks, with its settings loaded."""

from __future__ import annotations

from argparse import ArgumentParser
from typing import Any

from django.core.management.base import BaseCommand, CommandError

from .....errors import InvalidJob
from .....worker import Worker
from ..._common import pgq_backend_of as pgq_backend


class Command(BaseCommand):  # type: ignore[misc]  # Django ships no type information
    """Run a pgq worker for the Django tasks of a PgqBackend until SIGTERM or Ctrl-C (drains)."""

    help = ("Run a pgq worker for the project's Django tasks (those of the installed apps' tasks modules "
            "and of the backend's OPTIONS MODULES) until SIGTERM or Ctrl-C, which let running tasks finish.")

    def add_arguments(self, parser: ArgumentParser) -> None:
        """--backend, --queue (repeatable), --concurrency."""
        parser.add_argument("--backend", default="default", help="the alias in settings.TASKS (default: default)")
        parser.add_argument("--queue", action="append", dest="queues", metavar="NAME",
                            help="serve this queue (repeatable; default: the backend's QUEUES, or all queues "
                                 "when it names none)")
        parser.add_argument("--concurrency", type=int, default=4, help="tasks run at once (default: 4)")

    def handle(self, *args: Any, **options: Any) -> None:
        """Build the worker and run it; CommandError for a bad backend or setting."""
        backend = pgq_backend(options["backend"])
        queues = options["queues"] or sorted(backend.queues) or None
        tasks = backend.tasks()
        try:
            worker = Worker(backend.worker_app(tasks), queues=queues, concurrency=options["concurrency"])
        except InvalidJob as exc:
            raise CommandError(str(exc)) from None
        self.stdout.write(f"pgq worker for backend {backend.alias!r}: {len(tasks)} tasks, queues "
                          f"{', '.join(queues) if queues else '(all)'}, concurrency {options['concurrency']}")
        self.stdout.flush()
        worker.run()
        self.stdout.write("pgq worker stopped")
