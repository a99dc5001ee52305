"""`pgq enqueue KIND`: enqueue one job and print its id."""

from __future__ import annotations

import argparse
import json
from typing import Any, NoReturn

from ..models import PRIORITY_MAX, PRIORITY_MIN, JobSpec
from .args import BIGINT_MAX, duration_arg, int_range, seconds_arg
from .common import EXIT_OK, EXIT_USAGE, CliError, Commands, Formatter, one_line, open_queue

__all__ = ["parse_payload", "register"]


def register(commands: Commands, dsn: argparse.ArgumentParser) -> None:
    """Add this command to `commands` (`dsn`: the parent parser with --dsn and --pgbouncer)."""
    p = commands.add_parser(
        "enqueue",
        parents=[dsn],
        formatter_class=Formatter,
        help="enqueue one job and print its id",
        description=(
            "Enqueue one job and print its id. With --dedupe-key, when an active job of the queue\n"
            "already holds the key: by default nothing is created and that job's id is printed; with\n"
            "--on-conflict replace or --debounce, that job takes the new payload if it has not started\n"
            "(its id is printed), and behind a running one a new job waits (the new id is printed)."
        ),
    )
    p.add_argument("kind", metavar="KIND", help="the task to run, e.g. email.send")
    p.add_argument(
        "--payload", metavar="JSON", default=None,
        help="the task's keyword arguments, a JSON object (default: {})",
    )
    p.add_argument("--queue", metavar="Q", default="default", help="queue (default: default)")
    p.add_argument(
        "--priority", metavar="N", type=int_range("priority", PRIORITY_MIN, PRIORITY_MAX), default=0,
        help=f"lower runs first, {PRIORITY_MIN}..{PRIORITY_MAX} (default: 0)",
    )
    p.add_argument(
        "--delay", metavar="SECONDS", type=seconds_arg("delay", positive=False), default=None,
        help="run no earlier than this many seconds from now (default: at once)",
    )
    p.add_argument(
        "--dedupe-key", metavar="K", default=None,
        help="at most one active (queued or running) job of the queue holds key K",
    )
    p.add_argument(
        "--watermark", metavar="N", type=int_range("watermark", -BIGINT_MAX - 1, BIGINT_MAX), default=None,
        help="input version for a deduplicated job: a higher one arriving while the job runs makes "
        "it run once more; one already processed creates nothing (needs --dedupe-key)",
    )
    p.add_argument(
        "--max-attempts", metavar="N", type=int_range("max attempts", 1, 32_767), default=None,
        help="attempts before the job fails for good (default: the database default)",
    )
    p.add_argument(
        "--group-key", metavar="G", default=None,
        help="the job's group (a tenant, a customer): per-group limits and fair claiming apply per "
        "group (see `pgq queue group-limits`)",
    )
    p.add_argument(
        "--sequence-key", metavar="K", default=None,
        help="the job's sequence: jobs with the same key in a queue run one at a time, in enqueue "
        "order (not with --dedupe-key)",
    )
    p.add_argument(
        "--sequence-on-failure", metavar="F", choices=("hold", "continue"), default=None,
        help="when the job fails for good: hold (default: the rest of its sequence waits until it is "
        "retried or cancelled) or continue (the next one runs); needs --sequence-key",
    )
    p.add_argument(
        "--unique-for", metavar="DURATION", type=duration_arg, default=None,
        help="with --dedupe-key: the key also dedupes against its job that finished less than "
        "DURATION ago (7d, 12h, 30m, 90; at most 31 days)",
    )
    p.add_argument(
        "--on-conflict", metavar="C", choices=("ignore", "replace"), default=None,
        help="with --dedupe-key: ignore (default: the key's active job is left as it is) or replace "
        "(a job of the key not started yet takes this payload, priority and run time; behind a "
        "running one a new job waits for it)",
    )
    p.add_argument(
        "--debounce", metavar="DURATION", type=duration_arg, default=None,
        help="with --dedupe-key: replace, and run DURATION after the last enqueue of the key",
    )
    p.set_defaults(handler=cmd_enqueue)


def parse_payload(text: str | None) -> Any:
    """Parse `--payload` JSON text (None means no payload); raise CliError (exit 2) for bad JSON or
    JSON that is not an object (a task's handler takes the payload's fields as keyword arguments, so
    any other value could only fail when the job runs).

    NaN and infinities are rejected like any other non-JSON text.
    """
    if text is None:
        return None

    def reject_constant(name: str) -> NoReturn:
        raise ValueError(f"{name} is not valid JSON")

    try:
        value = json.loads(text, parse_constant=reject_constant)
    except ValueError as exc:  # json.JSONDecodeError is a ValueError
        raise CliError(f"--payload is not valid JSON: {one_line(exc)}", EXIT_USAGE) from None
    if not isinstance(value, dict):
        raise CliError(f"--payload must be a JSON object (the task's keyword arguments), got "
                       f"{_JSON_NAMES.get(type(value), type(value).__name__)} {one_line(text)[:40]}", EXIT_USAGE)
    return value


_JSON_NAMES = {list: "an array", str: "a string", int: "a number", float: "a number", bool: "a boolean",
               type(None): "null"}


def cmd_enqueue(args: argparse.Namespace) -> int:
    """`pgq enqueue KIND`: validate everything before connecting, enqueue, print the job id."""
    if args.watermark is not None and args.dedupe_key is None:
        raise CliError("--watermark needs --dedupe-key", EXIT_USAGE)
    if args.sequence_on_failure is not None and args.sequence_key is None:
        raise CliError("--sequence-on-failure needs --sequence-key", EXIT_USAGE)
    spec = JobSpec(
        args.kind,
        parse_payload(args.payload),
        queue=args.queue,
        priority=args.priority,
        delay=args.delay,
        dedupe_key=args.dedupe_key,
        watermark=args.watermark,
        max_attempts=args.max_attempts,
        group_key=args.group_key,
        sequence_key=args.sequence_key,
        sequence_on_failure=args.sequence_on_failure or "hold",
        unique_for=args.unique_for,
        on_conflict=args.on_conflict,
        debounce=args.debounce,
    )
    with open_queue(args) as queue:
        [job_id] = queue.enqueue_many([spec])
    print(job_id)
    return EXIT_OK
