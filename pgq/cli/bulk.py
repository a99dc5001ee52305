"""The filters of `pgq jobs cancel|retry|delete` (a bulk action on every job matching them) and
running such an action with progress on stderr."""

from __future__ import annotations

import argparse
import datetime as dt
import json
import sys
from typing import Any

from .._ops import BULK_STATUSES, BulkAction, JobFilter
from ..insight import BulkResult
from .args import int_range, non_empty, status_arg
from .common import EXIT_OK, CliError, actor_of, open_queue

__all__ = ["add_filters", "has_filters", "run_bulk", "timestamp_arg"]

FILTERS = ("queue", "kind", "status", "error", "payload", "after", "before", "finished_after", "finished_before")


def timestamp_arg(text: str) -> dt.datetime:
    """Parse an ISO 8601 date or time ("2026-11-26", "2026-11-26T08:00:00+01:00"); one without a time
    zone is in UTC."""
    try:
        value = dt.datetime.fromisoformat(text.strip())
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"not an ISO 8601 date or time: {text!r} (e.g. 2026-11-26T08:00:00Z)") from None
    return value if value.tzinfo is not None else value.replace(tzinfo=dt.UTC)


def json_arg(text: str) -> Any:
    """Parse a JSON value (the --payload filter)."""
    try:
        return json.loads(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"not valid JSON: {exc}") from None


def add_filters(p: argparse.ArgumentParser, action: BulkAction) -> None:
    """Add the bulk filters and options of `action` to the sub-command parser `p`."""
    allowed = ", ".join(s.value for s in BULK_STATUSES[action])
    g = p.add_argument_group("filters (a job must match every one given)")
    g.add_argument("--queue", metavar="Q", type=non_empty("queue"), help="jobs of queue Q")
    g.add_argument("--kind", metavar="K", type=non_empty("kind"), help="jobs of kind K")
    g.add_argument("--status", metavar="S", type=status_arg, action="append",
                   help=f"jobs in status S (repeatable; default: all of {allowed})")
    g.add_argument("--error", metavar="TEXT", type=non_empty("error"),
                   help="jobs whose last error contains TEXT (any case, no wildcards)")
    g.add_argument("--payload", metavar="JSON", type=json_arg,
                   help="jobs whose payload contains this JSON (jsonb @>), e.g. '{\"tenant\": 7}'")
    g.add_argument("--after", metavar="T", type=timestamp_arg, help="jobs created at or after T (ISO 8601; UTC if "
                   "no zone is given)")
    g.add_argument("--before", metavar="T", type=timestamp_arg, help="jobs created before T")
    g.add_argument("--finished-after", metavar="T", type=timestamp_arg, help="jobs finished at or after T")
    g.add_argument("--finished-before", metavar="T", type=timestamp_arg, help="jobs finished before T")
    p.add_argument("--dry-run", action="store_true", help="print how many jobs match, change nothing")
    p.add_argument("--batch", metavar="N", type=int_range("batch", 1, 10_000), default=1000,
                   help="jobs per transaction, 1..10000 (default: 1000)")


def has_filters(args: argparse.Namespace) -> bool:
    """Whether any filter was given."""
    return any(getattr(args, name, None) is not None for name in FILTERS)


def run_bulk(args: argparse.Namespace, action: BulkAction) -> int:
    """Run `action` on every job matching the filters of `args`, printing progress on stderr after
    each batch and the counts on stdout."""
    if not has_filters(args):
        ids = "a job ID or " if action != "delete" else ""  # `jobs delete` takes filters only
        raise CliError(f"give {ids}at least one filter (--queue, --kind, --status, ...); to {action} "
                       f"every job, say so with --status", 2)
    where = JobFilter(args.queue, args.kind, args.status, args.error, args.payload, args.after, args.before,
                      args.finished_after, args.finished_before)
    where.params(action)  # a bad filter fails here, before connecting
    actor = actor_of(args)

    def progress(r: BulkResult) -> None:
        if not r.dry_run:
            print(f"... {r.changed} {_past(action)} of {r.matched} matched so far ({_batches(r.batches)})",
                  file=sys.stderr, flush=True)

    method = {"cancel": "cancel_where", "retry": "retry_where", "delete": "delete_where"}[action]
    with open_queue(args) as queue:
        result: BulkResult = getattr(queue, method)(
            queue=where.queue, kind=where.kind, status=where.status, error=where.error, payload=where.payload,
            created_after=where.created_after, created_before=where.created_before,
            finished_after=where.finished_after, finished_before=where.finished_before,
            dry_run=args.dry_run, batch=args.batch, actor=actor, progress=progress)
    if result.dry_run:
        print(f"{result.matched} jobs match; nothing changed (--dry-run)")
    elif result.matched == 0:
        print(f"0 jobs {_past(action)}: none matched; nothing recorded")
    else:
        skipped = result.matched - result.changed
        why = "changed meanwhile" + (", or their dedupe key is held" if action == "retry" else "")
        # A batch that changed nothing writes no audit row.
        recorded = "recorded in pgq.job_audit" if result.changed else "nothing recorded"
        print(f"{result.changed} jobs {_past(action)}" + (f", {skipped} skipped ({why})" if skipped else "")
              + f", in {_batches(result.batches)}; {recorded}")
    return EXIT_OK


def _batches(n: int) -> str:
    return f"{n} batch" if n == 1 else f"{n} batches"


def _past(action: BulkAction) -> str:
    return {"cancel": "cancelled", "retry": "retried", "delete": "deleted"}[action]
