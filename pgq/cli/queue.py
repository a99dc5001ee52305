"""`pgq queue list|pause|resume|group-limits`: the queues, stopping or restarting the claiming of one,
and the per-group limits of a kind."""

from __future__ import annotations

import argparse
from collections.abc import Mapping, Sequence
from typing import Any

from psycopg.rows import dict_row

from .. import _sql
from .._ops.admin import parse_rate
from .common import (
    EXIT_OK,
    EXIT_USAGE,
    CliError,
    Commands,
    Formatter,
    actor_of,
    add_actor,
    open_queue,
    queue_exists,
    warn,
)
from .render import cell, format_age, print_rows, render_table, seconds_of

__all__ = ["format_group_limits", "format_queues", "register"]

QUEUE_COLUMNS = ("QUEUE", "STATE", "READY", "SCHEDULED", "RUNNING", "FAILED", "OLDEST", "PAUSED SINCE")
GROUP_LIMIT_COLUMNS = ("KIND", "CONCURRENCY", "RATE", "RUNNING", "IN GROUPS", "UPDATED")
_WINDOW_UNITS = {1.0: "s", 60.0: "min", 3600.0: "h", 86400.0: "d"}


def register(commands: Commands, dsn: argparse.ArgumentParser) -> None:
    """Add this command to `commands` (`dsn`: the parent parser with --dsn and --pgbouncer)."""
    p = commands.add_parser(
        "queue",
        formatter_class=Formatter,
        help="list queues, pause or resume one, set group limits",
        description=(
            "List the queues, pause and resume one, or set the per-group limits of a job kind\n"
            "(group-limits; without KIND it lists them). A paused queue keeps accepting jobs, and\n"
            "its running jobs finish, but no worker anywhere starts another of its jobs until it is\n"
            "resumed; workers need no restart. The state is stored in the database\n"
            "(table pgq.paused_queues; SQL: SELECT pgq.pause('name'), SELECT pgq.resume('name'))."
        ),
    )
    actions = p.add_subparsers(dest="queue_command", metavar="ACTION", required=True)

    q = actions.add_parser(
        "list", parents=[dsn], formatter_class=Formatter, help="list queues: state and job counts",
        description="List every queue that holds jobs or is paused: its state (running or paused)\n"
                    "and its job counts.",
    )
    q.add_argument("--json", action="store_true", help="print a JSON array (ages in seconds) instead of a table")
    q.set_defaults(handler=cmd_queue_list)

    q = actions.add_parser(
        "pause", parents=[dsn], formatter_class=Formatter, help="stop workers from claiming a queue's jobs",
        description="Pause queue NAME: when this command returns, no worker claims its jobs any more.\n"
                    "Running jobs finish; enqueueing still works. Pausing a paused queue changes nothing.\n"
                    "pgq keeps no list of queues (a queue exists through its jobs), so a queue that holds\n"
                    "no job yet is paused too, ahead of its first job, with a warning on stderr in case\n"
                    "the name is mistyped (exit status 0). A pause that changes the state is recorded\n"
                    "with --actor and your database role (pgq.paused_queues, pgq.control_audit), and\n"
                    "`pgq jobs explain` names them.",
    )
    q.add_argument("name", metavar="NAME", help="queue name")
    add_actor(q)
    q.set_defaults(handler=cmd_queue_pause)

    q = actions.add_parser(
        "resume", parents=[dsn], formatter_class=Formatter, help="let workers claim a paused queue's jobs again",
        description="Resume paused queue NAME and wake idle workers, so its ready jobs start at once.\n"
                    "Recorded in pgq.control_audit with --actor and your database role.",
    )
    q.add_argument("name", metavar="NAME", help="queue name")
    add_actor(q)
    q.set_defaults(handler=cmd_queue_resume)

    q = actions.add_parser(
        "group-limits", parents=[dsn], formatter_class=Formatter,
        help="list the per-group limits, or set or remove those of a kind",
        description="Set the per-group limits of jobs of KIND: at most --concurrency running jobs and at\n"
                    "most --rate starts per group key (a job's group_key), across all workers. Exact:\n"
                    "the claim enforces them. An option left out means no such limit; --remove removes\n"
                    "both. Stored in table pgq.group_limits (Python: Queue.set_group_limits); a change is\n"
                    "recorded in pgq.control_audit with --actor and your database role.\n"
                    "Without KIND and options: list the kinds that have group limits, with their grouped\n"
                    "jobs running now and how many groups those belong to.",
    )
    q.add_argument("kind", metavar="KIND", nargs="?", default=None, help="job kind (task name)")
    q.add_argument("--concurrency", metavar="N", type=int, default=None,
                   help="at most N running jobs of KIND per group key")
    q.add_argument("--rate", metavar="RATE", default=None,
                   help="at most so many starts per group key and window: 10/s, 5/min, 1000/h, 10/2s")
    q.add_argument("--remove", action="store_true", help="remove the kind's group limits")
    add_actor(q)
    q.add_argument("--json", action="store_true",
                   help="list as a JSON array (per_s: the rate's window in seconds) instead of a table")
    q.set_defaults(handler=cmd_queue_group_limits)


def format_queues(rows: Sequence[Mapping[str, Any]]) -> str:
    """Render rows of `Queue.stats()` as the `pgq queue list` table ("no queues" when empty)."""
    if not rows:
        return "no queues (no jobs, none paused)"
    body = [
        [
            cell(str(r["queue"])),
            "paused" if r["paused"] else "running",
            *(str(r[k]) for k in ("ready", "scheduled", "running", "failed")),
            format_age(seconds_of(r["oldest_ready_age"])),
            r["paused_at"].isoformat(sep=" ", timespec="seconds") if r["paused_at"] else "-",
        ]
        for r in rows
    ]
    return render_table(QUEUE_COLUMNS, body, right=range(2, 7))


def format_rate(max_starts: int, per_s: float) -> str:
    """A rate limit as `--rate` takes it: ``10/s``, ``5/min``, ``1000/h``, ``10/d``, else ``10/90s``."""
    unit = _WINDOW_UNITS.get(per_s)
    return f"{max_starts}/{unit}" if unit else f"{max_starts}/{per_s:g}s"


def format_group_limits(rows: Sequence[Mapping[str, Any]]) -> str:
    """Render rows of sql/group_limits_list.sql as the `pgq queue group-limits` table ("-": no such
    limit; "no group limits" when empty)."""
    if not rows:
        return "no group limits (set some with: pgq queue group-limits KIND --concurrency N --rate RATE)"
    body = [
        [
            cell(str(r["kind"])),
            "-" if r["max_running"] is None else str(r["max_running"]),
            "-" if r["max_starts"] is None else format_rate(r["max_starts"], r["per_s"]),
            str(r["running"]),
            str(r["running_groups"]),
            r["updated_at"].isoformat(sep=" ", timespec="seconds"),
        ]
        for r in rows
    ]
    return render_table(GROUP_LIMIT_COLUMNS, body, right=range(1, 5))


def cmd_queue_list(args: argparse.Namespace) -> int:
    """`pgq queue list`: one row per queue with its state and counts, or JSON with `--json`."""
    with open_queue(args) as queue:
        rows = queue.stats()
    print_rows(rows, args.json, format_queues)
    return EXIT_OK


def cmd_queue_pause(args: argparse.Namespace) -> int:
    """`pgq queue pause NAME`."""
    actor = actor_of(args)
    with open_queue(args) as queue:
        changed = queue.pause(args.name, actor=actor)
        known = queue_exists(queue, args.name)
    if not known:
        warn(f"queue {cell(args.name)!r} holds no jobs: paused anyway, ahead of its first job (a mistyped "
             "name? `pgq queue list` shows the queues; `pgq queue resume` undoes it)")
    print(f"queue {cell(args.name)} is paused" + ("" if changed else " (it was already)"))
    return EXIT_OK


def cmd_queue_resume(args: argparse.Namespace) -> int:
    """`pgq queue resume NAME`."""
    actor = actor_of(args)
    with open_queue(args) as queue:
        changed = queue.resume(args.name, actor=actor)
    print(f"queue {cell(args.name)} is running" + ("" if changed else " (it was not paused)"))
    return EXIT_OK


def cmd_queue_group_limits(args: argparse.Namespace) -> int:
    """`pgq queue group-limits [KIND]`: without KIND (and options) lists the kinds' group limits;
    with it, checks every option before connecting, then sets the limits."""
    given = args.concurrency is not None or args.rate is not None
    if args.kind is None:
        if given or args.remove:
            raise CliError("--concurrency, --rate and --remove need a KIND", EXIT_USAGE)
        with open_queue(args) as queue, queue.pool.connection() as conn:
            found = conn.cursor(row_factory=dict_row).execute(_sql.query("group_limits_list")).fetchall()
        # A row with neither limit only keeps a grouped kind's turn (the claim adds it): not a limit.
        rows = [r for r in found if r["max_running"] is not None or r["max_starts"] is not None]
        print_rows(rows, args.json, format_group_limits)
        return EXIT_OK
    if args.json:
        raise CliError("--json lists the group limits: give no KIND", EXIT_USAGE)
    if given == args.remove:
        raise CliError("give --concurrency and/or --rate, or --remove", EXIT_USAGE)
    if args.concurrency is not None and args.concurrency < 1:
        raise CliError(f"--concurrency must be >= 1, got {args.concurrency}", EXIT_USAGE)
    rate = None if args.rate is None else parse_rate(args.rate)
    actor = actor_of(args)
    with open_queue(args) as queue:
        queue.set_group_limits(args.kind, concurrency=args.concurrency, rate=rate, actor=actor)
    if args.remove:
        print(f"kind {cell(args.kind)}: no group limits")
    else:
        parts = [] if args.concurrency is None else [f"at most {args.concurrency} running"]
        if rate is not None:
            parts.append(f"at most {rate[0]} starts per {rate[1]:g} s")
        print(f"kind {cell(args.kind)}: {' and '.join(parts)} per group key")
    return EXIT_OK
