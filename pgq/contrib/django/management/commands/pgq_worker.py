"""`manage.py pgq_worker`: a pgq worker running the project's Django tasks, with its settings loaded."""

from __future__ import annotations

import logging
from argparse import ArgumentParser
from typing import Any

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError

from .....cli.logs import setup_logging
from .....cli.worker import add_worker_options, wait_for_database, worker_settings
from .....errors import InvalidJob
from .....worker import Worker
from ..._common import pgq_backend_of as pgq_backend


class Command(BaseCommand):  # type: ignore[misc]  # Django ships no type information
    """Run a pgq worker for the Django tasks of a PgqBackend until SIGTERM or Ctrl-C (drains), with the
    options and defaults of `pgq worker` (--concurrency 10, --worker-id, --drain-timeout, --log-level,
    --metrics-port...)."""

    help = ("Run a pgq worker for the project's Django tasks (those of the installed apps' tasks modules "
            "and of the backend's OPTIONS MODULES) until SIGTERM or Ctrl-C, which let running tasks finish. "
            "The options are those of `pgq worker`.")

    def add_arguments(self, parser: ArgumentParser) -> None:
        """--backend, then `pgq worker`'s options (--queue, --concurrency, --worker-id, --log-level...)."""
        parser.add_argument("--backend", default="default", help="the alias in settings.TASKS (default: default)")
        add_worker_options(parser, queues_default="the backend's QUEUES, or every queue when it names none")

    def handle(self, *args: Any, **options: Any) -> None:
        """Set up logging (unless the project's LOGGING configures the root logger), check the
        database, build the worker and run it; CommandError for a bad backend, setting or database."""
        from argparse import Namespace

        from .....cli.common import CliError, connect_dsn

        backend = pgq_backend(options["backend"])
        ns = Namespace(**options)
        if not _logging_configured():
            setup_logging(options["log_level"], options["log_format"], quiet=options["quiet"])
        else:
            logging.getLogger("pgq").setLevel(options["log_level"])
        try:
            wait_for_database(connect_dsn(backend.dsn), options["connect_wait"])
        except CliError as exc:
            raise CommandError(str(exc), returncode=exc.code) from None
        ns.queues = options["queues"] or sorted(backend.queues) or None
        tasks = backend.tasks()
        try:
            worker = Worker(backend.worker_app(tasks), **worker_settings(ns))
        except InvalidJob as exc:
            raise CommandError(str(exc)) from None
        queues = ns.queues
        self.stdout.write(f"pgq worker for backend {backend.alias!r}: {len(tasks)} tasks, queues "
                          f"{', '.join(queues) if queues else '(all)'}, concurrency {worker.config.concurrency}")
        self.stdout.flush()
        quiet_queues = logging.getLogger("pgq.worker")
        quiet_queues.addFilter(_no_idle_queue_warning)
        try:
            worker.run()
        finally:
            quiet_queues.removeFilter(_no_idle_queue_warning)
        self.stdout.write("pgq worker stopped")


def _no_idle_queue_warning(record: logging.LogRecord) -> bool:
    """Drop the worker's start warning that no task is enqueued into a queue it serves by default: a
    Django task names its queue at enqueue time too (`task.using(queue_name=...)`, any of QUEUES)."""
    return not (getattr(record, "event", None) == "worker_queue_warning"
                and "no task of this app is enqueued there by default" in record.getMessage())


def _logging_configured() -> bool:
    """Whether the project's LOGGING gives the root logger (or pgq's) handlers of its own: then its
    configuration stands and only pgq's level follows --log-level."""
    config = getattr(settings, "LOGGING", None) or {}
    loggers = config.get("loggers", {})
    return bool(config.get("root") or "" in loggers or "pgq" in loggers or "pgq.worker" in loggers)
