"""What every `pgq` command shares: exit statuses, the one-line error, the help formatter, the
`--dsn` option and how a command connects (fail-fast timeout, schema check, a small Queue)."""

from __future__ import annotations

import argparse
import contextlib
import getpass
import os
import sys
from collections.abc import Iterator
from typing import TypeAlias, cast

import psycopg
from psycopg.conninfo import conninfo_to_dict, make_conninfo

from .. import _ops, _sql
from ..app import App, load_app
from ..client import Queue
from ..errors import InvalidJob

__all__ = [
    "ACTOR_HELP",
    "CONNECT_TIMEOUT_S",
    "ENV_DSN",
    "EXIT_ERROR",
    "EXIT_OK",
    "EXIT_USAGE",
    "PGBOUNCER_HELP",
    "CliError",
    "Commands",
    "Formatter",
    "actor_of",
    "add_actor",
    "check_database",
    "connect_dsn",
    "describe_dsn",
    "dsn_parent",
    "fail",
    "load_cli_app",
    "one_line",
    "open_queue",
    "queue_exists",
    "resolve_dsn",
    "warn",
]

Commands: TypeAlias = "argparse._SubParsersAction[argparse.ArgumentParser]"
"""The sub-command registry each command module adds itself to."""

ENV_DSN = "PGQ_DSN"
CONNECT_TIMEOUT_S = 5
"""Seconds to wait for a connection before giving up (libpq's connect_timeout), unless the DSN says."""

EXIT_OK = 0
EXIT_ERROR = 1
EXIT_USAGE = 2


class CliError(Exception):
    """An expected failure of a command: reported as one line ``pgq: error: <message>``, exit `code`."""

    def __init__(self, message: str, code: int = EXIT_ERROR) -> None:
        super().__init__(message)
        self.code = code


def one_line(exc: BaseException | str) -> str:
    """Return an error message on one line: its lines stripped and joined with "; "."""
    lines = [line.strip() for line in str(exc).splitlines()]
    return "; ".join(line for line in lines if line) or type(exc).__name__


ACTOR_HELP = (
    "who asks, recorded in pgq's audit with your database role (pgq.job_audit, pgq.control_audit) and shown "
    "by `pgq jobs explain` and the dashboard; unverified: the role is what the database checked "
    "(default: os:<your OS user name>)"
)


def add_actor(p: argparse.ArgumentParser) -> None:
    """Add `--actor NAME` to a command that changes jobs or queues (see `actor_of`)."""
    p.add_argument("--actor", metavar="NAME", default=None, help=ACTOR_HELP)


def actor_of(args: argparse.Namespace) -> str | None:
    """Who a command's action is recorded as: `--actor NAME` as given, else ``os:<user>``, the name of
    the OS account running the command (getpass.getuser(): $LOGNAME, $USER, ... or the password
    database), prefixed so that nobody takes it for a checked identity; None when neither is known
    (the database role is recorded either way). Raises CliError (usage) for an empty or NUL-holding
    NAME, or one over pgq._ops.ACTOR_MAX characters."""
    if args.actor is not None:
        try:
            named = _ops.check_actor(args.actor)
        except InvalidJob as exc:
            raise CliError(f"--actor: {exc}", EXIT_USAGE) from None
        if named is None:
            raise CliError("--actor: give a non-empty NAME", EXIT_USAGE)
        return named
    try:
        user = getpass.getuser()
    except Exception:  # no $USER and no password entry (a container's bare uid): the role stands alone
        return None
    return f"os:{user}"[:_ops.ACTOR_MAX] if user else None


def warn(message: str) -> None:
    """Print `message` as ``pgq: warning: <message>`` on stderr (the command goes on)."""
    print(f"pgq: warning: {message}", file=sys.stderr)


def queue_exists(queue: Queue, name: str) -> bool:
    """Whether any job, in any status, belongs to queue `name` (sql/queue_exists.sql): pgq keeps no
    table of queues, so a queue exists while it holds jobs."""
    with queue.pool.connection() as conn:
        row = conn.execute(_sql.query("queue_exists"), {"queue": name}).fetchone()
    return bool(row and row[0])


def load_cli_app(spec: str) -> App:
    """Load the App named by `spec` ('module:attribute') for a command (`--app`, `pgq worker`), with
    the current directory importable first, as `python -m` has it. Raises PgqError (one line) when
    the module or attribute is missing or not an App."""
    cwd = os.getcwd()
    if cwd not in sys.path:
        sys.path.insert(0, cwd)
    return load_app(spec)


def fail(message: str, code: int) -> int:
    """Print `message` as ``pgq: error: <message>`` on stderr; return `code`."""
    print(f"pgq: error: {message}", file=sys.stderr)
    return code


class Formatter(argparse.RawDescriptionHelpFormatter):
    """Keeps the line breaks of descriptions and epilogs; wraps option help as usual."""

    def __init__(self, prog: str) -> None:
        super().__init__(prog, max_help_position=32, width=min(100, _terminal_width()))

    def add_argument(self, action: argparse.Action) -> None:
        """As argparse's, but a sub-command's name is measured with the indentation it is printed
        with (argparse leaves it out), so that the longest name keeps its summary on its line."""
        super().add_argument(action)
        if action.help is not argparse.SUPPRESS:
            for sub in self._iter_indented_subactions(action):
                length = len(self._format_action_invocation(sub)) + self._current_indent
                self._action_max_length = max(self._action_max_length, length)


def _terminal_width() -> int:
    try:
        return os.get_terminal_size().columns
    except OSError:
        return 100


PGBOUNCER_HELP = "the DSN is a PgBouncer in transaction pooling mode: prepare no statements"


def dsn_parent(dsn_help: str | None = None, *, pgbouncer_help: str | None = None) -> argparse.ArgumentParser:
    """A parent parser with `--dsn` (help `dsn_help`, or the usual one, followed by the warning that a
    password on the command line shows in `ps`) and, given `pgbouncer_help`, `--pgbouncer`."""
    parent = argparse.ArgumentParser(add_help=False)
    parent.add_argument(
        "--dsn",
        metavar="DSN",
        default=None,
        help=(dsn_help or f"database to use: a libpq connection string or postgresql:// URL (default: ${ENV_DSN})")
        + f"; a password given here shows in `ps` to other users of the machine: prefer ${ENV_DSN} or ~/.pgpass",
    )
    if pgbouncer_help:
        parent.add_argument("--pgbouncer", action="store_true", help=pgbouncer_help)
    return parent


def resolve_dsn(args: argparse.Namespace, *, required: bool = True) -> str | None:
    """Return the DSN of `--dsn`, else of $PGQ_DSN (an empty value counts as unset).

    With `required`, raises CliError (exit 2) when neither is given.
    """
    dsn = args.dsn or os.environ.get(ENV_DSN) or None
    if dsn is None and required:
        raise CliError(f"no database given: pass --dsn DSN or set {ENV_DSN}", EXIT_USAGE)
    return dsn


def connect_dsn(dsn: str) -> str:
    """Return `dsn` with ``connect_timeout`` set to CONNECT_TIMEOUT_S unless it sets one itself.

    The result is a key=value connection string. Raises CliError (exit 2) for a DSN libpq cannot
    parse; the message never repeats the DSN, which may hold a password.
    """
    try:
        params = conninfo_to_dict(dsn)
    except psycopg.ProgrammingError as exc:
        raise CliError(f"invalid DSN: {one_line(exc)}", EXIT_USAGE) from None
    if params.get("connect_timeout"):
        return make_conninfo(dsn)
    return make_conninfo(dsn, connect_timeout=CONNECT_TIMEOUT_S)


def describe_dsn(dsn: str) -> str:
    """Describe the database of `dsn` for messages (name, host, port), never showing a password."""
    try:
        params = conninfo_to_dict(dsn)
    except psycopg.ProgrammingError:
        return "the database"
    name = params.get("dbname") or params.get("user") or "(default)"
    host = str(params.get("host") or "localhost")
    where = host if host.startswith("/") else f"{host}:{params.get('port') or 5432}"
    return f'database "{name}" on {where}'


def check_database(dsn: str) -> None:
    """Connect to `dsn` (fail-fast timeout applied by the caller) and check pgq's schema is current.

    Raises CliError when the database cannot be reached and NotMigrated (whose message says to run
    `pgq migrate`) when its schema is missing or outdated.
    """
    from .. import migrate

    try:
        conn = psycopg.connect(dsn, autocommit=True)
    except psycopg.OperationalError as exc:
        raise CliError(f"cannot connect to the database: {one_line(exc)}") from None
    with conn:
        migrate.ensure_migrated(conn)


@contextlib.contextmanager
def open_queue(args: argparse.Namespace) -> Iterator[Queue]:
    """Yield a Queue on the command's database, after checking it is reachable and migrated.

    Raises CliError (no DSN, bad DSN, unreachable) or NotMigrated before yielding.
    """
    dsn = connect_dsn(cast(str, resolve_dsn(args)))
    check_database(dsn)
    # A small pool: a command runs its statements one after another. Its wait for a connection is
    # bounded too, should the server go away after the check.
    with Queue(dsn, min_size=1, max_size=2, timeout=2 * CONNECT_TIMEOUT_S, pgbouncer=args.pgbouncer) as queue:
        yield queue
