"""`pgq status`: a table of the queues (or JSON)."""

from __future__ import annotations

import argparse
from collections.abc import Mapping, Sequence
from typing import Any

from .common import EXIT_OK, Commands, Formatter, open_queue
from .render import cell, format_age, print_rows, render_table, seconds_of

__all__ = ["STATUS_COLUMNS", "format_status", "register"]


def register(commands: Commands, dsn: argparse.ArgumentParser) -> None:
    """Add this command to `commands` (`dsn`: the parent parser with --dsn and --pgbouncer)."""
    p = commands.add_parser(
        "status",
        parents=[dsn],
        formatter_class=Formatter,
        help="show a table of the queues",
        description=(
            "Show one row per queue that holds jobs:\n"
            "  WAITING    waiting for parent jobs (enqueued with depends_on)\n"
            "  READY      queued jobs due now          SCHEDULED  queued jobs due later\n"
            "  RUNNING    claimed by a worker          EXPIRED    running, lease expired (to be rescued)\n"
            "  FAILED     failed for good              OLDEST     age of the oldest ready job\n"
            "  DONE/MIN   jobs that succeeded in the last minute (throughput)\n"
            "A paused queue (pgq queue pause) is marked '(paused)'.\n"
            "Queued jobs that a worker handed back because its app has no task of their kind (a rolling\n"
            "deploy; see docs/operations.md) are listed below the table, by queue and kind; in --json\n"
            "each row has them as unknown_kinds: {kind: jobs}."
        ),
    )
    p.add_argument("--json", action="store_true", help="print JSON (ages in seconds) instead of a table")
    p.set_defaults(handler=cmd_status)


STATUS_COLUMNS = ("QUEUE", "WAITING", "READY", "SCHEDULED", "RUNNING", "EXPIRED", "FAILED", "DONE/MIN", "OLDEST")
_COUNTS = ("waiting", "ready", "scheduled", "running", "expired_leases", "failed", "succeeded_last_minute")


def format_status(rows: Sequence[Mapping[str, Any]]) -> str:
    """Render rows of `Queue.stats()` (the pgq.queue_stats view) as an aligned table, one row per
    queue plus a TOTAL row when there are several; "no jobs in any queue" when there are none.
    Below it, the jobs of each queue and kind handed back because no worker knew their kind (the
    rows' `unknown_kinds`), if any."""
    if not rows:
        return "no jobs in any queue"
    body = [
        [
            cell(str(r["queue"])) + (" (paused)" if r.get("paused") else ""),
            *(str(r[k]) for k in _COUNTS),
            format_age(seconds_of(r["oldest_ready_age"])),
        ]
        for r in rows
    ]
    if len(rows) > 1:
        ages = [a for a in (seconds_of(r["oldest_ready_age"]) for r in rows) if a is not None]
        body.append([
            "TOTAL",
            *(str(sum(int(r[k]) for r in rows)) for k in _COUNTS),
            format_age(max(ages) if ages else None),
        ])
    table = render_table(STATUS_COLUMNS, body, right=range(1, len(STATUS_COLUMNS)))
    unknown = [f"  {cell(str(r['queue']))}: {n} {cell(kind)!r}" for r in rows
               for kind, n in (r.get("unknown_kinds") or {}).items()]
    if unknown:
        table += ("\nWaiting for a worker that knows their kind (handed back without spending an attempt; "
                  "they run once a worker whose app has the task serves the queue):\n" + "\n".join(unknown))
    return table


def cmd_status(args: argparse.Namespace) -> int:
    """`pgq status`: the queue table, or its rows as JSON with `--json`."""
    with open_queue(args) as queue:
        rows = queue.stats()
    print_rows(rows, args.json, format_status)
    return EXIT_OK
