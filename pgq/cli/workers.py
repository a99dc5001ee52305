"""`pgq workers`: the worker registry (pgq.workers), as a table or JSON."""

from __future__ import annotations

import argparse
import datetime as dt
import json
from collections.abc import Sequence

from ..insight import WorkerInfo
from .common import EXIT_OK, Commands, Formatter, open_queue
from .render import cell, format_relative, render_table

__all__ = ["format_workers", "register"]


def register(commands: Commands, dsn: argparse.ArgumentParser) -> None:
    """Add this command to `commands` (`dsn`: the parent parser with --dsn and --pgbouncer)."""
    p = commands.add_parser(
        "workers",
        parents=[dsn],
        formatter_class=Formatter,
        help="list the registered workers, idle ones included",
        description=(
            "List the workers of the registry (pgq.workers), live ones first. Every worker writes its row\n"
            "at start, refreshes it with its maintenance run and deletes it on a clean stop; a worker\n"
            "killed without one stays listed as stale until a live worker prunes it (three leases).\n"
            "  STATE    running, draining (stopping: claims no more), or stale (stopped refreshing)\n"
            "  QUEUES   the queues it claims from ('*': every queue)\n"
            "  SLOTS    jobs it runs at once; RUNNING: jobs it runs now, JOBS: their ids (the first 5)"
        ),
    )
    p.add_argument("--json", action="store_true", help="print a JSON array of workers instead of a table")
    p.set_defaults(handler=cmd_workers)


def format_workers(workers: Sequence[WorkerInfo], now: dt.datetime) -> str:
    """Render `Queue.workers()` as an aligned table ("no worker is registered" when empty)."""
    if not workers:
        return "no worker is registered"
    rows = [
        [
            cell(w.claimed_by, 32),
            w.state if w.live else "stale",
            cell(f"{w.host}:{w.pid}", 32),
            "*" if w.queues is None else cell(",".join(w.queues), 32),
            str(len(w.kinds)),
            str(w.slots),
            str(w.running_count),
            ",".join(str(i) for i in w.running[:5]) + (",..." if w.running_count > 5 else ""),
            format_relative(w.last_seen, now),
            format_relative(w.started_at, now),
            cell(w.version, 16),
        ]
        for w in workers
    ]
    headers = ("WORKER", "STATE", "HOST:PID", "QUEUES", "KINDS", "SLOTS", "RUNNING", "JOBS", "LAST SEEN",
               "STARTED", "VERSION")
    return render_table(headers, rows, right=(4, 5, 6))


def cmd_workers(args: argparse.Namespace) -> int:
    """`pgq workers`: the registry as a table or JSON."""
    with open_queue(args) as queue:
        workers = queue.workers()
    if args.json:
        print(json.dumps([w.to_json() for w in workers], indent=2))
    else:
        print(format_workers(workers, dt.datetime.now(dt.UTC)))
    return EXIT_OK
