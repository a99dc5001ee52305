"""`pgq purge --older-than DURATION`: drop old day partitions of finished jobs, delete the rest in batches."""

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
            "Delete succeeded, failed and cancelled jobs that finished more than DURATION ago, and\n"
            "print how many were deleted. First the day partitions of finished jobs (UTC days) that\n"
            "ended DURATION ago or earlier are dropped whole, each in its own short transaction that\n"
            "waits at most 1 s for its lock (tried 3 times); a day that holds a failed job keeping\n"
            "its sequence waiting, or whose lock was not granted, is left to the row deletes. Then\n"
            "what is left past DURATION (the day across it, jobs finished before revision 0033, the\n"
            "default partition) is deleted in small batches, each its own short transaction.\n"
            "The partitions of the next 7 days are made first if missing. Progress (each partition\n"
            "dropped, the rows deleted so far) goes to stderr.\n"
            "Queued and running jobs are never touched."
        ),
    )
    p.add_argument(
        "--older-than", metavar="DURATION", type=duration_arg, required=True,
        help="e.g. 7d, 12h, 30m, 45s, 1h30m, or plain seconds (0 deletes every finished job)",
    )
    p.set_defaults(handler=cmd_purge)


PROGRESS_AFTER_S = 2.0

_SKIPPED = {
    "held": "a failed job in it holds its sequence",
    "busy": "its lock was not granted",
}


def cmd_purge(args: argparse.Namespace) -> int:
    """`pgq purge --older-than DURATION`: drop the day partitions past DURATION, delete the rest in
    batches; print what was removed.

    Each partition dropped or skipped is reported on stderr at once; runs longer than PROGRESS_AFTER_S
    report the running total of rows deleted on stderr about once a second.
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

    def partition(name: str, outcome: str, jobs: int | None) -> None:
        if outcome == "dropped":
            print(f"pgq: purge: dropped partition {name} ({jobs} jobs)", file=sys.stderr, flush=True)
        elif outcome == "busy":
            print(f"pgq: purge: partition {name}: its lock was not granted in {_ops.PARTITION_LOCK_WAIT_S:g} s",
                  file=sys.stderr, flush=True)
        elif outcome in _SKIPPED:
            print(f"pgq: purge: partition {name} not dropped ({_SKIPPED[outcome]})", file=sys.stderr, flush=True)

    with open_queue(args) as queue:
        result = _purge_with_progress(queue, older_than, report, partition)
    dropped = sum(n for _, n in result.dropped)
    print(f"deleted {result.jobs} job(s) that finished more than {format_duration(older_than)} ago: "
          f"{dropped} in {len(result.dropped)} day partition(s) dropped whole, {result.deleted} row by row")
    for name, why in result.skipped:
        print(f"partition {name} was not dropped ({_SKIPPED.get(why, why)}): its jobs past the horizon "
              "were deleted row by row")
    return EXIT_OK


def _purge_with_progress(queue: Queue, older_than: dt.timedelta, report: Callable[[int], None],
                         partition: Callable[[str, str, int | None], None]) -> _ops.PurgeReport:
    """Run the purge operation of pgq._ops, calling `partition(name, outcome, jobs)` after each
    partition's drop call and `report(total so far)` after each batch of row deletes.

    The operation is pgq's own; this only observes the results of the statements it runs.
    """
    op = _ops.purge_report(older_than.total_seconds())

    def observed() -> _ops.Steps[_ops.PurgeReport]:
        inner = op.steps()
        total = 0
        try:
            stmt = next(inner)
            while True:
                result = yield stmt
                if stmt.name == "finished_partitions_drop" and result:
                    row = result[0]
                    partition(str(row["partition"]), str(row["outcome"]), row["jobs"])
                elif stmt.fetch == "rowcount":
                    total += int(result)
                    report(total)
                stmt = inner.send(result)
        except StopIteration as stop:
            value: _ops.PurgeReport = stop.value
            return value

    with queue.pool.connection() as conn:
        return _ops.run_sync(conn, dataclasses.replace(op, steps=observed), own_transaction=True)
