"""`pgq purge --older-than DURATION`: delete old finished jobs in batches."""

from __future__ import annotations

import argparse
import dataclasses
import datetime as dt
import sys
import time
from collections.abc import Callable

from .. import _ops
from ..client import Queue
from .args import duration_arg
from .common import EXIT_OK, Commands, Formatter, open_queue
from .render import format_duration

__all__ = ["register"]


def register(commands: Commands, dsn: argparse.ArgumentParser) -> None:
    """Add this command to `commands` (`dsn`: the parent parser with --dsn and --pgbouncer)."""
    p = commands.add_parser(
        "purge",
        parents=[dsn],
        formatter_class=Formatter,
        help="delete finished jobs older than a duration",
        description=(
            "Delete succeeded, failed and cancelled jobs that finished more than DURATION ago, in\n"
            "small batches (each its own short transaction), and print how many were deleted.\n"
            "Queued and running jobs are never touched."
        ),
    )
    p.add_argument(
        "--older-than", metavar="DURATION", type=duration_arg, required=True,
        help="e.g. 7d, 12h, 30m, 45s, 1h30m, or plain seconds (0 deletes every finished job)",
    )
    p.set_defaults(handler=cmd_purge)


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
