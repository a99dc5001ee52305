"""Maintenance that workers run for the whole queue: rescue, periodic enqueue, retention, the counts of
finished jobs, the day partitions of finished jobs made ahead.

Every worker runs the loop (`Maintenance.run`), but each run of a step is done by one worker only:
the step's transaction starts with `pgq.lead(<the step>)` (the row lock of the step's row of
pgq.leaders, SKIP LOCKED), and whoever does not get it skips that run. No session lock is ever held,
so this works through PgBouncer in transaction mode, and a worker that dies mid-run releases the lock
with its transaction.

Each step is a class with `run_once()`, which does one run and returns a `StepResult` (whether this
run was the leader, and counts); the loop around them only decides when to call them. Tests call
`run_once()` directly.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import logging
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Final

import psycopg

from .. import _ops
from .._jitter import JITTER
from ..client import AsyncQueue
from ..errors import NotMigrated, one_line
from ..metrics import Metrics
from ..models import JobSpec
from ..tasks import AnyTask, Periodic, follow_up_spec
from .registry import Registry

__all__ = [
    "COUNT_INTERVAL",
    "PARTITIONS_INTERVAL",
    "PERIODIC_LOCK_KEY",
    "RESCUE_LOCK_KEY",
    "RETENTION_LOCK_KEY",
    "Counter",
    "Maintenance",
    "PartitionMaker",
    "PeriodicEnqueuer",
    "Rescuer",
    "Retention",
    "StepResult",
]

logger = logging.getLogger("pgq.maintenance")

# The steps whose leader each run elects (pgq.lead takes the row lock of the step's row of
# pgq.leaders for the run's transaction; revision 0021). Row locks need UPDATE on pgq's table, so no
# role without pgq's rights can hold one, as any role could hold an advisory lock.
RESCUE_LOCK_KEY: Final = "rescue"
PERIODIC_LOCK_KEY: Final = "periodic"
RETENTION_LOCK_KEY: Final = "retention"

MAX_TICKS_PER_RUN = 1000
# Seconds between a worker's settle runs (pgq.settle): how late a child whose parent finished while
# its producer's transaction was open is released, at most, after the producer commits.
SETTLE_INTERVAL: Final = 1.0
"""At most this many ticks of one schedule are enqueued per run (the latest ones)."""


@dataclass(frozen=True, slots=True)
class StepResult:
    """One run of a maintenance step: `leader` is False when another worker held the step's lock
    (nothing was done); `counts` says what was done (keys depend on the step)."""

    leader: bool
    counts: dict[str, int] = field(default_factory=dict)


class Rescuer:
    """Rescues attempts whose lease expired (their worker died or hung): jobs with attempts left are
    queued again at once (their workers notified), the others failed. See `job_rescue.sql`.
    Each rescued job counts as event "rescued" in `metrics`, when given.

    With `stalled_after` (seconds; a worker passes half its lease), each run first ends the sessions stuck
    that long sending the result of a pgq statement that writes to a client that stopped reading
    (a frozen worker whose claim never committed holds its jobs locked, out of every lease's reach:
    see `stalled_session_end.sql`), logging each at WARNING.

    `tasks`: the worker's tasks by kind; a job of one with `on_failure` that the rescue fails for good
    (its last attempt's lease expired) gets that follow-up in the rescue's transaction.

    `registry`: the worker's registry row, refreshed by the first statement of each run (leader or
    not); the leader also prunes stale registry rows (see pgq.worker.registry).
    """

    def __init__(
        self,
        queue: AsyncQueue,
        *,
        batch: int = _ops.RESCUE_BATCH,
        metrics: Metrics | None = None,
        stalled_after: float | None = None,
        tasks: Mapping[str, AnyTask] | None = None,
        registry: Registry | None = None,
    ) -> None:
        if stalled_after is not None and not stalled_after > 0:
            raise ValueError(f"stalled_after must be positive, got {stalled_after!r}")
        self._queue = queue
        self._batch = batch
        self._metrics = metrics
        self._stalled_after = stalled_after
        self._tasks: Mapping[str, AnyTask] = tasks or {}
        self._on_failure = self._follow_ups if any(t.on_failure is not None for t in self._tasks.values()) else None
        self._registry = registry

    def _follow_ups(self, job_id: int, kind: str) -> list[JobSpec]:
        """The `on_failure` job of job `job_id` of `kind` that the rescue failed for good (none when
        this worker's app has no such task, or it has no on_failure)."""
        task = self._tasks.get(kind)
        if task is None or task.on_failure is None:
            return []
        error = "lease expired on the last attempt (its worker died or hung)"
        return [follow_up_spec(task.on_failure, {"job_id": job_id, "error": error}, {}, self._tasks)]

    async def run_once(self) -> StepResult:
        """End stalled sessions (with `stalled_after`), then rescue every expired attempt, `batch`
        per transaction, if this worker gets the lock each time.

        Counts: `requeued`, `failed`, and with `stalled_after` also `sessions_ended`. Raises
        psycopg.OperationalError when the database is unreachable (a batch that committed before
        stays done).
        """
        registry = self._registry
        if registry is None or not registry.enabled:
            return await self._run_once(None, prune=False)
        seen = registry.for_refresh()
        try:
            return await self._run_once(seen, prune=True)
        except psycopg.errors.InsufficientPrivilege as exc:
            if "worker_" not in str(exc):
                raise
            # The registry's functions are refused to this role: the rescue goes on without them.
            registry.refused(exc)
            seen = None
            return await self._run_once(None, prune=False)
        finally:
            await registry.refreshed(seen)

    async def _run_once(self, seen: _ops.WorkerRow | None, *, prune: bool) -> StepResult:
        # `seen` goes with the run's first statement (then it is None); `prune` with the first batch.
        ended: int | None = None
        stalled = await self._end_stalled(seen)
        if stalled is not None:
            seen = None
            if stalled.value is None:
                return StepResult(False)
            ended = len(stalled.value)
        requeued = failed = 0
        first = prune
        while True:
            run = await self._queue._run(_ops.rescue_as_leader(RESCUE_LOCK_KEY, self._batch, self._on_failure,
                                                               seen=seen, prune=first))
            seen, first = None, False
            if run.value is None:
                if requeued or failed or ended is not None:  # lost the lock since: someone else goes on
                    break
                return StepResult(False)
            for job_id, status, queue, kind in run.value:
                if self._metrics is not None:
                    self._metrics.job_event("rescued", queue, kind)
                if status == "failed":
                    failed += 1
                else:
                    requeued += 1
                logger.warning("job %d: lease expired, rescued (%s)", job_id, status,
                               extra={"event": "job_rescue", "job_id": job_id, "status": status})
            if len(run.value) < self._batch:
                break
        counts = {"requeued": requeued, "failed": failed}
        if ended is not None:
            counts["sessions_ended"] = ended
        return StepResult(True, counts)

    async def _end_stalled(self, seen: _ops.WorkerRow | None) -> _ops.LeaderRun[list[_ops.StalledSession]] | None:
        # The stalled-session step (None when off, or refused to this role: then said once and off,
        # for this extra must never stop the rescue itself). Logs each session ended.
        if self._stalled_after is None:
            return None
        try:
            run = await self._queue._run(_ops.end_stalled_as_leader(RESCUE_LOCK_KEY, self._stalled_after, seen=seen))
        except psycopg.errors.InsufficientPrivilege as exc:
            logger.warning("ending stalled sessions is disabled in this worker: %s; expired leases are "
                           "still rescued", one_line(exc), extra={"event": "maintenance_refused",
                                                                  "step": "stalled_session_end"})
            self._stalled_after = None
            return None
        for s in run.value or ():
            logger.warning(
                "ended database session %d (application %r, client %s): stuck %.1f s sending the result "
                "of %s to a client that stopped reading; the rows it held are free again",
                s.pid, s.application_name, s.client, s.stalled_s, s.statement,
                extra={"event": "stalled_session_end", "pid": s.pid, "statement": s.statement})
        return run


class Retention:
    """Removes jobs that finished (succeeded, failed, cancelled) more than `older_than` seconds ago:
    first the day partitions of finished jobs whose whole day is past that (each dropped in its own
    short transaction, pgq.finished_partitions_drop), then what is left past it row by row, in
    batches of `batch`, each its own short transaction. Every transaction holds the retention lock."""

    def __init__(self, queue: AsyncQueue, older_than: float, *, batch: int = _ops.PURGE_BATCH) -> None:
        if not older_than > 0:
            raise ValueError(f"retention must be positive, got {older_than!r}")
        self._queue = queue
        self._older_than = older_than
        self._batch = batch

    async def run_once(self) -> StepResult:
        """Drop the partitions past the horizon, then delete batches until one comes back short, as long
        as this worker gets the lock. Counts: `dropped` (partitions), `dropped_jobs` (their jobs),
        `skipped` (partitions left to the row deletes: held or busy) and `deleted` (rows)."""
        drops = _ops.PartitionDrops()
        leader = False
        while not drops.done:
            run = await self._queue._run(_ops.partition_drop_as_leader(RETENTION_LOCK_KEY, self._older_than,
                                                                       drops.after))
            if run.value is None:
                return StepResult(leader, self._counts(drops, 0))
            leader = True
            drops.record(run.value)
        for name, jobs in drops.dropped:
            logger.info("retention: dropped partition %s (%d finished jobs)", name, jobs,
                        extra={"event": "job_purge_partition", "partition": name, "count": jobs})
        for name, why in drops.skipped:
            logger.info("retention: partition %s not dropped (%s): its jobs past the horizon are deleted row "
                        "by row", name, "a failed job in it holds its sequence" if why == "held"
                        else "its lock was not granted", extra={"event": "job_purge_partition_skipped",
                                                                "partition": name, "reason": why})
        deleted = 0
        while True:
            batch = await self._queue._run(_ops.purge_as_leader(RETENTION_LOCK_KEY, self._older_than, self._batch))
            if batch.value is None:
                return StepResult(leader or deleted > 0, self._counts(drops, deleted))
            deleted += batch.value
            if batch.value < self._batch:
                if deleted:
                    logger.info("retention: deleted %d finished jobs", deleted,
                                extra={"event": "job_purge", "count": deleted})
                return StepResult(True, self._counts(drops, deleted))

    @staticmethod
    def _counts(drops: _ops.PartitionDrops, deleted: int) -> dict[str, int]:
        return {"dropped": len(drops.dropped), "dropped_jobs": sum(n for _, n in drops.dropped),
                "skipped": len(drops.skipped), "deleted": deleted}


PARTITIONS_INTERVAL: Final = 3600.0
"""Seconds between a worker's runs of pgq.finished_partitions_ensure (the day partitions of the finished
jobs, PARTITIONS_AHEAD days ahead): cheap when none is missing, and one creator at a time."""


class PartitionMaker:
    """Makes the day partitions of the finished jobs ahead (pgq.finished_partitions_ensure, revision 0033),
    so that acknowledgements never land in the default partition while a worker runs."""

    def __init__(self, queue: AsyncQueue, *, days: int = _ops.PARTITIONS_AHEAD) -> None:
        self._queue = queue
        self._days = days

    async def run_once(self) -> StepResult:
        """One call. Counts: `created` (partitions made)."""
        created = await self._queue._run(_ops.partitions_ensure(self._days))
        if created:
            logger.info("partitions: made %d day partitions of the finished jobs ahead", created,
                        extra={"event": "finished_partitions_ensure", "count": created})
        return StepResult(True, {"created": created})


class PeriodicEnqueuer:
    """Enqueues the due ticks of the app's periodic tasks, each exactly once across all workers.

    A run's leader computes, from the database clock, the ticks due per schedule: those after the
    last run this process saw (bounded by the schedule's catch-up window), or on this process's first
    run only the latest tick of the catch-up window. `periodic_enqueue.sql` enqueues those that have
    no job yet (in any status). Non-leaders do nothing and look again at the next tick or within
    `retry_after` seconds.
    """

    def __init__(self, queue: AsyncQueue, periodic: Sequence[Periodic], *, retry_after: float = 1.0) -> None:
        self._queue = queue
        self._periodic = tuple(periodic)
        self._retry_after = retry_after
        self._seen: dict[str, dt.datetime] = {}  # schedule name -> database time of the last leader run
        self._db_now: dt.datetime | None = None
        self._mono_at_db_now = 0.0

    def _plan(self, now: dt.datetime) -> list[JobSpec]:
        specs: list[JobSpec] = []
        for p in self._periodic:
            earliest = now - dt.timedelta(seconds=p.catch_up)
            seen = self._seen.get(p.name)
            if seen is None:
                latest = p.schedule.latest(earliest, now)
                ticks = [] if latest is None else [latest]
            else:
                ticks = list(p.schedule.ticks(max(seen, earliest), now))[-MAX_TICKS_PER_RUN:]
            specs.extend(p.spec(tick) for tick in ticks)
        return specs

    async def run_once(self) -> StepResult:
        """Enqueue the due ticks if this worker gets the lock. Counts: `enqueued` (jobs created) and
        `due` (ticks considered, existing ones included)."""
        if not self._periodic:
            return StepResult(True, {"enqueued": 0, "due": 0})
        planned: list[JobSpec] = []

        def plan(now: dt.datetime) -> list[JobSpec]:
            planned[:] = self._plan(now)
            return planned

        started = time.monotonic()
        run = await self._queue._run(_ops.periodic_enqueue_as_leader(PERIODIC_LOCK_KEY, plan))
        self._db_now, self._mono_at_db_now = run.now, started
        if run.value is None:
            return StepResult(False)
        for p in self._periodic:
            self._seen[p.name] = run.now
        for job_id, key in run.value:
            logger.info("periodic: enqueued job %d (%s)", job_id, key,
                        extra={"event": "periodic_enqueue", "job_id": job_id, "dedupe_key": key})
        return StepResult(True, {"enqueued": len(run.value), "due": len(planned)})

    def next_run_in(self, leader: bool, cap: float) -> float:
        """Seconds until the next run should happen: just after the earliest next tick of any schedule
        (estimated on the database clock seen by the last run), within `cap`; within `retry_after`
        after a run that was not the leader."""
        if not self._periodic or self._db_now is None:
            return cap
        elapsed = time.monotonic() - self._mono_at_db_now
        now = self._db_now + dt.timedelta(seconds=elapsed)
        horizon = dt.timedelta(seconds=cap)
        wait = cap
        for p in self._periodic:
            tick = p.schedule.next_after(now, horizon)
            if tick is not None:
                wait = min(wait, (tick - now).total_seconds())
        if not leader:
            wait = min(wait, self._retry_after * (0.5 + JITTER.random()))
        # A few milliseconds late rather than early: the run must see the tick as due.
        return max(wait, 0.0) + 0.005


COUNT_INTERVAL: Final = 20.0
"""Seconds between a worker's passes of the finished-job counts (one worker's pass at a time does the
work; the others' find its lock taken and return at once)."""


class Counter:
    """Keeps pgq.finished_counts, the dashboard's exact counts of finished jobs per minute, queue, kind and
    status (pgq.count_finished, revision 0026): each pass counts the minutes since the last one, and the
    last `recount_s` seconds before them again (late commits), at most `span_s` seconds of minutes."""

    def __init__(self, queue: AsyncQueue, *, recount_s: float = _ops.COUNT_RECOUNT_S,
                 span_s: float = _ops.COUNT_SPAN_S) -> None:
        self._queue = queue
        self._recount_s = recount_s
        self._span_s = span_s

    async def run_once(self) -> StepResult:
        """One pass, if no other worker's is running. Counts: none (`leader` says whether it ran)."""
        through = await self._queue._run(_ops.count_finished(self._recount_s, self._span_s))
        return StepResult(through is not None)


# What happens instead when the database refuses a step to the worker's role.
_REFUSED_HINTS: Final = {
    "settle": "children and waits that a finish could not see are settled by the other workers and the "
              "rescue (grant pgq_worker to this one's role)",
    "rescue": "expired leases are rescued by the other workers (grant pgq_worker to this one's role)",
    "periodic": "periodic jobs are enqueued by the other workers (grant pgq_worker to this one's role)",
    "retention": "finished jobs stay until `pgq purge` runs as pgq_admin (workers with only pgq_worker "
                 "may not delete jobs)",
    "partitions": "the day partitions of the finished jobs are made ahead by the other workers and `pgq purge` "
                  "(grant pgq_worker to this one's role); without any, finished jobs land in the default partition",
    "counts": "the dashboard's counts of finished jobs are kept by the other workers (grant pgq_worker to this "
              "one's role); without any, it counts the newest finished jobs only",
}


class Maintenance:
    """Runs the six steps forever at their intervals (until cancelled). Owned by a Worker.

    `count_interval`: seconds between passes of the finished-job counts (`Counter`).

    `partitions_interval`: seconds between runs of `PartitionMaker` (the day partitions of the finished
    jobs made PARTITIONS_AHEAD days ahead; every worker runs it, one creator at a time).

    `settle_interval`: seconds between settle runs (`pgq.settle`: the children and waits a finish could
    not see because their producer committed after it; one worker at a time does the work).

    `rescue_interval`: seconds between rescue runs (a worker passes half its lease). `retention`:
    seconds after which finished jobs are deleted (None: never), checked every `retention_interval`.
    Periodic runs follow the ticks. A failing step (database down) is logged and retried with
    backoff; it never ends the loop, except NotMigrated, which is raised. A step the database refuses
    to the worker's role (InsufficientPrivilege) is logged once and not run again by this worker. `metrics`
    counts rescues. `stalled_after`, `tasks` and `registry`: see `Rescuer` (a worker passes half its
    lease, its app's tasks and its registry row).
    """

    def __init__(
        self,
        queue: AsyncQueue,
        periodic: Sequence[Periodic],
        *,
        rescue_interval: float,
        retention: float | None,
        retention_interval: float,
        periodic_cap: float = 30.0,
        settle_interval: float = SETTLE_INTERVAL,
        count_interval: float = COUNT_INTERVAL,
        partitions_interval: float = PARTITIONS_INTERVAL,
        metrics: Metrics | None = None,
        stalled_after: float | None = None,
        tasks: Mapping[str, AnyTask] | None = None,
        registry: Registry | None = None,
    ) -> None:
        self._queue = queue
        self.rescuer = Rescuer(queue, metrics=metrics, stalled_after=stalled_after, tasks=tasks, registry=registry)
        self.periodic = PeriodicEnqueuer(queue, periodic)
        self.retention = None if retention is None else Retention(queue, retention)
        self.counter = Counter(queue)
        self.partitions = PartitionMaker(queue)
        self._partitions_interval = partitions_interval
        self._count_interval = count_interval
        self._rescue_interval = rescue_interval
        self._settle_interval = settle_interval
        self._retention_interval = retention_interval
        self._periodic_cap = periodic_cap
        self._has_periodic = bool(periodic)

    async def run(self) -> None:
        """Run the steps at their times until cancelled."""
        now = time.monotonic()
        # Spread the workers' first runs a little, then keep each step on its own clock.
        due = {
            "rescue": now + JITTER.random() * min(self._rescue_interval, 1.0),
            "settle": now + JITTER.random() * self._settle_interval,
            "counts": now + JITTER.random() * min(self._count_interval, 5.0),
            "partitions": now + JITTER.random() * min(self._partitions_interval, 10.0),
            "periodic": now if self._has_periodic else float("inf"),
            "retention": now + JITTER.random() * min(self._retention_interval, 10.0)
            if self.retention is not None else float("inf"),
        }
        failures = 0
        while True:
            step = min(due, key=due.__getitem__)
            delay = due[step] - time.monotonic()
            if delay > 0:
                await asyncio.sleep(delay)
            try:
                due[step] = time.monotonic() + await self._run_step(step)
                failures = 0
            except NotMigrated:
                raise
            except psycopg.errors.InsufficientPrivilege as exc:
                # The worker's role may not do this step (pgq_worker may not purge): say so once and
                # leave the step to whoever may; retrying could never succeed.
                logger.warning("maintenance step %s disabled in this worker: %s; %s", step,
                               one_line(exc), _REFUSED_HINTS[step],
                               extra={"event": "maintenance_refused", "step": step})
                due[step] = float("inf")
            except (psycopg.OperationalError, psycopg.errors.QueryCanceled) as exc:
                failures += 1
                backoff = min(0.2 * 2**failures, 10.0) * (0.5 + JITTER.random())
                logger.warning("maintenance step %s failed (%s); retrying in %.1f s", step,
                               one_line(exc), backoff,
                               extra={"event": "maintenance_error", "step": step})
                due[step] = time.monotonic() + backoff
            except Exception:
                failures += 1
                logger.exception("maintenance step %s failed", step,
                                 extra={"event": "maintenance_error", "step": step})
                due[step] = time.monotonic() + min(0.2 * 2**failures, 10.0)

    async def _run_step(self, step: str) -> float:
        # Runs `step` once; returns the seconds until its next run.
        jitter = 0.9 + JITTER.random() * 0.2
        if step == "rescue":
            await self.rescuer.run_once()
            return self._rescue_interval * jitter
        if step == "settle":
            await self._queue._run(_ops.settle())
            return self._settle_interval * jitter
        if step == "counts":
            await self.counter.run_once()
            return self._count_interval * jitter
        if step == "partitions":
            await self.partitions.run_once()
            return self._partitions_interval * jitter
        if step == "periodic":
            result = await self.periodic.run_once()
            return self.periodic.next_run_in(result.leader, self._periodic_cap)
        assert self.retention is not None
        await self.retention.run_once()
        return self._retention_interval * jitter
