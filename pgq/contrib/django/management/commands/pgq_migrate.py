"""`manage.py pgq_migrate`: install or upgrade pgq's schema in the backend's database."""

from __future__ import annotations

from argparse import ArgumentParser
from typing import Any

from django.core.management.base import BaseCommand

from ..... import migrate
from ..._common import pgq_backend_of as pgq_backend


class Command(BaseCommand):  # type: ignore[misc]  # Django ships no type information
    """Migrate the database of a PgqBackend to pgq's head revision (schema `pgq`, its own version
    table: Django's migrations are not involved)."""

    help = "Install or upgrade pgq's schema (schema pgq) in the database of a pgq task backend."

    def add_arguments(self, parser: ArgumentParser) -> None:
        """--backend, --sql."""
        parser.add_argument("--backend", default="default", help="the alias in settings.TASKS (default: default)")
        parser.add_argument("--sql", action="store_true", help="print the SQL it would run instead of running it")

    def handle(self, *args: Any, **options: Any) -> None:
        """Upgrade (or print the SQL); the database's revision before and after on stdout."""
        dsn = pgq_backend(options["backend"]).dsn
        if options["sql"]:
            self.stdout.write(migrate.upgrade_sql(dsn))
            return
        before = migrate.current_revision(dsn)
        migrate.upgrade(dsn)
        after = migrate.current_revision(dsn)
        if before == after:
            self.stdout.write(f"pgq schema already at revision {after}")
        else:
            self.stdout.write(f"pgq schema migrated from {before or 'nothing'} to revision {after}")
