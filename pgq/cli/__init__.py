"""The `pgq` command line: migrate, run workers, enqueue, inspect and manage jobs, run the demo.

Each command group lives in a module of this package that owns its arguments and its handler
(`register` adds it to the parser); `COMMANDS` lists them in the order `pgq --help` shows. `main(argv)`
is the whole program (the `pgq` console script and `python -m pgq` call it); it returns the
exit status instead of exiting, so tests can call it in-process. Exit statuses:

- 0: success;
- 1: an operational error: the database cannot be reached, is not migrated, a job is not found or is
  in the wrong state for the operation;
- 2: bad arguments or input (argparse's usage errors, a payload that is not a JSON object, a job pgq
  rejects), and a worker whose database waiting cannot fix (no such database or role, wrong
  credentials, pgq's schema missing).

Every expected error is reported as ONE line on stderr, ``pgq: error: <message>``, never a traceback.
Connections fail fast: the DSN gets ``connect_timeout=5`` unless it sets its own.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.metadata
import os
import sys
from collections.abc import Callable, Sequence

import psycopg

from ..errors import InvalidJob, PgqError
from . import bench, dashboard, demo, enqueue, init, jobs, migrate, purge, queue, roles, status, worker, workers
from .args import parse_duration
from .common import (
    CONNECT_TIMEOUT_S,
    ENV_DSN,
    EXIT_ERROR,
    EXIT_USAGE,
    PGBOUNCER_HELP,
    CliError,
    Formatter,
    connect_dsn,
    describe_dsn,
    dsn_parent,
    fail,
    one_line,
)
from .logs import JsonLogFormatter, TextLogFormatter, setup_logging
from .parser import Parser
from .render import format_age, format_duration, render_table
from .status import format_status

__all__ = [
    "COMMANDS",
    "CONNECT_TIMEOUT_S",
    "ENV_DSN",
    "CliError",
    "JsonLogFormatter",
    "TextLogFormatter",
    "build_parser",
    "connect_dsn",
    "describe_dsn",
    "format_age",
    "format_duration",
    "format_status",
    "main",
    "package_version",
    "parse_duration",
    "render_table",
    "setup_logging",
]

COMMANDS = (init, migrate, roles, worker, enqueue, status, workers, queue, jobs, purge, dashboard, demo, bench)
"""The command modules, in the order of `pgq --help`; each has `register(commands, dsn_parent)`."""


def main(argv: Sequence[str] | None = None) -> int:
    """Run the `pgq` command line with `argv` (default: ``sys.argv[1:]``); return the exit status.

    Never raises for expected errors: they are printed as one line on stderr (see the module
    docstring for the exit statuses). ``--help`` prints help and returns 0. Unexpected exceptions
    (bugs) propagate with their traceback.
    """
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:  # --help (0) or a usage error (2, message already printed)
        return exc.code if isinstance(exc.code, int) else EXIT_USAGE
    handler: Callable[[argparse.Namespace], int] = args.handler
    try:
        return handler(args)
    except CliError as exc:
        return fail(str(exc), exc.code)
    except InvalidJob as exc:
        return fail(str(exc), EXIT_USAGE)
    except PgqError as exc:
        return fail(str(exc), EXIT_ERROR)
    except psycopg.OperationalError as exc:
        return fail(f"database connection failed: {one_line(exc)}", EXIT_ERROR)
    except psycopg.Error as exc:
        return fail(f"database error: {one_line(exc)}", EXIT_ERROR)
    except BrokenPipeError:
        # The reader of our output went away (`pgq jobs list | head`): not an error worth a word.
        with contextlib.suppress(OSError):
            sys.stdout = open(os.devnull, "w")  # noqa: SIM115 - silences the flush at exit
        return EXIT_ERROR
    except KeyboardInterrupt:
        print(file=sys.stderr)
        return 130


_DESCRIPTION = """\
pgq: a Postgres-native job queue.

Every command takes --dsn (a libpq connection string or postgresql:// URL), which defaults to the
PGQ_DSN environment variable. Run `pgq COMMAND --help` for the options of a command."""

_EPILOG = """\
exit status:
  0  success
  1  error: the database cannot be reached or is not migrated, no such job, wrong job state
  2  bad arguments or input (nothing was written); for `pgq worker`, also a database that
     waiting cannot fix: no such database or role, wrong credentials, not migrated

examples:
  export PGQ_DSN=postgresql://postgres@localhost:5432/app
  pgq migrate
  pgq enqueue email.send --payload '{"to": "a@example.com"}'
  pgq worker myapp.tasks:app --concurrency 8
  pgq roles > roles.sql              # least-privilege roles, for a DBA
  pgq status
  pgq dashboard                      # web UI on http://127.0.0.1:8787/ (pgq-jobs[web])
  pgq demo"""


def package_version() -> str:
    """The installed version of pgq (distribution pgq-jobs); "unknown" when it is not installed."""
    try:
        return importlib.metadata.version("pgq-jobs")
    except importlib.metadata.PackageNotFoundError:
        return "unknown"


def build_parser() -> argparse.ArgumentParser:
    """Return the argument parser of the `pgq` command, every sub-command and option documented.

    Each sub-command's namespace carries `handler`, the function that runs it.
    """
    parser = Parser(prog="pgq", description=_DESCRIPTION, epilog=_EPILOG, formatter_class=Formatter)
    parser.add_argument("--version", action="version", version=f"pgq {package_version()}",
                        help="print pgq's version and exit")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    dsn = dsn_parent(pgbouncer_help=PGBOUNCER_HELP)
    for command in COMMANDS:
        command.register(commands, dsn)
    return parser
