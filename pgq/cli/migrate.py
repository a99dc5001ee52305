"""`pgq migrate [--sql]`: upgrade the database to pgq's newest schema, or print the SQL."""

from __future__ import annotations

import argparse
import sys
import time

import psycopg

from .common import EXIT_OK, CliError, Commands, Formatter, connect_dsn, describe_dsn, one_line, resolve_dsn

__all__ = ["register"]


def register(commands: Commands, dsn: argparse.ArgumentParser) -> None:
    """Add this command to `commands` (`dsn`: the parent parser with --dsn and --pgbouncer)."""
    p = commands.add_parser(
        "migrate",
        parents=[dsn],
        formatter_class=Formatter,
        help="upgrade the database to pgq's newest schema (or print the SQL)",
        description=(
            "Upgrade the database to pgq's newest schema revision, in one transaction, under an\n"
            "advisory lock (concurrent runs wait for each other). Does nothing when already up to date.\n"
            "Everything pgq creates lives in the schema `pgq`. When pgq's roles exist (`pgq roles`), the\n"
            "same transaction hands new objects to them and re-grants: no second command is needed."
        ),
    )
    p.add_argument(
        "--sql",
        action="store_true",
        help="print the SQL the upgrade would run and run nothing; without a DSN it is the whole "
        "schema, with one it starts at the database's current revision",
    )
    p.set_defaults(handler=cmd_migrate)


def cmd_migrate(args: argparse.Namespace) -> int:
    """`pgq migrate [--sql]`: upgrade the database to the head revision, or print the upgrade's SQL."""
    from .. import migrate

    raw = resolve_dsn(args, required=not args.sql)
    dsn = None if raw is None else connect_dsn(raw)
    if args.sql:
        sys.stdout.write(migrate.upgrade_sql(dsn))
        return EXIT_OK
    assert dsn is not None
    where = describe_dsn(dsn)
    head = migrate.head_revision()
    try:
        start = migrate.current_revision(dsn)
    except psycopg.OperationalError as exc:
        raise CliError(f"cannot connect to the database: {one_line(exc)}") from None
    if start == head:
        print(f"{where} is already at revision {head} (head): nothing to do")
        return EXIT_OK
    print(f"upgrading {where} from revision {start or 'base (no pgq schema)'} to {head} ...", flush=True)
    started = time.monotonic()
    migrate.upgrade(dsn)
    now_at = migrate.current_revision(dsn)
    print(f"done in {time.monotonic() - started:.2f} s: {where} is at revision {now_at} (head)")
    return EXIT_OK
