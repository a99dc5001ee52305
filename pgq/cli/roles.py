"""`pgq roles [--apply | --queues Q1,Q2 | --list | --revoke]`: the least-privilege roles script,
printed or run; scoped role sets, the listing of every set, and revoking one."""

from __future__ import annotations

import argparse
import sys
from typing import cast

import psycopg

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
        parents=[dsn_parent("with --apply, --list or --revoke: the database (default: $PGQ_DSN)")],
        formatter_class=Formatter,
        help="print (or --apply) the SQL that creates pgq's least-privilege roles; --list, --revoke",
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
            "exactly these. One transaction, idempotent; nothing outside schema pgq is touched.\n"
            "With --queues, a scoped set beside it: PREFIXproducer and PREFIXworker (no admin) do the\n"
            "same in those queues only (enqueue, read, claim, rescue) and set no limits. --list shows\n"
            "every set and its queues, --revoke takes a set's rights in the database."
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
    scope = p.add_mutually_exclusive_group()
    scope.add_argument(
        "--queues", metavar="Q1,Q2",
        help="a scoped role set: PREFIXproducer and PREFIXworker (no admin) enqueue, read, claim and "
        "rescue only in these queues, and set no limits; several live side by side with the unscoped set",
    )
    scope.add_argument(
        "--list", action="store_true",
        help="list the role sets of the cluster: which have rights in the database, and their queues",
    )
    scope.add_argument(
        "--revoke", action="store_true",
        help="take every right of the role set PREFIX in the database (its roles stay: they are cluster-wide)",
    )
    p.set_defaults(handler=cmd_roles)


def cmd_roles(args: argparse.Namespace) -> int:
    """`pgq roles`: print the least-privilege roles script (or a scoped set's, with --queues), or with
    --apply run it on the database; --list the role sets, --revoke one."""
    from .. import role_sets, roles
    from ..errors import PgqError

    try:
        names = roles.RoleNames.with_prefix(args.prefix)
        queues = None if args.queues is None else role_sets.check_queues(args.queues.split(","))
    except ValueError as exc:
        raise CliError(str(exc), EXIT_USAGE) from None
    if not (args.apply or args.list or args.revoke):
        sys.stdout.write(roles.roles_sql(args.prefix) if queues is None else role_sets.scoped_sql(args.prefix, queues))
        return EXIT_OK
    dsn = connect_dsn(cast(str, resolve_dsn(args)))
    check_database(dsn)
    where = describe_dsn(dsn)
    try:
        if args.list:
            print_role_sets(dsn)
        elif args.revoke:
            role_sets.revoke_role_set(dsn, args.prefix)
            print(f"{where}: role set {args.prefix} has no right left here (its roles stay)")
        elif queues is not None:
            role_sets.apply_scoped(dsn, args.prefix, queues)
            print(f"{where}: roles {names.producer} and {names.worker} are set up for queues {', '.join(queues)}")
        else:
            roles.apply_roles(dsn, args.prefix)
            print(f"{where}: roles {names.producer}, {names.worker} and {names.admin} are set up")
            print_role_sets(dsn, others_of=args.prefix)
    except PgqError as exc:
        raise CliError(str(exc), EXIT_USAGE) from None
    return EXIT_OK


def print_role_sets(dsn: str, *, others_of: str | None = None) -> None:
    """Print the role sets of the cluster as seen from the database at `dsn`: one line each; with
    `others_of`, only the other sets that have rights there, and how to take them (after an apply)."""
    from .. import role_sets

    with psycopg.connect(dsn, autocommit=True) as conn:
        found = role_sets.list_role_sets(conn)
    if others_of is None:
        for one in found:
            print(one.describe())
        if not found:
            print("no role set (PREFIXproducer with PREFIXworker) exists in this cluster")
        return
    for one in found:
        if one.granted and one.prefix != others_of:
            print(f"note: role set {one.describe()}; `pgq roles --prefix {one.prefix} --revoke` takes its rights")
