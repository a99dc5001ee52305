"""`pgq roles [--apply]`: the least-privilege roles script, printed or run."""

from __future__ import annotations

import argparse
import sys
from typing import cast

from .common import (
    EXIT_OK,
    EXIT_USAGE,
    CliError,
    Commands,
    Formatter,
    check_database,
    connect_dsn,
    describe_dsn,
    dsn_parent,
    resolve_dsn,
)

__all__ = ["register"]


def register(commands: Commands, dsn: argparse.ArgumentParser) -> None:
    """Add this command to `commands` (`dsn`: the parent parser with --dsn and --pgbouncer)."""
    p = commands.add_parser(
        "roles",
        parents=[dsn_parent("with --apply: the database to run the script in (default: $PGQ_DSN)")],
        formatter_class=Formatter,
        help="print (or --apply) the SQL that creates pgq's least-privilege roles",
        description=(
            "Print the SQL script a DBA runs once per database to set up three NOLOGIN roles, then\n"
            "grant them to service accounts (`pgq migrate` keeps their grants current afterwards):\n"
            "  PREFIXproducer  enqueue (pgq.enqueue) and read jobs; cannot change or delete any job\n"
            "  PREFIXworker    a producer that also claims jobs, and finishes, fails, heartbeats or\n"
            "                  snoozes the attempts it holds (through functions that check the lease\n"
            "                  token), rescues expired leases, enqueues periodic ticks and sets\n"
            "                  concurrency limits; it cannot change a job it does not hold, cancel,\n"
            "                  retry, delete (workers with only this role skip retention) or alter tables\n"
            "  PREFIXadmin     owns schema pgq and its objects: cancel, retry, purge, migrate\n"
            "Roles missing are created (needs CREATEROLE; roles are cluster-wide), ownership of pgq's\n"
            "objects moves to the admin role (needs a superuser or their owner), grants are reset to\n"
            "exactly these. One transaction, idempotent; nothing outside schema pgq is touched."
        ),
    )
    p.add_argument(
        "--prefix", metavar="PREFIX", default="pgq_",
        help="role names are PREFIXproducer, PREFIXworker, PREFIXadmin (default: pgq_)",
    )
    p.add_argument(
        "--apply", action="store_true",
        help="run the script on the database (--dsn or $PGQ_DSN, migrated first) instead of printing it",
    )
    p.set_defaults(handler=cmd_roles)


def cmd_roles(args: argparse.Namespace) -> int:
    """`pgq roles [--apply]`: print the least-privilege roles script, or run it on the database."""
    from .. import roles

    try:
        names = roles.RoleNames.with_prefix(args.prefix)
    except ValueError as exc:
        raise CliError(str(exc), EXIT_USAGE) from None
    if not args.apply:
        sys.stdout.write(roles.roles_sql(args.prefix))
        return EXIT_OK
    dsn = connect_dsn(cast(str, resolve_dsn(args)))
    check_database(dsn)
    roles.apply_roles(dsn, args.prefix)
    print(f"{describe_dsn(dsn)}: roles {names.producer}, {names.worker} and {names.admin} are set up")
    return EXIT_OK
