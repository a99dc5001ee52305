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
            "Everything pgq creates lives in the schema `pgq`. Once `pgq roles` ran in this database, the\n"
            "same transaction hands new objects to its role sets and re-grants: no second command is\n"
            "needed. A role set that exists only for other databases (roles are cluster-wide) is never\n"
            "granted: migrate names it, and the command that would. It ends with the sets kept granted."
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
    else:
        print(f"upgrading {where} from revision {start or 'base (no pgq schema)'} to {head} ...", flush=True)
        started = time.monotonic()
        migrate.upgrade(dsn)
        now_at = migrate.current_revision(dsn)
        print(f"done in {time.monotonic() - started:.2f} s: {where} is at revision {now_at} (head)")
    report_role_sets(dsn)
    return EXIT_OK


def report_role_sets(dsn: str) -> None:
    """Say which role sets the migration keeps granted in the database at `dsn`, and name the sets
    it left alone (roles are cluster-wide: a set of another database is never granted unasked),
    each with the command that grants or revokes it."""
    from ..role_sets import list_role_sets

    with psycopg.connect(dsn, autocommit=True) as conn:
        found = list_role_sets(conn)
    kept = [s for s in found if s.owns_pgq or (s.granted and s.queues is not None)]
    print("role sets kept granted: " + ("; ".join(s.describe() for s in kept) if kept else "none"))
    for s in found:
        if s in kept:
            continue
        if s.granted:
            print(f"role set {s.prefix} has rights here that migrate does not keep current: "
                  f"`pgq roles --prefix {s.prefix} --apply` grants them again, `--revoke` takes them")
        else:
            print(f"role set {s.prefix} exists in the cluster but has no rights here (not granted): "
                  f"`pgq roles --prefix {s.prefix} --apply` grants it")
