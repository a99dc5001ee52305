"""`pgq status`: a table of the queues (or JSON)."""

from __future__ import annotations

import argparse
import datetime as dt
import sys
import time
from collections.abc import Mapping, Sequence
from typing import Any

from .._ops import UNKNOWN_KINDS_CAP
from .args import int_range, seconds_arg
from .common import EXIT_OK, EXIT_USAGE, CliError, Commands, Formatter, open_queue
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
            "Queued jobs of kinds that no live worker of their queue has a task for (a rolling deploy;\n"
            "see docs/operations.md) are listed below the table, by queue and kind; in --json each row\n"
            f"has them as unknown_kinds: {{kind: jobs}}, each counted up to {UNKNOWN_KINDS_CAP:,} (the kinds with "
            f"more are\nin unknown_kinds_capped and shown as 'more than {UNKNOWN_KINDS_CAP}')."
        ),
    )
    p.add_argument("--json", action="store_true", help="print JSON (ages in seconds) instead of a table")
    p.add_argument(
        "--watch", metavar="SECONDS", nargs="?", const=2.0, type=seconds_arg("watch", positive=True),
        help="refresh every SECONDS (default: 2) until Ctrl-C, redrawing the screen on a terminal",
    )
    p.add_argument("--count", metavar="N", type=int_range("count", 1, 1_000_000),
                   help="with --watch: stop after N refreshes (default: until Ctrl-C)")
    p.set_defaults(handler=cmd_status)


STATUS_COLUMNS = ("QUEUE", "WAITING", "READY", "SCHEDULED", "RUNNING", "EXPIRED", "FAILED", "DONE/MIN", "OLDEST")
_COUNTS = ("waiting", "ready", "scheduled", "running", "expired_leases", "failed", "succeeded_last_minute")


def format_status(rows: Sequence[Mapping[str, Any]]) -> str:
    """Render rows of `Queue.stats()` (the pgq.queue_stats view) as an aligned table, one row per
    queue plus a TOTAL row when there are several; "no jobs in any queue" when there are none.
    Below it, the jobs of each queue and kind handed back because no worker knew their kind (the
    rows' `unknown_kinds`; "more than N" for those of `unknown_kinds_capped`), if any."""
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
    unknown = [f"  {cell(str(r['queue']))}: "
               f"{'more than ' if kind in (r.get('unknown_kinds_capped') or ()) else ''}{n} {cell(kind)!r}"
               for r in rows for kind, n in (r.get("unknown_kinds") or {}).items()]
    if unknown:
        table += ("\nWaiting for a worker that knows their kind (left queued, no attempt spent; "
                  "they run once a worker whose app has the task serves the queue):\n" + "\n".join(unknown))
    return table


def cmd_status(args: argparse.Namespace) -> int:
    """`pgq status`: the queue table, or its rows as JSON with `--json`; with `--watch`, again every
    SECONDS (the screen cleared first on a terminal, a timestamp line above each table) until Ctrl-C
    (exit 0) or `--count` refreshes."""
    if args.count is not None and args.watch is None:
        raise CliError("--count needs --watch", EXIT_USAGE)
    with open_queue(args) as queue:
        if args.watch is None:
            print_rows(queue.stats(), args.json, format_status)
            return EXIT_OK
        redraw = sys.stdout.isatty() and not args.json
        shown = 0
        try:
            while True:
                rows = queue.stats()
                if redraw:
                    print("\x1b[H\x1b[2J", end="")  # home, clear: the table stays in place
                if not args.json:
                    print(f"{dt.datetime.now().astimezone():%Y-%m-%d %H:%M:%S %Z}  every {args.watch:g} s, "
                          "Ctrl-C to stop")
                print_rows(rows, args.json, format_status)
                sys.stdout.flush()
                shown += 1
                if args.count is not None and shown >= args.count:
                    return EXIT_OK
                time.sleep(args.watch)
        except KeyboardInterrupt:
            return EXIT_OK
