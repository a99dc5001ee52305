"""`pgq worker MODULE:APP`: run a worker for the tasks of an App until signalled."""

from __future__ import annotations

import argparse
import logging
import re
from typing import Any

from .._jitter import exponential_wait
from ..errors import NotMigrated, one_line
from .args import int_range, non_empty, seconds_arg
from .common import (
    ENV_DSN,
    EXIT_ERROR,
    EXIT_OK,
    EXIT_USAGE,
    CliError,
    Commands,
    Formatter,
    check_database,
    connect_dsn,
    dsn_parent,
    load_cli_app,
)
from .logs import setup_logging

__all__ = ["REFUSED", "add_worker_options", "register", "wait_for_database", "worker_settings"]

REFUSED = re.compile(
    r'database "[^"]*" does not exist|role "[^"]*" does not exist|password authentication failed'
    r"|authentication failed for user|no pg_hba\.conf entry|no password supplied|permission denied for database",
    re.IGNORECASE)
"""Connection failures that waiting cannot fix (the server answered: no such database or role, wrong
credentials, not allowed): the worker stops at once with exit 2 instead of retrying."""

logger = logging.getLogger("pgq.worker")


def register(commands: Commands, dsn: argparse.ArgumentParser) -> None:
    """Add this command to `commands` (`dsn`: the parent parser with --dsn and --pgbouncer)."""
    p = commands.add_parser(
        "worker",
        parents=[
            dsn_parent(
                "connect the worker to DSN instead of the App's own database (default: the DSN "
                f"or pool the App was built with; ${ENV_DSN} is not consulted). The database must be "
                "migrated; while it cannot be reached the worker waits (see --connect-wait)",
                pgbouncer_help="the worker's database (--dsn, else the App's) is a PgBouncer in transaction "
                "pooling mode: prepare no statements, and LISTEN only on --listen-dsn (without it, poll)",
            )
        ],
        formatter_class=Formatter,
        help="run a worker for the tasks of an App",
        description=(
            "Run a worker for the tasks registered on an App until SIGTERM or SIGINT. On the first\n"
            "signal it stops claiming, lets running jobs finish for up to --drain-timeout seconds, then\n"
            "hands the unfinished ones back to the queue; a second signal aborts at once.\n"
            "It waits while the database cannot be reached (see --connect-wait), but stops at once, with\n"
            "exit status 2, when waiting cannot help: no such database or role, wrong credentials, or a\n"
            "database without pgq's schema.\n"
            "The current directory is importable, as with `python -m`."
        ),
    )
    p.add_argument("app", metavar="MODULE:APP", help="where the App is, e.g. myapp.tasks:app")
    add_worker_options(p)
    p.set_defaults(handler=cmd_worker)


def add_worker_options(p: argparse.ArgumentParser, queues_default: str = "every queue") -> None:
    """Add the options of a worker run (all but the App and the DSN) to `p`: `pgq worker`'s, which
    `manage.py pgq_worker` shares; `worker_settings` turns them into Worker keywords.
    `queues_default` says which queues it serves without --queue."""
    p.add_argument(
        "--queue",
        dest="queues",
        metavar="Q",
        action="append",
        type=non_empty("queue"),
        help=f"work on queue Q; repeat for several (default: {queues_default})",
    )
    p.add_argument(
        "--concurrency", metavar="N", type=int_range("concurrency", 1, 10_000),
        help="jobs run at once by this worker; also its threads for sync handlers (default: 10)",
    )
    p.add_argument(
        "--prefetch", metavar="N", type=int_range("prefetch", 0, 100_000),
        help="jobs claimed ahead of free slots and held (leased, heartbeated) until one frees: fewer, "
        "bigger claims; 0 claims only for free slots (default: adaptive, about 0.25 s of work at the "
        "rate jobs start, between the concurrency and 2048 jobs, and no more than 32 MiB of payload at "
        "the size claims bring)",
    )
    p.add_argument(
        "--lease", metavar="SECONDS", type=seconds_arg("lease", positive=True),
        help="lease of each claimed job, renewed by heartbeats every third of it; the job of a worker "
        "that died is rescued about half a lease after its lease expired, and a database session stuck "
        "for half a lease sending a pgq statement's result to a frozen client is ended (default: 60; at "
        "most 86400, a day)",
    )
    p.add_argument(
        "--io-timeout", metavar="SECONDS", type=seconds_arg("io timeout", positive=True),
        help="longest wait for the database's answer to a statement; past it the connection is taken for "
        "dead (a half-open network) and replaced (default: a quarter of the lease, at least 5)",
    )
    p.add_argument(
        "--connect-wait", metavar="SECONDS", type=seconds_arg("connect wait", positive=False),
        help="at start, how long to keep retrying (with backoff, logged) while the database cannot be "
        "reached; 0 fails at once (default: for ever, so a supervisor does not restart it in a loop)",
    )
    p.add_argument(
        "--poll-interval", metavar="SECONDS", type=seconds_arg("poll interval", positive=True),
        help="how often to look for jobs when no notification arrives, jittered (default: 1)",
    )
    p.add_argument(
        "--drain-timeout", metavar="SECONDS", type=seconds_arg("drain timeout", positive=False),
        help="on shutdown, how long running jobs may take to finish before they are handed back to "
        "the queue (default: 30)",
    )
    p.add_argument(
        "--listen-dsn", metavar="DSN", type=non_empty("listen-dsn"),
        help="open the LISTEN connection (wake-ups on NOTIFY) here, e.g. a direct connection to the "
        "database when --dsn is a PgBouncer in transaction mode (default: the worker's DSN)",
    )
    p.add_argument(
        "--claimed-by", "--worker-id", metavar="NAME", type=non_empty("claimed-by"),
        help="worker name recorded on the jobs it claims (default: HOST-PID)",
    )
    p.add_argument(
        "--metrics-port", metavar="PORT", type=int_range("metrics port", 0, 65535),
        help="serve Prometheus metrics at http://HOST:PORT/metrics: jobs claimed, succeeded, retried, "
        "failed, rescued and lease losses by queue and kind, a job duration histogram, queue depth and "
        "oldest ready age from the database (read at most every 5 s), LISTEN reconnects; 0 picks a "
        "free port (logged) (default: no metrics server)",
    )
    p.add_argument(
        "--metrics-host", metavar="HOST", type=non_empty("metrics host"),
        help="address the metrics server binds; 0.0.0.0 for every interface (default: 127.0.0.1)",
    )
    p.add_argument(
        "--log-level", metavar="LEVEL", default="INFO", type=str.upper,
        choices=["DEBUG", "INFO", "WARNING", "ERROR"],
        help="DEBUG, INFO, WARNING or ERROR; INFO logs the worker's start, stop and recoveries and one "
        "line per finished job (kind, id, outcome, duration), retries at WARNING and failures at ERROR; "
        "DEBUG adds one line per job start (default: INFO)",
    )
    p.add_argument(
        "--quiet", action="store_true",
        help="leave out the per-job lines below WARNING (successes, snoozes, cancels, hand-backs); "
        "retries and failures are still logged",
    )
    p.add_argument(
        "--log-format", default="text", choices=["text", "json"],
        help="text: one readable line per event; json: one JSON object per line (default: text)",
    )


def worker_settings(args: argparse.Namespace) -> dict[str, Any]:
    """The Worker keywords of the options `add_worker_options` added, those left out omitted (they keep
    WorkerConfig's defaults, so the defaults are defined in one place)."""
    options: dict[str, Any] = {
        "queues": args.queues,
        "concurrency": args.concurrency,
        "prefetch": args.prefetch,
        "lease": args.lease,
        "io_timeout": args.io_timeout,
        "poll_interval": args.poll_interval,
        "drain_timeout": args.drain_timeout,
        "claimed_by": args.claimed_by,
        "listen_dsn": args.listen_dsn,
        "metrics_port": args.metrics_port,
        "metrics_host": args.metrics_host,
    }
    return {k: v for k, v in options.items() if v is not None}


def cmd_worker(args: argparse.Namespace) -> int:
    """`pgq worker MODULE:APP`: set up logging, load the app, check the schema, run until signalled.

    The worker connects to `--dsn` when given, else to the App's own DSN (PGQ_DSN is not consulted:
    the App's code decides). Either way that database must be reachable and migrated before it starts.
    """
    app = load_cli_app(args.app)  # like `python -m`: the user's modules are importable from here
    dsn = connect_dsn(args.dsn or app.dsn)
    # Logging starts once the App loads: a bad app or DSN stays one line on stderr; the wait for the
    # database is logged.
    setup_logging(args.log_level, args.log_format, quiet=args.quiet)
    wait_for_database(dsn, args.connect_wait)
    options = worker_settings(args)
    if args.dsn:
        options["dsn"] = args.dsn
    if args.pgbouncer:
        options["pgbouncer"] = True
    from ..worker import Worker  # loaded once the checks passed

    worker = Worker(app, **options)
    worker.run()
    return EXIT_OK


def wait_for_database(dsn: str, wait: float | None) -> None:
    """Check that `dsn` is reachable and migrated, retrying connection failures through tenacity
    (jittered exponential backoff up to 10 s, each retry logged at WARNING) for `wait` seconds (None:
    until it connects). Raises CliError (exit 1) once `wait` has passed; CliError with exit 2 at once
    when retrying cannot help: the server refused the connection (see REFUSED) or pgq's schema is
    missing or outdated."""
    import tenacity

    def log(state: tenacity.RetryCallState) -> None:
        exc = state.outcome.exception() if state.outcome is not None else None
        delay = state.next_action.sleep if state.next_action is not None else 0.0
        logger.warning("waiting for the database: %s; retrying in %.2f s", one_line(exc) if exc else "?",
                       delay, extra={"event": "db_unavailable", "step": "start", "failures": state.attempt_number})

    retrying = tenacity.Retrying(
        retry=tenacity.retry_if_exception(lambda exc: isinstance(exc, CliError) and exc.code == EXIT_ERROR),
        wait=exponential_wait(0.25, minimum=0.1, maximum=10.0),
        stop=tenacity.stop_never if wait is None else tenacity.stop_after_delay(wait),
        before_sleep=log, reraise=True,
    )
    for attempt in retrying:
        with attempt:
            _check(dsn)


def _check(dsn: str) -> None:
    try:
        check_database(dsn)
    except CliError as exc:
        if REFUSED.search(str(exc)):
            raise CliError(f"{exc} (not retried: fix the DSN or the server's settings)", EXIT_USAGE) from None
        raise
    except NotMigrated as exc:
        raise CliError(str(exc), EXIT_USAGE) from None
