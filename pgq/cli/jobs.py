"""`pgq jobs list|show|explain|retry|cancel|delete`: find, inspect and manage jobs, one by id or all
that match filters (pgq.cli.bulk)."""

from __future__ import annotations

import argparse
import dataclasses
import datetime as dt
import json
from typing import Any

from ..client import Queue
from ..errors import NotFound
from ..insight import Explanation
from ..models import Dependencies, Dependency, Job, JobStatus
from .args import int_range, job_id, status_arg
from .bulk import add_filters, has_filters, run_bulk
from .common import EXIT_OK, CliError, Commands, Formatter, actor_of, add_actor, open_queue, queue_exists
from .render import cell, dependencies_json, format_relative, jsonable, render_table

JOBS_LIST_DEFAULT_LIMIT = 50
JOBS_LIST_MAX_LIMIT = 100_000
DEPENDENCIES_SHOWN = 100
"""`pgq jobs show` lists at most this many parents and this many children (and says how many more)."""

__all__ = ["format_dependencies", "format_explanation", "format_job", "register"]


_AUDIT = (
    "\nRecorded in pgq.job_audit with --actor (default: os:<your OS user name>) and your database role."
)
_BULK = (
    "\nIt works in batches (--batch jobs per transaction, lowest ids first, progress on stderr), each\n"
    "its own row of pgq.job_audit; a run cut short can be run again. --dry-run prints the count only.\n"
    "Needs pgq's admin role."
)


def register(commands: Commands, dsn: argparse.ArgumentParser) -> None:
    """Add this command to `commands` (`dsn`: the parent parser with --dsn and --pgbouncer)."""
    p = commands.add_parser(
        "jobs",
        formatter_class=Formatter,
        help="list, show, explain, retry, cancel or delete jobs",
        description="List, show, explain, retry, cancel or delete jobs.",
    )
    jobs = p.add_subparsers(dest="jobs_command", metavar="ACTION", required=True)

    q = jobs.add_parser(
        "list",
        parents=[dsn],
        formatter_class=Formatter,
        help="list jobs, newest first",
        description="List jobs matching every given filter, newest first.",
    )
    q.add_argument(
        "--status", metavar="S", type=status_arg,
        help=f"only jobs in status S: {', '.join(s.value for s in JobStatus)}",
    )
    q.add_argument("--queue", metavar="Q", help="only jobs of queue Q (an error if Q holds no jobs at all)")
    q.add_argument("--kind", metavar="K", help="only jobs of kind K")
    q.add_argument(
        "--limit", metavar="N", type=int_range("limit", 1, JOBS_LIST_MAX_LIMIT), default=JOBS_LIST_DEFAULT_LIMIT,
        help=f"show at most N jobs, 1..{JOBS_LIST_MAX_LIMIT} (default: {JOBS_LIST_DEFAULT_LIMIT})",
    )
    q.add_argument("--json", action="store_true", help="print a JSON array of jobs instead of a table")
    q.set_defaults(handler=cmd_jobs_list)

    q = jobs.add_parser(
        "show", parents=[dsn], formatter_class=Formatter, help="show every field of one job",
        description=(
            "Show every field of one job; payload and result as indented JSON. For a job with\n"
            f"dependencies, then its parents and children (at most {DEPENDENCIES_SHOWN} of each): id, kind,\n"
            "status, whether the child needs the parent to succeed, and the parent's outcome as\n"
            "recorded when it finished; for a waiting job, the parents it still waits for.\n"
            "last_error is the error a failed or cancelled job ended with; for any other job it\n"
            "is shown as previous_attempt_error (an earlier attempt's), and claimed_by as\n"
            "last_claimed_by once that attempt no longer runs."
        ),
    )
    q.add_argument("id", metavar="ID", type=job_id, help="job id")
    q.add_argument("--json", action="store_true",
                   help="print the job as one JSON object, its parents and children under \"dependencies\"")
    q.set_defaults(handler=cmd_jobs_show)

    q = jobs.add_parser(
        "explain", parents=[dsn], formatter_class=Formatter, help="say why a job is not running now",
        description=(
            "Say why a job is not running now, each reason with its facts, read in one snapshot by the\n"
            "SQL function pgq.explain(ID) (the same answer in psql): scheduled for later, held by the\n"
            "previous job of its sequence, waiting for parents, its queue paused, its kind's concurrency\n"
            "limit or rate window full, or its group's (group limits), no live worker claiming from its\n"
            "queue or none knowing its kind; or ready, with its position in its queue; or running, or\n"
            "finished with its outcome."
        ),
    )
    q.add_argument("id", metavar="ID", type=job_id, help="job id")
    q.add_argument("--json", action="store_true", help="print the explanation as one JSON object")
    q.set_defaults(handler=cmd_jobs_explain)

    q = jobs.add_parser(
        "retry", parents=[dsn], formatter_class=Formatter, help="queue failed or cancelled jobs again",
        description=(
            "Queue a failed or cancelled job again, with fresh attempts, due now; or, given filters\n"
            "instead of an ID, every failed or cancelled job matching them all (a job whose dedupe key\n"
            f"an active job holds is skipped).{_AUDIT}{_BULK}"
        ),
    )
    q.add_argument("id", metavar="ID", type=job_id, nargs="?", help="job id (or filters)")
    add_actor(q)
    add_filters(q, "retry")
    q.set_defaults(handler=cmd_jobs_retry)

    q = jobs.add_parser(
        "cancel", parents=[dsn], formatter_class=Formatter, help="cancel a waiting, queued or running job",
        description=(
            "Cancel a waiting, queued or running job; it is never retried. The worker running it is\n"
            "told at once and stops the handler: an async handler gets CancelledError at its next\n"
            "await, a sync handler sees pgq.cancel_requested() return True. Whatever the handler\n"
            "returns then is discarded. Jobs that depend on it are cancelled with it, unless they\n"
            "were enqueued to run whatever their parents' outcome (on_parent_failure 'run').\n"
            f"Given filters instead of an ID: every waiting, queued or running job matching them all.{_AUDIT}"
            f"{_BULK}"
        ),
    )
    q.add_argument("id", metavar="ID", type=job_id, nargs="?", help="job id (or filters)")
    add_actor(q)
    add_filters(q, "cancel")
    q.set_defaults(handler=cmd_jobs_cancel)

    q = jobs.add_parser(
        "delete", parents=[dsn], formatter_class=Formatter, help="delete finished jobs matching filters",
        description=(
            "Delete every finished (succeeded, failed or cancelled) job matching all the filters, with its\n"
            f"dependency rows, as `pgq purge` does; rows another transaction holds are skipped.{_AUDIT}{_BULK}"
        ),
    )
    add_actor(q)
    add_filters(q, "delete")
    q.set_defaults(handler=cmd_jobs_delete)


def cmd_jobs_list(args: argparse.Namespace) -> int:
    """`pgq jobs list`: jobs matching the filters, newest first, as a table or JSON."""
    with open_queue(args) as queue:
        found = queue.list(status=args.status, queue=args.queue, kind=args.kind, limit=args.limit)
        if not found and args.queue is not None and not queue_exists(queue, args.queue):
            raise CliError(f"no such queue: {args.queue!r} holds no jobs")
    if args.json:
        print(json.dumps([job_fields(job) for job in found], indent=2))
        return EXIT_OK
    if not found:
        print("no jobs match")
        return EXIT_OK
    now = dt.datetime.now(dt.UTC)
    rows = [
        [
            str(job.id),
            cell(job.queue, 24),
            cell(job.kind, 32),
            job.status.value,
            f"{job.attempts}/{job.max_attempts}",
            str(job.priority),
            format_relative(job.created_at, now),
            format_relative(job.run_at, now) if job.status is JobStatus.QUEUED else "-",
            cell(job.error or (f"(previous) {job.previous_attempt_error}" if job.previous_attempt_error else ""), 48),
        ]
        for job in found
    ]
    headers = ["ID", "QUEUE", "KIND", "STATUS", "ATTEMPTS", "PRIORITY", "CREATED", "RUN AT", "LAST ERROR"]
    if any(job.group_key is not None for job in found):  # the group column only where there are groups
        headers.insert(3, "GROUP")
        for row, job in zip(rows, found, strict=True):
            row.insert(3, cell(job.group_key or "-", 24))
    print(render_table(headers, rows, right=(0, headers.index("ATTEMPTS"), headers.index("PRIORITY"))))
    return EXIT_OK


def job_fields(job: Job) -> dict[str, Any]:
    """Every field of `job` as JSON values, except that `last_error` holds only the error the job
    finished with (`Job.error`) and `previous_attempt_error` the error of an earlier attempt that
    is no longer its outcome (`Job.previous_attempt_error`): what `pgq jobs list/show --json`
    print."""
    fields = jsonable(dataclasses.asdict(job))
    fields["last_error"] = job.error
    fields["previous_attempt_error"] = job.previous_attempt_error
    return dict(fields)


def format_job(job: Job) -> str:
    """Render every field of `job`, one per line; payload, result, progress and last_error as
    indented blocks. An error that is no longer the job's outcome (it succeeded, or runs again) is
    labelled previous_attempt_error, and the worker of an attempt that no longer runs is labelled
    last_claimed_by."""
    lines: list[str] = []
    names = {f.name: f.name for f in dataclasses.fields(job)}
    if job.last_error is not None and job.error is None:
        names["last_error"] = "previous_attempt_error"
    if job.claimed_by is not None and job.lease_owner is None:
        names["claimed_by"] = "last_claimed_by"
    width = max(len(name) for name in names.values()) + 2
    for f in dataclasses.fields(job):
        value = getattr(job, f.name)
        label = f"{names[f.name]}:".ljust(width)
        if f.name in ("payload", "result", "progress"):
            text = json.dumps(value, indent=2, ensure_ascii=False, sort_keys=True)
            if "\n" in text:
                lines.append(label.rstrip())
                lines.extend("  " + line for line in text.splitlines())
                continue
            lines.append(label + text)
        elif f.name == "last_error" and value and "\n" in value:
            lines.append(label.rstrip())
            lines.extend("  " + cell(line) for line in value.splitlines())
        elif f.name == "attempts":
            lines.append(f"{label}{value} of {job.max_attempts}")
        elif isinstance(value, dt.datetime):
            lines.append(label + value.isoformat(sep=" ", timespec="milliseconds"))
        elif value is None:
            lines.append(label + "-")
        else:
            lines.append(label + cell(str(value)))
    return "\n".join(lines)


def _get_job(queue: Queue, job_id: int) -> Job:
    job = queue.get(job_id)
    if job is None:
        raise CliError(f"job {job_id} not found")
    return job


def _edge_rows(edges: tuple[Dependency, ...]) -> list[list[str]]:
    return [[str(e.id), cell(e.kind, 32) if e.kind is not None else "(deleted)",
             e.status.value if e.status is not None else "-", "yes" if e.needs_success else "no",
             e.parent_outcome.value if e.parent_outcome is not None else "-"] for e in edges]


_EDGE_HEADERS = ("ID", "KIND", "STATUS", "NEEDS SUCCESS", "PARENT OUTCOME")


def format_dependencies(deps: Dependencies) -> str:
    """Render a job's dependencies for `pgq jobs show`: for a waiting job the parents it still waits
    for, then a table of its parents and one of its children, each saying how many more there are
    when not all were read; "" for a job without dependencies."""
    lines: list[str] = []
    if deps.status is JobStatus.WAITING:
        waited = ", ".join(str(p.id) for p in deps.unfinished_parents)
        unlisted = (deps.pending_parents or 0) - len(deps.unfinished_parents)
        if unlisted > 0:
            waited += f" and {unlisted} more" if waited else f"{unlisted} not among those listed below"
        lines.append(f"waiting for {deps.pending_parents} of {deps.parent_count} parent(s): {waited}")
        if deps.held_by is not None:
            lines.append(f"held by job {deps.held_by} (the job before it in its sequence)")
    for name, edges, total, where in (("parents", deps.parents, deps.parent_count, "job_id"),
                                      ("children", deps.children, deps.child_count, "parent_id")):
        if not total:
            continue
        if lines:
            lines.append("")
        lines.append(f"{name} ({total}):")
        table = render_table(_EDGE_HEADERS, _edge_rows(edges), right=(0,))
        lines.extend("  " + line for line in table.splitlines())
        if total > len(edges):
            lines.append(f"  ... and {total - len(edges)} more: SELECT * FROM pgq.job_dependencies "
                         f"WHERE {where} = {deps.job_id}")
    return "\n".join(lines)


def cmd_jobs_show(args: argparse.Namespace) -> int:
    """`pgq jobs show ID`: every field of one job, then its dependencies; exit 1 when it does not
    exist."""
    with open_queue(args) as queue:
        job = _get_job(queue, args.id)
        try:
            deps = queue.dependencies(args.id, limit=DEPENDENCIES_SHOWN)
        except NotFound:  # deleted between the two reads
            raise CliError(f"job {args.id} not found") from None
    if args.json:
        shown = {**job_fields(job), "dependencies": dependencies_json(deps)}
        print(json.dumps(shown, indent=2, ensure_ascii=False))
    else:
        print(format_job(job))
        text = format_dependencies(deps)
        if text:
            print()
            print(text)
    return EXIT_OK


def format_explanation(explanation: Explanation) -> str:
    """Render `Queue.explain()`: the job's status, then one line per reason (its code and sentence)."""
    lines = [f"job {explanation.job_id} is {explanation.status.value}:"]
    lines.extend(f"  {r.code}: {cell(r.detail)}" for r in explanation.reasons)
    return "\n".join(lines)


def cmd_jobs_explain(args: argparse.Namespace) -> int:
    """`pgq jobs explain ID`: why the job is not running now (NotFound: exit 1)."""
    with open_queue(args) as queue:
        try:
            explanation = queue.explain(args.id)
        except NotFound:
            raise CliError(f"job {args.id} not found") from None
    if args.json:
        print(json.dumps(explanation.to_json(), indent=2, ensure_ascii=False))
    else:
        print(format_explanation(explanation))
    return EXIT_OK


def _one_or_many(args: argparse.Namespace) -> bool:
    # True: the command acts on job ID; False: on the jobs matching the filters. Both: a usage error.
    if args.id is not None and (has_filters(args) or args.dry_run):
        raise CliError("give either a job ID or filters, not both", 2)
    return args.id is not None


def cmd_jobs_retry(args: argparse.Namespace) -> int:
    """`pgq jobs retry ID`: queue a failed or cancelled job again, or make it wait for its unfinished
    parents (NotFound / InvalidState: exit 1). With filters instead: every matching job (run_bulk)."""
    if not _one_or_many(args):
        return run_bulk(args, "retry")
    actor = actor_of(args)
    with open_queue(args) as queue:
        job = queue.retry(args.id, actor=actor)
    if job.status is JobStatus.WAITING:
        print(f"job {job.id} ({cell(job.kind)}) waits for its unfinished parents again, "
              f"then runs with {job.max_attempts} attempt(s)")
    else:
        print(f"job {job.id} ({cell(job.kind)}) is queued again, {job.max_attempts} attempt(s) left")
    return EXIT_OK


def cmd_jobs_cancel(args: argparse.Namespace) -> int:
    """`pgq jobs cancel ID`: cancel a waiting, queued or running job (NotFound / InvalidState: exit 1).
    With filters instead: every matching job (run_bulk)."""
    if not _one_or_many(args):
        return run_bulk(args, "cancel")
    actor = actor_of(args)
    with open_queue(args) as queue:
        job = queue.cancel(args.id, actor=actor)
    print(f"job {job.id} ({cell(job.kind)}) is cancelled")
    return EXIT_OK


def cmd_jobs_delete(args: argparse.Namespace) -> int:
    """`pgq jobs delete`: delete the finished jobs matching the filters (run_bulk)."""
    return run_bulk(args, "delete")
