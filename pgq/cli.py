"""The `pgq` command line: migrate, run workers, enqueue, inspect and manage jobs, run the demo.

`main(argv)` is the whole program (the `pgq` console script and `python -m pgq` call it); it returns the
exit status instead of exiting, so tests can call it in-process. Exit statuses:

- 0: success;
- 1: an operational error: the database cannot be reached, is not migrated, a job is not found or is
  in the wrong state for the operation;
- 2: bad arguments or input (argparse's usage errors, a payload that is not JSON, a job pgq rejects).

Every expected error is reported as ONE line on stderr, ``pgq: error: <message>``, never a traceback.
Connections fail fast: the DSN gets ``connect_timeout=5`` unless it sets its own.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import datetime as dt
import json
import logging
import math
import os
import re
import sys
import time
from collections.abc import Callable, Collection, Iterator, Mapping, Sequence
from typing import Any, NoReturn, TextIO, cast

import psycopg
from psycopg.conninfo import conninfo_to_dict, make_conninfo

from . import _ops, _sql
from .app import load_app
from .client import Queue
from .errors import InvalidJob, PgqError
from .models import PRIORITY_MAX, PRIORITY_MIN, Job, JobSpec, JobStatus

__all__ = [
    "CONNECT_TIMEOUT_S",
    "ENV_DSN",
    "CliError",
    "JsonLogFormatter",
    "TextLogFormatter",
    "build_parser",
    "connect_dsn",
    "format_age",
    "format_duration",
    "format_status",
    "main",
    "parse_duration",
    "render_table",
    "setup_logging",
]

ENV_DSN = "PGQ_DSN"
CONNECT_TIMEOUT_S = 5
"""Seconds to wait for a connection before giving up (libpq's connect_timeout), unless the DSN says."""

EXIT_OK = 0
EXIT_ERROR = 1
EXIT_USAGE = 2

BIGINT_MAX = 2**63 - 1
JOBS_LIST_DEFAULT_LIMIT = 50
JOBS_LIST_MAX_LIMIT = 100_000
DEMO_QUEUE = "pgq-demo"
"""The queue `pgq demo` uses, so its jobs never mix with real ones."""

logger = logging.getLogger("pgq.cli")


class CliError(Exception):
    """An expected failure of a command: reported as one line ``pgq: error: <message>``, exit `code`."""

    def __init__(self, message: str, code: int = EXIT_ERROR) -> None:
        super().__init__(message)
        self.code = code


# ---------------------------------------------------------------------------------------------
# Entry point


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
        return _fail(str(exc), exc.code)
    except InvalidJob as exc:
        return _fail(str(exc), EXIT_USAGE)
    except PgqError as exc:
        return _fail(str(exc), EXIT_ERROR)
    except psycopg.OperationalError as exc:
        return _fail(f"database connection failed: {one_line(exc)}", EXIT_ERROR)
    except psycopg.Error as exc:
        return _fail(f"database error: {one_line(exc)}", EXIT_ERROR)
    except BrokenPipeError:
        # The reader of our output went away (`pgq jobs list | head`): not an error worth a word.
        with contextlib.suppress(OSError):
            sys.stdout = open(os.devnull, "w")  # noqa: SIM115 - silences the flush at exit
        return EXIT_ERROR
    except KeyboardInterrupt:
        print(file=sys.stderr)
        return 130


def _fail(message: str, code: int) -> int:
    print(f"pgq: error: {message}", file=sys.stderr)
    return code


def one_line(exc: BaseException | str) -> str:
    """Return an error message on one line: its lines stripped and joined with "; "."""
    lines = [line.strip() for line in str(exc).splitlines()]
    return "; ".join(line for line in lines if line) or type(exc).__name__


# ---------------------------------------------------------------------------------------------
# The parser


_DESCRIPTION = """\
pgq: a Postgres-native job queue.

Every command takes --dsn (a libpq connection string or postgresql:// URL), which defaults to the
PGQ_DSN environment variable. Run `pgq COMMAND --help` for the options of a command."""

_EPILOG = """\
exit status:
  0  success
  1  error: the database cannot be reached or is not migrated, no such job, wrong job state
  2  bad arguments or input (nothing was written)

examples:
  export PGQ_DSN=postgresql://postgres@localhost:5432/app
  pgq migrate
  pgq enqueue email.send --payload '{"to": "a@example.com"}'
  pgq worker myapp.tasks:app --concurrency 8
  pgq roles > roles.sql              # least-privilege roles, for a DBA
  pgq status
  pgq demo"""


class _Formatter(argparse.RawDescriptionHelpFormatter):
    """Keeps the line breaks of descriptions and epilogs; wraps option help as usual."""

    def __init__(self, prog: str) -> None:
        super().__init__(prog, max_help_position=32, width=min(100, _terminal_width()))


def _terminal_width() -> int:
    try:
        return os.get_terminal_size().columns
    except OSError:
        return 100


_PGBOUNCER_HELP = "the DSN is a PgBouncer in transaction pooling mode: prepare no statements"


def _dsn_parent(dsn_help: str | None = None, *, pgbouncer_help: str | None = None) -> argparse.ArgumentParser:
    parent = argparse.ArgumentParser(add_help=False)
    parent.add_argument(
        "--dsn",
        metavar="DSN",
        default=None,
        help=dsn_help
        or f"database to use: a libpq connection string or postgresql:// URL (default: ${ENV_DSN})",
    )
    if pgbouncer_help:
        parent.add_argument("--pgbouncer", action="store_true", help=pgbouncer_help)
    return parent


def build_parser() -> argparse.ArgumentParser:
    """Return the argument parser of the `pgq` command, every sub-command and option documented.

    Each sub-command's namespace carries `handler`, the function that runs it.
    """
    parser = argparse.ArgumentParser(
        prog="pgq", description=_DESCRIPTION, epilog=_EPILOG, formatter_class=_Formatter
    )
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    dsn = _dsn_parent(pgbouncer_help=_PGBOUNCER_HELP)

    p = commands.add_parser(
        "migrate",
        parents=[dsn],
        formatter_class=_Formatter,
        help="upgrade the database to pgq's newest schema (or print the SQL)",
        description=(
            "Upgrade the database to pgq's newest schema revision, in one transaction, under an\n"
            "advisory lock (concurrent runs wait for each other). Does nothing when already up to date.\n"
            "Everything pgq creates lives in the schema `pgq`."
        ),
    )
    p.add_argument(
        "--sql",
        action="store_true",
        help="print the SQL the upgrade would run and run nothing; without a DSN it is the whole "
        "schema, with one it starts at the database's current revision",
    )
    p.set_defaults(handler=cmd_migrate)

    p = commands.add_parser(
        "roles",
        parents=[_dsn_parent("with --apply: the database to run the script in (default: $PGQ_DSN)")],
        formatter_class=_Formatter,
        help="print (or --apply) the SQL that creates pgq's least-privilege roles",
        description=(
            "Print the SQL script a DBA runs once per database (and again after each `pgq migrate`)\n"
            "to set up three NOLOGIN roles, then grant them to service accounts:\n"
            "  PREFIXproducer  enqueue (pgq.enqueue) and read jobs; cannot change or delete any job\n"
            "  PREFIXworker    a producer that also claims, finishes, heartbeats and rescues jobs,\n"
            "                  enqueues periodic ticks and sets concurrency limits; it cannot cancel,\n"
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

    p = commands.add_parser(
        "worker",
        parents=[
            _dsn_parent(
                "connect the worker to DSN instead of the App's own database (default: the DSN "
                f"or pool the App was built with; ${ENV_DSN} is not consulted). The database must be "
                "reachable and migrated before the worker starts",
                pgbouncer_help="the worker's database (--dsn, else the App's) is a PgBouncer in transaction "
                "pooling mode: prepare no statements, and LISTEN only on --listen-dsn (without it, poll)",
            )
        ],
        formatter_class=_Formatter,
        help="run a worker for the tasks of an App",
        description=(
            "Run a worker for the tasks registered on an App until SIGTERM or SIGINT. On the first\n"
            "signal it stops claiming, lets running jobs finish for up to --drain-timeout seconds, then\n"
            "hands the unfinished ones back to the queue; a second signal aborts at once.\n"
            "The current directory is importable, as with `python -m`."
        ),
    )
    p.add_argument("app", metavar="MODULE:APP", help="where the App is, e.g. myapp.tasks:app")
    p.add_argument(
        "--queue",
        dest="queues",
        metavar="Q",
        action="append",
        type=_non_empty("queue"),
        help="work on queue Q; repeat for several (default: every queue)",
    )
    p.add_argument(
        "--concurrency", metavar="N", type=_int_range("concurrency", 1, 10_000),
        help="jobs run at once by this worker; also its threads for sync handlers (default: 10)",
    )
    p.add_argument(
        "--prefetch", metavar="N", type=_int_range("prefetch", 0, 100_000),
        help="jobs claimed ahead of free slots and held (leased, heartbeated) until one frees: fewer, "
        "bigger claims; 0 claims only for free slots (default: adaptive, about 0.25 s of work at the "
        "rate jobs start, between the concurrency and 2048 jobs, and no more than 32 MiB of payload at "
        "the size claims bring)",
    )
    p.add_argument(
        "--lease", metavar="SECONDS", type=_seconds("lease", positive=True),
        help="lease of each claimed job, renewed by heartbeats every third of it; the job of a worker "
        "that died is rescued about half a lease after its lease expired, and a database session stuck "
        "for half a lease sending a pgq statement's result to a frozen client is ended (default: 60)",
    )
    p.add_argument(
        "--poll-interval", metavar="SECONDS", type=_seconds("poll interval", positive=True),
        help="how often to look for jobs when no notification arrives, jittered (default: 1)",
    )
    p.add_argument(
        "--drain-timeout", metavar="SECONDS", type=_seconds("drain timeout", positive=False),
        help="on shutdown, how long running jobs may take to finish before they are handed back to "
        "the queue (default: 30)",
    )
    p.add_argument(
        "--listen-dsn", metavar="DSN", type=_non_empty("listen-dsn"),
        help="open the LISTEN connection (wake-ups on NOTIFY) here, e.g. a direct connection to the "
        "database when --dsn is a PgBouncer in transaction mode (default: the worker's DSN)",
    )
    p.add_argument(
        "--claimed-by", metavar="NAME", type=_non_empty("claimed-by"),
        help="worker name recorded on the jobs it claims (default: HOST-PID)",
    )
    p.add_argument(
        "--metrics-port", metavar="PORT", type=_int_range("metrics port", 0, 65535),
        help="serve Prometheus metrics at http://HOST:PORT/metrics: jobs claimed, succeeded, retried, "
        "failed, rescued and lease losses by queue and kind, a job duration histogram, queue depth and "
        "oldest ready age from the database (read at most every 5 s), LISTEN reconnects; 0 picks a "
        "free port (logged) (default: no metrics server)",
    )
    p.add_argument(
        "--metrics-host", metavar="HOST", type=_non_empty("metrics host"),
        help="address the metrics server binds; 0.0.0.0 for every interface (default: 127.0.0.1)",
    )
    p.add_argument(
        "--log-level", metavar="LEVEL", default="INFO", type=str.upper,
        choices=["DEBUG", "INFO", "WARNING", "ERROR"],
        help="DEBUG, INFO, WARNING or ERROR; INFO logs the worker's start, stop and recoveries, retries "
        "at WARNING and failures at ERROR; DEBUG adds one line per job start and success (default: INFO)",
    )
    p.add_argument(
        "--log-format", default="text", choices=["text", "json"],
        help="text: one readable line per event; json: one JSON object per line (default: text)",
    )
    p.set_defaults(handler=cmd_worker)

    p = commands.add_parser(
        "enqueue",
        parents=[dsn],
        formatter_class=_Formatter,
        help="enqueue one job and print its id",
        description=(
            "Enqueue one job and print its id. With --dedupe-key, when an active job of the queue\n"
            "already holds the key, nothing is created and that job's id is printed."
        ),
    )
    p.add_argument("kind", metavar="KIND", help="the task to run, e.g. email.send")
    p.add_argument(
        "--payload", metavar="JSON", default=None,
        help="the job's arguments as a JSON value, usually an object (default: {})",
    )
    p.add_argument("--queue", metavar="Q", default="default", help="queue (default: default)")
    p.add_argument(
        "--priority", metavar="N", type=_int_range("priority", PRIORITY_MIN, PRIORITY_MAX), default=0,
        help=f"lower runs first, {PRIORITY_MIN}..{PRIORITY_MAX} (default: 0)",
    )
    p.add_argument(
        "--delay", metavar="SECONDS", type=_seconds("delay", positive=False), default=None,
        help="run no earlier than this many seconds from now (default: at once)",
    )
    p.add_argument(
        "--dedupe-key", metavar="K", default=None,
        help="at most one active (queued or running) job of the queue holds key K",
    )
    p.add_argument(
        "--watermark", metavar="N", type=_int_range("watermark", -BIGINT_MAX - 1, BIGINT_MAX), default=None,
        help="input version for a deduplicated job: a higher one arriving while the job runs makes "
        "it run once more; one already processed creates nothing (needs --dedupe-key)",
    )
    p.add_argument(
        "--max-attempts", metavar="N", type=_int_range("max attempts", 1, 32_767), default=None,
        help="attempts before the job fails for good (default: the database default)",
    )
    p.set_defaults(handler=cmd_enqueue)

    p = commands.add_parser(
        "status",
        parents=[dsn],
        formatter_class=_Formatter,
        help="show a table of the queues",
        description=(
            "Show one row per queue that holds jobs:\n"
            "  READY      queued jobs due now          SCHEDULED  queued jobs due later\n"
            "  RUNNING    claimed by a worker          EXPIRED    running, lease expired (to be rescued)\n"
            "  FAILED     failed for good              OLDEST     age of the oldest ready job\n"
            "  DONE/MIN   jobs that succeeded in the last minute (throughput)"
        ),
    )
    p.add_argument("--json", action="store_true", help="print JSON (ages in seconds) instead of a table")
    p.set_defaults(handler=cmd_status)

    p = commands.add_parser(
        "jobs",
        formatter_class=_Formatter,
        help="list, show, retry or cancel jobs",
        description="List, show, retry or cancel jobs.",
    )
    jobs = p.add_subparsers(dest="jobs_command", metavar="ACTION", required=True)

    q = jobs.add_parser(
        "list",
        parents=[dsn],
        formatter_class=_Formatter,
        help="list jobs, newest first",
        description="List jobs matching every given filter, newest first.",
    )
    q.add_argument(
        "--status", metavar="S", type=_status,
        help=f"only jobs in status S: {', '.join(s.value for s in JobStatus)}",
    )
    q.add_argument("--queue", metavar="Q", help="only jobs of queue Q (an error if Q holds no jobs at all)")
    q.add_argument("--kind", metavar="K", help="only jobs of kind K")
    q.add_argument(
        "--limit", metavar="N", type=_int_range("limit", 1, JOBS_LIST_MAX_LIMIT), default=JOBS_LIST_DEFAULT_LIMIT,
        help=f"show at most N jobs, 1..{JOBS_LIST_MAX_LIMIT} (default: {JOBS_LIST_DEFAULT_LIMIT})",
    )
    q.add_argument("--json", action="store_true", help="print a JSON array of jobs instead of a table")
    q.set_defaults(handler=cmd_jobs_list)

    q = jobs.add_parser(
        "show", parents=[dsn], formatter_class=_Formatter, help="show every field of one job",
        description="Show every field of one job; payload and result as indented JSON.",
    )
    q.add_argument("id", metavar="ID", type=_job_id, help="job id")
    q.add_argument("--json", action="store_true", help="print the job as one JSON object")
    q.set_defaults(handler=cmd_jobs_show)

    q = jobs.add_parser(
        "retry", parents=[dsn], formatter_class=_Formatter, help="queue a failed or cancelled job again",
        description="Queue a failed or cancelled job again, with fresh attempts, due now.",
    )
    q.add_argument("id", metavar="ID", type=_job_id, help="job id")
    q.set_defaults(handler=cmd_jobs_retry)

    q = jobs.add_parser(
        "cancel", parents=[dsn], formatter_class=_Formatter, help="cancel a queued or running job",
        description=(
            "Cancel a queued or running job. A running job's handler is not interrupted, but its\n"
            "worker can no longer finish it (the attempt's lease is revoked)."
        ),
    )
    q.add_argument("id", metavar="ID", type=_job_id, help="job id")
    q.set_defaults(handler=cmd_jobs_cancel)

    p = commands.add_parser(
        "purge",
        parents=[dsn],
        formatter_class=_Formatter,
        help="delete finished jobs older than a duration",
        description=(
            "Delete succeeded, failed and cancelled jobs that finished more than DURATION ago, in\n"
            "small batches (each its own short transaction), and print how many were deleted.\n"
            "Queued and running jobs are never touched."
        ),
    )
    p.add_argument(
        "--older-than", metavar="DURATION", type=_duration_arg, required=True,
        help="e.g. 7d, 12h, 30m, 45s, 1h30m, or plain seconds (0 deletes every finished job)",
    )
    p.set_defaults(handler=cmd_purge)

    p = commands.add_parser(
        "demo",
        parents=[
            _dsn_parent(
                f"database to run the demo in (default: ${ENV_DSN}; with neither, an embedded "
                "PostgreSQL is started in a temporary directory and removed afterwards); it is "
                f"migrated if needed and the demo's jobs stay in queue {DEMO_QUEUE!r}"
            )
        ],
        formatter_class=_Formatter,
        help="run a demo: a producer and workers, then a report of what happened",
        description=(
            "Enqueue jobs of a small demo App, run workers on them in this process, and report what\n"
            "happened: outcomes per task, retries, deduplicated enqueues, a watermark re-run, throughput."
        ),
    )
    p.add_argument(
        "--jobs", metavar="N", type=_int_range("jobs", 10, 100_000), default=200,
        help="number of jobs to enqueue, 10..100000 (default: 200)",
    )
    p.add_argument(
        "--workers", metavar="N", type=_int_range("workers", 1, 16), default=2,
        help="workers to run, 1..16 (default: 2)",
    )
    p.set_defaults(handler=cmd_demo)

    p = commands.add_parser(
        "bench",
        parents=[
            _dsn_parent(
                f"database to benchmark in (default: ${ENV_DSN}); it is migrated if needed, and the run's "
                "jobs live in a fresh queue 'pgq-bench-<random>' that is deleted at the end"
            )
        ],
        formatter_class=_Formatter,
        help="measure enqueue, drain and wake-up latency; print one JSON line",
        description=(
            "Run one workload of the shared peer benchmark and print its result as one JSON line on\n"
            "stdout (progress on stderr):\n"
            "  w1  enqueue one job per call (default 5000 jobs, after 50 untimed calls)\n"
            "  w2  enqueue in batches of 1000 (default 50000 jobs)\n"
            "  w3  drain prefilled no-op jobs with worker subprocesses (default 20000 jobs); every job\n"
            "      must succeed after exactly one attempt\n"
            "  w4  wake-up latency of an idle worker, enqueue to handler start, 20 jobs/s (default 300)"
        ),
    )
    p.add_argument("--workload", required=True, choices=["w1", "w2", "w3", "w4"], help="the workload to run")
    p.add_argument(
        "--jobs", metavar="N", type=_int_range("jobs", 1, 10_000_000), default=None,
        help="number of jobs (default: 5000, 50000, 20000 or 300, by workload)",
    )
    p.add_argument(
        "--processes", metavar="P", type=_int_range("processes", 1, 64), default=1,
        help="worker processes for w3 (default: 1)",
    )
    p.add_argument(
        "--concurrency", metavar="C", type=_int_range("concurrency", 1, 10_000), default=16,
        help="concurrency of each worker, for w3 and w4 (default: 16)",
    )
    p.add_argument(
        "--finished", metavar="N", type=_int_range("finished", 0, 100_000_000), default=0,
        help="w3 only: first add N finished jobs (in a second throwaway queue, deleted at the end) to show\n"
             "the drain does not slow down as finished jobs accumulate (default: 0)",
    )
    p.set_defaults(handler=cmd_bench)
    return parser


# Argument types: each raises argparse.ArgumentTypeError, which argparse reports as a usage error.


def _non_empty(what: str) -> Callable[[str], str]:
    def parse(text: str) -> str:
        if not text:
            raise argparse.ArgumentTypeError(f"{what} must not be empty")
        return text

    return parse


def _int_range(what: str, low: int, high: int) -> Callable[[str], int]:
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{what} must be an integer, got {text!r}") from None
        if not low <= value <= high:
            raise argparse.ArgumentTypeError(f"{what} must be in {low}..{high}, got {value}")
        return value

    return parse


def _seconds(what: str, *, positive: bool) -> Callable[[str], float]:
    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{what} must be a number of seconds, got {text!r}") from None
        if not math.isfinite(value) or value < 0 or (positive and value == 0):
            bound = "> 0" if positive else ">= 0"
            raise argparse.ArgumentTypeError(f"{what} must be a finite number of seconds {bound}, got {text!r}")
        return value

    return parse


def _job_id(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"a job id is a positive integer, got {text!r}") from None
    if not 1 <= value <= BIGINT_MAX:
        raise argparse.ArgumentTypeError(f"a job id is a positive integer, got {text!r}")
    return value


def _status(text: str) -> JobStatus:
    try:
        return JobStatus.parse(text.lower())
    except InvalidJob as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _duration_arg(text: str) -> dt.timedelta:
    try:
        return parse_duration(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


_DURATION_PART = re.compile(r"(\d+(?:\.\d+)?)([dhms])")
_UNIT_SECONDS = {"d": 86_400, "h": 3_600, "m": 60, "s": 1}


def parse_duration(text: str) -> dt.timedelta:
    """Parse a duration: ``7d``, ``12h``, ``30m``, ``45s``, combinations such as ``1h30m`` (largest unit
    first is not required), or a plain number of seconds (``90``, ``2.5``).

    Returns a non-negative timedelta. Raises ValueError with a message saying what is accepted.
    """
    cleaned = text.strip().lower()
    error = ValueError(f"invalid duration {text!r}: use e.g. 7d, 12h, 30m, 45s, 1h30m or plain seconds")
    if not cleaned:
        raise error
    try:
        seconds = float(cleaned)
    except ValueError:
        pos, total = 0, 0.0
        for match in _DURATION_PART.finditer(cleaned):
            if match.start() != pos:
                raise error from None
            total += float(match.group(1)) * _UNIT_SECONDS[match.group(2)]
            pos = match.end()
        if pos != len(cleaned) or pos == 0:
            raise error from None
        seconds = total
    if not math.isfinite(seconds) or seconds < 0 or seconds > 1e12:
        raise error
    return dt.timedelta(seconds=seconds)


# ---------------------------------------------------------------------------------------------
# Connecting


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
    from . import migrate

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


# ---------------------------------------------------------------------------------------------
# Commands


def cmd_migrate(args: argparse.Namespace) -> int:
    """`pgq migrate [--sql]`: upgrade the database to the head revision, or print the upgrade's SQL."""
    from . import migrate

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


def cmd_roles(args: argparse.Namespace) -> int:
    """`pgq roles [--apply]`: print the least-privilege roles script, or run it on the database."""
    from . import roles

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


def cmd_worker(args: argparse.Namespace) -> int:
    """`pgq worker MODULE:APP`: set up logging, load the app, check the schema, run until signalled.

    The worker connects to `--dsn` when given, else to the App's own DSN (PGQ_DSN is not consulted:
    the App's code decides). Either way that database must be reachable and migrated before it starts.
    """
    cwd = os.getcwd()
    if cwd not in sys.path:
        sys.path.insert(0, cwd)  # like `python -m`: the user's modules are importable from here
    app = load_app(args.app)
    check_database(connect_dsn(args.dsn or app.dsn))
    # Logging starts once the worker can start: errors before that stay one line on stderr.
    setup_logging(args.log_level, args.log_format)
    options: dict[str, Any] = {
        "queues": args.queues,
        "concurrency": args.concurrency,
        "prefetch": args.prefetch,
        "lease": args.lease,
        "poll_interval": args.poll_interval,
        "drain_timeout": args.drain_timeout,
        "claimed_by": args.claimed_by,
        "dsn": args.dsn,
        "listen_dsn": args.listen_dsn,
        "pgbouncer": True if args.pgbouncer else None,
        "metrics_port": args.metrics_port,
        "metrics_host": args.metrics_host,
    }
    # Options left out keep WorkerConfig's defaults, so they are defined in one place.
    from .worker import Worker

    worker = Worker(app, **{k: v for k, v in options.items() if v is not None})
    worker.run()
    return EXIT_OK


def parse_payload(text: str | None) -> Any:
    """Parse `--payload` JSON text (None means no payload); raise CliError (exit 2) for bad JSON.

    NaN and infinities are rejected like any other non-JSON text.
    """
    if text is None:
        return None

    def reject_constant(name: str) -> NoReturn:
        raise ValueError(f"{name} is not valid JSON")

    try:
        return json.loads(text, parse_constant=reject_constant)
    except ValueError as exc:  # json.JSONDecodeError is a ValueError
        raise CliError(f"--payload is not valid JSON: {one_line(exc)}", EXIT_USAGE) from None


def cmd_enqueue(args: argparse.Namespace) -> int:
    """`pgq enqueue KIND`: validate everything before connecting, enqueue, print the job id."""
    if args.watermark is not None and args.dedupe_key is None:
        raise CliError("--watermark needs --dedupe-key", EXIT_USAGE)
    spec = JobSpec(
        args.kind,
        parse_payload(args.payload),
        queue=args.queue,
        priority=args.priority,
        delay=args.delay,
        dedupe_key=args.dedupe_key,
        watermark=args.watermark,
        max_attempts=args.max_attempts,
    )
    with open_queue(args) as queue:
        [job_id] = queue.enqueue_many([spec])
    print(job_id)
    return EXIT_OK


STATUS_COLUMNS = ("QUEUE", "READY", "SCHEDULED", "RUNNING", "EXPIRED", "FAILED", "DONE/MIN", "OLDEST")


def format_status(rows: Sequence[Mapping[str, Any]]) -> str:
    """Render rows of `Queue.stats()` (the pgq.queue_stats view) as an aligned table, one row per
    queue plus a TOTAL row when there are several; "no jobs in any queue" when there are none."""
    if not rows:
        return "no jobs in any queue"
    body = [
        [
            _cell(str(r["queue"])),
            *(str(r[k]) for k in ("ready", "scheduled", "running", "expired_leases", "failed",
                                  "succeeded_last_minute")),
            format_age(_seconds_of(r["oldest_ready_age"])),
        ]
        for r in rows
    ]
    if len(rows) > 1:
        ages = [a for a in (_seconds_of(r["oldest_ready_age"]) for r in rows) if a is not None]
        body.append([
            "TOTAL",
            *(str(sum(int(r[k]) for r in rows)) for k in ("ready", "scheduled", "running",
                                                          "expired_leases", "failed",
                                                          "succeeded_last_minute")),
            format_age(max(ages) if ages else None),
        ])
    return render_table(STATUS_COLUMNS, body, right=range(1, len(STATUS_COLUMNS)))


def cmd_status(args: argparse.Namespace) -> int:
    """`pgq status`: the queue table, or its rows as JSON with `--json`."""
    with open_queue(args) as queue:
        rows = queue.stats()
    if args.json:
        print(json.dumps([_jsonable(row) for row in rows], indent=2))
    else:
        print(format_status(rows))
    return EXIT_OK


def _queue_exists(queue: Queue, name: str) -> bool:
    with queue.pool.connection() as conn:
        row = conn.execute(_sql.query("queue_exists"), {"queue": name}).fetchone()
    return bool(row and row[0])


def cmd_jobs_list(args: argparse.Namespace) -> int:
    """`pgq jobs list`: jobs matching the filters, newest first, as a table or JSON."""
    with open_queue(args) as queue:
        found = queue.list(status=args.status, queue=args.queue, kind=args.kind, limit=args.limit)
        if not found and args.queue is not None and not _queue_exists(queue, args.queue):
            raise CliError(f"no such queue: {args.queue!r} holds no jobs")
    if args.json:
        print(json.dumps([_jsonable(dataclasses.asdict(job)) for job in found], indent=2))
        return EXIT_OK
    if not found:
        print("no jobs match")
        return EXIT_OK
    now = dt.datetime.now(dt.UTC)
    rows = [
        [
            str(job.id),
            _cell(job.queue, 24),
            _cell(job.kind, 32),
            job.status.value,
            f"{job.attempts}/{job.max_attempts}",
            str(job.priority),
            format_relative(job.created_at, now),
            format_relative(job.run_at, now) if job.status is JobStatus.QUEUED else "-",
            _cell(job.last_error or "", 48),
        ]
        for job in found
    ]
    headers = ("ID", "QUEUE", "KIND", "STATUS", "ATTEMPTS", "PRIORITY", "CREATED", "RUN AT", "LAST ERROR")
    print(render_table(headers, rows, right=(0, 4, 5)))
    return EXIT_OK


def format_job(job: Job) -> str:
    """Render every field of `job`, one per line; payload, result and last_error as indented blocks."""
    lines: list[str] = []
    width = max(len(f.name) for f in dataclasses.fields(job)) + 2
    for f in dataclasses.fields(job):
        value = getattr(job, f.name)
        label = f"{f.name}:".ljust(width)
        if f.name in ("payload", "result"):
            text = json.dumps(value, indent=2, ensure_ascii=False, sort_keys=True)
            if "\n" in text:
                lines.append(label.rstrip())
                lines.extend("  " + line for line in text.splitlines())
                continue
            lines.append(label + text)
        elif f.name == "last_error" and value and "\n" in value:
            lines.append(label.rstrip())
            lines.extend("  " + _cell(line) for line in value.splitlines())
        elif f.name == "attempts":
            lines.append(f"{label}{value} of {job.max_attempts}")
        elif isinstance(value, dt.datetime):
            lines.append(label + value.isoformat(sep=" ", timespec="milliseconds"))
        elif value is None:
            lines.append(label + "-")
        else:
            lines.append(label + _cell(str(value)))
    return "\n".join(lines)


def _get_job(queue: Queue, job_id: int) -> Job:
    job = queue.get(job_id)
    if job is None:
        raise CliError(f"job {job_id} not found")
    return job


def cmd_jobs_show(args: argparse.Namespace) -> int:
    """`pgq jobs show ID`: every field of one job; exit 1 when it does not exist."""
    with open_queue(args) as queue:
        job = _get_job(queue, args.id)
    if args.json:
        print(json.dumps(_jsonable(dataclasses.asdict(job)), indent=2, ensure_ascii=False))
    else:
        print(format_job(job))
    return EXIT_OK


def cmd_jobs_retry(args: argparse.Namespace) -> int:
    """`pgq jobs retry ID`: queue a failed or cancelled job again (NotFound / InvalidState: exit 1)."""
    with open_queue(args) as queue:
        job = queue.retry(args.id)
    print(f"job {job.id} ({_cell(job.kind)}) is queued again, {job.max_attempts} attempt(s) left")
    return EXIT_OK


def cmd_jobs_cancel(args: argparse.Namespace) -> int:
    """`pgq jobs cancel ID`: cancel a queued or running job (NotFound / InvalidState: exit 1)."""
    with open_queue(args) as queue:
        job = queue.cancel(args.id)
    print(f"job {job.id} ({_cell(job.kind)}) is cancelled")
    return EXIT_OK


PROGRESS_AFTER_S = 2.0


def cmd_purge(args: argparse.Namespace) -> int:
    """`pgq purge --older-than DURATION`: delete old finished jobs in batches; print the count.

    Runs longer than PROGRESS_AFTER_S report the running total on stderr about once a second.
    """
    older_than: dt.timedelta = args.older_than
    started = time.monotonic()
    last_report: float | None = None

    def report(total: int) -> None:
        nonlocal last_report
        now = time.monotonic()
        if now - started >= PROGRESS_AFTER_S and (last_report is None or now - last_report >= 1.0):
            last_report = now
            print(f"pgq: purge: {total} jobs deleted so far ({now - started:.0f} s)", file=sys.stderr, flush=True)

    with open_queue(args) as queue:
        deleted = _purge_with_progress(queue, older_than, report)
    print(f"deleted {deleted} job(s) that finished more than {format_duration(older_than)} ago")
    return EXIT_OK


def _purge_with_progress(queue: Queue, older_than: dt.timedelta, report: Callable[[int], None]) -> int:
    """Run the purge operation of pgq._ops, calling `report(total so far)` after each batch.

    The operation is pgq's own; this only observes the row count of each batch it runs.
    """
    op = _ops.purge(older_than.total_seconds())

    def observed() -> _ops.Steps[int]:
        inner = op.steps()
        total = 0
        try:
            stmt = next(inner)
            while True:
                result = yield stmt
                if stmt.fetch == "rowcount":
                    total += int(result)
                    report(total)
                stmt = inner.send(result)
        except StopIteration as stop:
            value: int = stop.value
            return value

    with queue.pool.connection() as conn:
        return _ops.run_sync(conn, dataclasses.replace(op, steps=observed), own_transaction=True)


def cmd_demo(args: argparse.Namespace) -> int:
    """`pgq demo`: see pgq.demo.run_demo."""
    from . import demo

    raw = resolve_dsn(args, required=False)
    return demo.run_demo(
        dsn=None if raw is None else connect_dsn(raw), jobs=args.jobs, workers=args.workers, out=sys.stdout
    )


def cmd_bench(args: argparse.Namespace) -> int:
    """`pgq bench --workload W`: see pgq.bench.run_bench; a run that cannot be measured exits 1."""
    from . import bench

    dsn = connect_dsn(cast(str, resolve_dsn(args)))
    try:
        bench.run_bench(dsn, args.workload, jobs=args.jobs, processes=args.processes,
                        concurrency=args.concurrency, finished=args.finished, out=sys.stdout, err=sys.stderr)
    except bench.BenchFailed as exc:
        raise CliError(f"bench {args.workload}: {one_line(exc)}") from None
    return EXIT_OK


# ---------------------------------------------------------------------------------------------
# Rendering


def render_table(headers: Sequence[str], rows: Sequence[Sequence[str]], right: Collection[int] = ()) -> str:
    """Render an aligned text table: a header line, then one line per row; columns separated by two
    spaces, those whose index is in `right` right-aligned. Trailing spaces are stripped."""
    widths = [len(h) for h in headers]
    for row in rows:
        for i, cell in enumerate(row):
            widths[i] = max(widths[i], len(cell))

    def line(cells: Sequence[str]) -> str:
        parts = [c.rjust(w) if i in right else c.ljust(w) for i, (c, w) in enumerate(zip(cells, widths, strict=True))]
        return "  ".join(parts).rstrip()

    return "\n".join([line(headers), *(line(r) for r in rows)])


def format_age(seconds: float | None) -> str:
    """Format a duration in seconds compactly: ``45s``, ``3m05s``, ``2h07m``, ``3d04h``; ``-`` for None."""
    if seconds is None:
        return "-"
    s = max(0, int(seconds))
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m{s % 60:02d}s"
    if s < 86_400:
        return f"{s // 3600}h{s % 3600 // 60:02d}m"
    return f"{s // 86_400}d{s % 86_400 // 3600:02d}h"


def format_duration(value: dt.timedelta) -> str:
    """Format a duration exactly, in the units `parse_duration` reads: ``7d``, ``1h30m``, ``2.5s``, ``0s``."""
    rest = value.total_seconds()
    parts: list[str] = []
    for unit, size in _UNIT_SECONDS.items():
        if unit == "s":
            if rest or not parts:
                parts.append(f"{rest:g}s")
        elif rest >= size:
            count = int(rest // size)
            parts.append(f"{count}{unit}")
            rest -= count * size
    return "".join(parts)


def format_relative(when: dt.datetime, now: dt.datetime) -> str:
    """Format `when` relative to `now`: ``now``, ``in 4m05s`` or ``4m05s ago``."""
    delta = (when - now).total_seconds()
    if abs(delta) < 1:
        return "now"
    return f"in {format_age(delta)}" if delta > 0 else f"{format_age(-delta)} ago"


def _seconds_of(value: dt.timedelta | float | None) -> float | None:
    if value is None:
        return None
    return value.total_seconds() if isinstance(value, dt.timedelta) else float(value)


def _cell(text: str, limit: int | None = None) -> str:
    """Make `text` safe for one table cell: control characters escaped, cut to `limit` with an ellipsis."""
    safe = "".join(ch if ch.isprintable() else repr(ch)[1:-1] for ch in text)
    if limit is not None and len(safe) > limit:
        return safe[: limit - 1] + "…"
    return safe


def _jsonable(value: Any) -> Any:
    """Convert rows and jobs for json.dumps: durations to seconds, timestamps to ISO 8601, enums to values."""
    if isinstance(value, Mapping):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_jsonable(v) for v in value]
    if isinstance(value, dt.timedelta):
        return value.total_seconds()
    if isinstance(value, dt.datetime):
        return value.isoformat()
    if isinstance(value, JobStatus):
        return value.value
    return value


# ---------------------------------------------------------------------------------------------
# Logging


# Attributes every LogRecord has; anything else on a record came from `extra=` and is logged as a field.
_RECORD_ATTRS = frozenset(vars(logging.LogRecord("", 0, "", 0, "", None, None))) | {"message", "asctime"}


def _extra_fields(record: logging.LogRecord) -> dict[str, Any]:
    return {k: v for k, v in vars(record).items() if k not in _RECORD_ATTRS and not k.startswith("_")}


def _timestamp(record: logging.LogRecord) -> str:
    stamp = dt.datetime.fromtimestamp(record.created, dt.UTC).isoformat(timespec="milliseconds")
    return stamp.replace("+00:00", "Z")


class JsonLogFormatter(logging.Formatter):
    """One JSON object per line: ts (UTC, ISO 8601), level, logger, message, the record's `extra`
    fields, and `exception` (the formatted traceback) when there is one."""

    def format(self, record: logging.LogRecord) -> str:
        """Return the record as one line of JSON (values json cannot encode are given as str)."""
        out: dict[str, Any] = {
            "ts": _timestamp(record),
            "level": record.levelname.lower(),
            "logger": record.name,
            "message": record.getMessage(),
        }
        out.update(_extra_fields(record))
        if record.exc_info:
            out["exception"] = self.formatException(record.exc_info)
        elif record.exc_text:
            out["exception"] = record.exc_text
        return json.dumps(out, default=str, ensure_ascii=False)


class TextLogFormatter(logging.Formatter):
    """One readable line per event: ``TS LEVEL logger: message key=value ...``; values with spaces or
    quotes are JSON-quoted, and a traceback becomes an escaped ``exception="..."`` field, so an event
    never spans several lines."""

    def format(self, record: logging.LogRecord) -> str:
        """Return the record as one line of text."""
        message = record.getMessage().replace("\n", "\\n")
        parts = [f"{_timestamp(record)} {record.levelname:<7} {record.name}: {message}"]
        fields = _extra_fields(record)
        if record.exc_info:
            fields["exception"] = self.formatException(record.exc_info)
        parts.extend(f"{k}={_logfmt(v)}" for k, v in fields.items())
        return " ".join(parts)


def _logfmt(value: Any) -> str:
    text = value if isinstance(value, str) else json.dumps(value, default=str, ensure_ascii=False)
    if text and not any(ch.isspace() or ch in "\"=\\" or not ch.isprintable() for ch in text):
        return text
    return json.dumps(text, ensure_ascii=False)


def setup_logging(level: str, fmt: str, stream: TextIO | None = None) -> None:
    """Send every log record at `level` or above to `stream` (default: stderr) as one line each, in
    `fmt` "text" or "json". Replaces the root logger's handlers."""
    handler = logging.StreamHandler(stream or sys.stderr)
    handler.setFormatter(JsonLogFormatter() if fmt == "json" else TextLogFormatter())
    root = logging.getLogger()
    for old in root.handlers[:]:
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(level)
