"""`Queue`, the blocking pgq client. GENERATED from async_queue.py by generate.py: do not edit;
edit async_queue.py and run `python3 pgq/client/generate.py`."""

from __future__ import annotations

import builtins
import contextlib
import datetime as dt
import time
from collections.abc import Callable, Iterable, Sequence
from typing import Any, Self, Unpack

import psycopg
from psycopg_pool import ConnectionPool

from .. import _ops
from ..errors import InvalidJob
from ..insight import BulkResult, Explanation, JobFilters, WorkerInfo
from ..models import FINISHED, JSON, Claim, Dependencies, Job, JobSpec, JobStatus, positive_seconds
from .common import DEFAULT_LEASE as DEFAULT_LEASE
from .common import (
    Wakeup,
    EnqueueTracer,
    SpareLock,
    SpecLike,
    T,
    TaskRegistry,
    _keeps_connection,
    _lease_s,
    _non_negative,
    _retry_args,
    _spare_done,
    _specs,
    _wait_deadline,
    _wait_left,
    _waiters,
    check_pgbouncer_pool,
    connection_failure,
    job_options,
    pool_kwargs,
    sequence_options,
)

__all__ = ["Queue"]


class Queue:
    """The pgq client: enqueue, claim and acknowledge jobs, and operate the queue. `Queue` blocks and
    is thread-safe, usable as soon as it is constructed; `AsyncQueue` has the same methods as
    coroutines, and is opened first (`async with`, or awaiting its `open()`).

    `dsn_or_pool`: a libpq DSN (the queue opens a pool of `min_size`..`max_size` connections and
    closes it in `close()`), or a psycopg_pool `ConnectionPool` (`AsyncConnectionPool`) owned by the
    caller (left open; every call takes a connection from it and gives it back).
    `keep_connection`: keep one connection of the pool out of it between calls, for the next call
    (see SPARE_MAX_AGE: it goes back at least every minute, and calls that find it busy use the
    pool). Default: when the queue created its pool. It needs a pool of two or more connections;
    with a pool of your own (whose connections must be in autocommit: PgqError otherwise), `close()`
    gives the connection back and leaves the pool open.
    `pgbouncer`: the DSN is a PgBouncer in transaction pooling mode, so the pool's connections never
    prepare statements; with a pool of your own, PgqError unless it was created with
    `kwargs={"prepare_threshold": None}`. `listen_dsn`: a direct connection for `wait` to LISTEN on
    (behind PgBouncer). `io_timeout`: seconds a call may wait on its connection (None: no limit);
    past it the connection is taken for dead (a half-open network, a server that stopped answering)
    and severed: the call raises psycopg.OperationalError, or is retried on a new connection when it
    is safe to repeat. Set it above your slowest statement. `app`: a pgq.App whose registered tasks
    give `enqueue(kind, ...)` their queue, priority and max_attempts for the options left out (the
    App's own queues have it). Use as a context manager or call `close()`.
    """

    def __init__(
        self,
        dsn_or_pool: str | ConnectionPool[Any],
        *,
        min_size: int = 1,
        max_size: int = 10,
        timeout: float = 30.0,
        keep_connection: bool | None = None,
        pgbouncer: bool = False,
        listen_dsn: str | None = None,
        io_timeout: float | None = None,
        app: TaskRegistry | None = None,
    ) -> None:
        self._app = app
        # pgq.otel.instrument(app or queue) sets it: every enqueue opens a producer span and stores its
        # trace context with the jobs. None (the default) costs one attribute read per enqueue.
        self._otel: EnqueueTracer | None = getattr(app, "_otel", None)
        self._io_timeout = None if io_timeout is None else positive_seconds("io_timeout", io_timeout)
        if isinstance(dsn_or_pool, ConnectionPool):
            if pgbouncer:
                check_pgbouncer_pool(dsn_or_pool)
            self._pool: ConnectionPool[Any] = dsn_or_pool
            self._owns_pool = False
        else:
            self._pool = ConnectionPool(
                dsn_or_pool, min_size=min_size, max_size=max_size, timeout=timeout,
                kwargs=pool_kwargs(pgbouncer), name="pgq", configure=_ops.configure_connection,
                open=True,
            )
            self._owns_pool = True
        self._keeps_spare = _keeps_connection(self._pool, self._owns_pool, keep_connection)
        self._spare: psycopg.Connection[Any] | None = None  # see SPARE_MAX_AGE
        self._spare_cursor: psycopg.Cursor[Any] | None = None  # a cursor of _spare, or None
        self._spare_since = 0.0
        self._spare_lock = SpareLock()  # who uses the kept connection now; others use the pool
        # The LISTEN side of wait(), started by the first wait (None: it polls, behind PgBouncer).
        self._waiters = _waiters(self._pool, pgbouncer, listen_dsn)

    @property
    def pool(self) -> ConnectionPool[Any]:
        """The connection pool in use."""
        return self._pool

    def close(self) -> None:
        """Give the kept connection back to the pool, and close the pool if this queue created it.
        Idempotent. A queue on a pool of your own stays usable after it (every call then takes a
        connection from the pool)."""
        # A call running on the kept connection gives it back itself when it ends (a sync queue
        # waits for it here instead).
        idle = self._spare_lock.acquire()
        spare, self._spare, self._spare_cursor = self._spare, None, None
        self._keeps_spare = False
        if idle:
            self._spare_lock.release()
            if spare is not None:
                self._pool.putconn(spare)
        if self._waiters is not None:
            self._waiters.close()
        if self._owns_pool:
            self._pool.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _run(self, op: _ops.Operation[T], conn: psycopg.Connection[Any] | None = None) -> T:
        if conn is not None:
            with _ops.Watchdog(conn, self._io_timeout):
                return _ops.run_sync(conn, op, own_transaction=True)
        try:  # the happy path pays for no retry machinery
            return self._run_pooled(op)
        except psycopg.OperationalError as exc:
            if not op.retry_safe or not connection_failure(exc):
                raise
        import tenacity

        for attempt in tenacity.Retrying(**_retry_args()):
            with attempt:
                return self._run_pooled(op)
        raise AssertionError("unreachable")  # pragma: no cover

    def _run_pooled(self, op: _ops.Operation[T]) -> T:
        if self._keeps_spare and not self._pool.closed and self._spare_lock.acquire(blocking=False):
            try:
                return self._run_spare(op)
            finally:
                self._spare_lock.release()
        # getconn/putconn rather than pool.connection(): its `with conn` block costs a commit call and
        # a context manager per statement (about 40 us). A connection of a caller's pool may not be in
        # autocommit: end its transaction here, as that block would.
        conn = self._pool.getconn()
        try:
            with _ops.Watchdog(conn, self._io_timeout):
                result = _ops.run_sync(conn, op, own_transaction=True)
            if not conn.autocommit:
                conn.commit()
            return result
        except BaseException:
            if not conn.autocommit and not conn.broken:
                with contextlib.suppress(psycopg.Error):
                    conn.rollback()
            raise
        finally:
            self._pool.putconn(conn)

    def _run_spare(self, op: _ops.Operation[T]) -> T:
        # Holding _spare_lock. The owned pool's connections are in autocommit: nothing to commit. A
        # close() meanwhile took the connection from _spare: then it goes back to the pool here.
        conn = self._spare
        cursor = self._spare_cursor
        try:
            if conn is None:
                conn = self._pool.getconn()
                self._spare, self._spare_since = conn, time.monotonic()
            if cursor is None:
                cursor = self._spare_cursor = conn.cursor()
            with _ops.Watchdog(conn, self._io_timeout):
                return _ops.run_sync(conn, op, own_transaction=True, cursor=cursor)
        finally:
            if conn is not None and (conn is not self._spare or _spare_done(conn, self._spare_since)):
                if conn is self._spare:
                    self._spare = self._spare_cursor = None
                if cursor is not None:
                    cursor.close()
                self._pool.putconn(conn)
            elif cursor is not None and not _ops.keeps_cursor(cursor):
                self._spare_cursor = None
                cursor.close()

    def enqueue(
        self,
        kind: str,
        payload: JSON = None,
        *,
        queue: str | None = None,
        priority: int | None = None,
        run_at: dt.datetime | None = None,
        delay: dt.timedelta | float | None = None,
        dedupe_key: str | None = None,
        watermark: int | None = None,
        max_attempts: int | None = None,
        depends_on: Iterable[int] | None = None,
        on_parent_failure: str = "cancel",
        group_key: str | None = None,
        sequence_key: str | None = None,
        sequence_on_failure: str | None = None,
        unique_for: dt.timedelta | float | None = None,
        on_conflict: str | None = None,
        debounce: dt.timedelta | float | None = None,
        conn: psycopg.Connection[Any] | None = None,
    ) -> int:
        """Enqueue one job and return its id; see `enqueue_many` for the rules.

        `queue`, `priority`, `max_attempts` left out (None): those of the task registered under
        `kind` in the queue's `app`, if it was given one and has that task; otherwise "default", 0
        and the database default (25). `group_key`: the job's group (per-group limits and fair
        claiming, see `set_group_limits`); left out, the one the task's `group_by` field of `payload`
        gives, if any.

        `depends_on`: ids of jobs this one waits for (status waiting); it becomes ready when all of
        them succeeded and is cancelled when one fails or is cancelled, unless `on_parent_failure` is
        "run": then it runs once all of them finished, whatever the outcome (a batch callback).
        `sequence_key`: the job's sequence: jobs with the same key in a queue run one at a time, in
        enqueue order (the job waits until the key's previous job finished); `sequence_on_failure`:
        "hold" (this job failing for good holds the rest of its sequence until it is retried or
        cancelled) or "continue". Left out, the task's `sequence_by` field of `payload` and its
        `sequence_on_failure` ("hold" without a task).
        Uniqueness variants of `dedupe_key` (not with watermark, depends_on or sequence_key):
        `unique_for` (a positive duration): the key also dedupes against its job that finished less
        than that long ago (its id is returned); `on_conflict`: "ignore" (default) or "replace": a
        job of the key not started yet takes this payload, priority and run_at and its id is
        returned; behind a running job of the key a new job is added that waits for it (never
        touching the running one); `debounce` (a positive duration): "replace", with run_at pushed
        to now + debounce (database clock), so a burst becomes one run `debounce` after its last
        enqueue. Concurrent producers of one key are serialized: the last to commit wins.
        Raises InvalidJob (nothing written) for bad input, a parent id that is no job included. With
        `conn`, the job is written in the caller's transaction: it exists if and only if that
        transaction commits.
        """
        queue, priority, max_attempts, group_key = job_options(self._app, kind, queue, priority, max_attempts,
                                                               payload, group_key)
        spec = JobSpec(kind, payload, queue=queue, priority=priority, run_at=run_at, delay=delay,
                       dedupe_key=dedupe_key, watermark=watermark, max_attempts=max_attempts,
                       depends_on=depends_on, on_parent_failure=on_parent_failure, group_key=group_key,
                       **sequence_options(self._app, kind, payload, sequence_key, sequence_on_failure),
                       unique_for=unique_for, on_conflict=on_conflict, debounce=debounce)
        return (self._enqueue([spec], conn))[0]

    def enqueue_many(
        self, specs: Iterable[SpecLike], *, conn: psycopg.Connection[Any] | None = None
    ) -> builtins.list[int]:
        """Enqueue a batch in one statement; returns one id per spec, in order.

        A spec is a JobSpec or a mapping of its fields. All specs are validated before anything is
        sent (InvalidJob). Dedupe: a `dedupe_key` that an active (queued or running) job of the
        same queue holds returns that job's id and creates nothing, raising its input watermark to
        `watermark` if higher; a watermark at or below the one a successful run already processed
        returns that run's job id. Idle workers of the queues are notified once per queue.
        Dependencies (`depends_on`, `on_parent_failure`): see `enqueue`; a batch with dependencies is
        one transaction, and none of its jobs is written when one names a parent that is no job.
        A spec's options are its own, whatever the queue's `app`: `task.spec(**kwargs)` builds one
        with a task's.
        """
        return self._enqueue(_specs(specs), conn)

    def _enqueue(self, specs: builtins.list[JobSpec],
                       conn: psycopg.Connection[Any] | None) -> builtins.list[int]:
        try:
            if self._otel is None:
                return self._run(_ops.enqueue(specs), conn)
            return self._enqueue_traced(self._otel, specs, conn)
        except psycopg.errors.ForeignKeyViolation as exc:  # pgq.enqueue_after: no such parent
            raise InvalidJob(exc.diag.message_primary or str(exc)) from None

    def _enqueue_traced(self, tracer: EnqueueTracer, specs: builtins.list[JobSpec],
                              conn: psycopg.Connection[Any] | None) -> builtins.list[int]:
        span = tracer.enqueue_started(specs)
        try:
            ids = self._run(_ops.enqueue_traced(specs, span.contexts), conn)
        except BaseException as exc:
            span.end(None, exc)
            raise
        span.end(ids, None)
        return ids

    def claim(
        self,
        *,
        worker: str,
        queues: Sequence[str] | None = None,
        kinds: Sequence[str] | None = None,
        limit: int = 1,
        lease: dt.timedelta | float = DEFAULT_LEASE,
    ) -> builtins.list[Claim]:
        """Start an attempt on up to `limit` ready jobs (all queues when `queues` is None).

        Jobs run in priority, run_at, id order; rows other claimers hold are skipped
        (FOR UPDATE SKIP LOCKED), and concurrency limits are exact. Each claim holds a fresh lease
        token valid for `lease`. Not retried on connection errors (claims a lost reply hid are
        rescued when their lease expires).
        """
        return self._run(_ops.claim(worker=worker, queues=queues, kinds=kinds, limit=limit, lease=lease))

    def complete(self, claim: Claim, result: JSON = None, watermark: int | None = None) -> JobStatus:
        """Finish an attempt successfully, storing `result` (JSON).

        Returns SUCCEEDED, or QUEUED when a higher watermark arrived while the job ran (a dirty
        re-run). `watermark`: the input watermark processed (default: the job's when claimed).
        Raises LeaseLost, changing nothing, if the attempt no longer holds the job.
        """
        return (self._run(_ops.complete([(claim, result, watermark)], raise_lost=True)))[claim.id]

    def complete_many(self, items: Iterable[tuple[Claim, JSON]]) -> dict[int, JobStatus]:
        """Complete many attempts in one statement: `(claim, result)` pairs.

        Returns {job id: new status} for the attempts that still held their lease; ids missing
        from it lost their lease and were left unchanged (no exception).
        """
        return self._run(_ops.complete([(c, r, None) for c, r in items], raise_lost=False))

    def fail(self, claim: Claim, error: str, retry_in: dt.timedelta | float | None = None,
                   *, final: bool = False) -> Job:
        """Record a failed attempt and return the job as updated.

        With attempts left (and not `final`) the job is queued again after `retry_in`, or after an
        exponential backoff with jitter (never under 1 s); otherwise it is failed and its dedupe
        key freed. Raises LeaseLost, changing nothing, if the attempt no longer holds the job.
        """
        retry_s = None if retry_in is None else _non_negative("retry_in", retry_in)
        return (self._run(_ops.fail([(claim, error, retry_s, final)], raise_lost=True)))[claim.id]

    def fail_many(self, items: Iterable[tuple[Claim, str]]) -> dict[int, Job]:
        """Fail many attempts in one statement with the default backoff: `(claim, error)` pairs.

        Returns the updated jobs of the attempts that still held their lease.
        """
        return self._run(_ops.fail([(c, e, None, False) for c, e in items], raise_lost=False))

    def heartbeat(self, claims: Iterable[Claim], lease: dt.timedelta | float | None = None) -> None:
        """Renew the leases of `claims` in one statement, by `lease` (default: each claim's own).

        Raises LeaseLost naming the jobs whose lease was lost, after renewing all the others.
        """
        items = [(c, _lease_s(c, lease)) for c in claims]
        self._run(_ops.heartbeat(items, raise_lost=True))

    def snooze(self, claim: Claim, delay: dt.timedelta | float) -> Job:
        """Requeue a running job `delay` from now without spending an attempt; returns the job.

        Raises LeaseLost, changing nothing, if the attempt no longer holds the job.
        """
        delay_s = _non_negative("delay", delay)
        return (self._run(_ops.snooze([(claim, delay_s)], raise_lost=True)))[claim.id]

    def release(self, claims: Iterable[Claim]) -> builtins.list[int]:
        """Hand running attempts straight back to the queue, due now, without spending an attempt
        (a worker shutting down). Returns the ids released; attempts that lost their lease are
        skipped."""
        released = self._run(_ops.snooze([(c, 0.0) for c in claims], raise_lost=False))
        return builtins.list(released)

    def rescue_expired(self) -> builtins.list[int]:
        """Rescue all attempts whose lease expired; returns their job ids.

        Each expired attempt counts as failed: jobs with attempts left are queued again at once,
        the others failed. Rows locked by other transactions are skipped, never waited for.
        """
        return self._run(_ops.rescue_expired())

    def cancel(self, job_id: int, *, actor: str | None = None) -> Job:
        """Cancel a waiting, queued or running job; returns it (status `cancelled`, never retried).
        Raises NotFound, or InvalidState when the job already finished. A running job's worker is
        told in the same transaction (NOTIFY on channel pgq_cancel; without LISTEN, its next lease
        check) and stops the handler: an async handler gets CancelledError, a sync one sees
        `pgq.cancel_requested()` turn True. Whatever the handler returns then is discarded. Jobs
        that depend on it and need it to succeed are cancelled with it (see `enqueue`).
        Recorded in pgq.job_audit with `actor`, who asked as you name them (unverified; None: not
        named), and the database role (session_user), which the caller cannot choose.
        """
        return self._run(_ops.cancel(job_id, actor))

    def wait(self, job_id: int, timeout: dt.timedelta | float | None = None) -> Job:
        """Block until job `job_id` is succeeded, failed or cancelled, and return it (with its
        `result` or `last_error`). Raises the built-in TimeoutError when `timeout` seconds (None:
        no limit) pass first, NotFound for an unknown id.

        Woken by the database, not by polling: the job is marked awaited, and finishing it
        notifies channel pgq_finished, which one LISTEN connection per client (opened on the first
        wait, shared by all) receives. Behind PgBouncer in transaction mode, pass `listen_dsn` (a
        direct connection) to the constructor; without it, wait reads the job every 0.5 s."""
        deadline = _wait_deadline(timeout)
        waiters = self._waiters
        if waiters is not None:
            waiters.start()
        woken = Wakeup()
        if waiters is not None:
            waiters.add(job_id, woken.set)
        try:
            while True:
                if waiters is None or waiters.listening:
                    job = self._run(_ops.wait_mark(job_id))
                    if job.status in FINISHED:
                        return job
                woken.wait(_wait_left(deadline, job_id, waiters is None))
                woken.clear()
        finally:
            if waiters is not None:
                waiters.remove(job_id, woken.set)

    def retry(self, job_id: int, *, actor: str | None = None) -> Job:
        """Queue a failed or cancelled job again with fresh attempts; returns it. A job with parents
        (`depends_on`) is `waiting` instead while some of them have not finished, and runs once they
        have (it is cancelled if one it needs fails); finished parents count as done, whatever their
        outcome. Raises NotFound, or InvalidState (not failed/cancelled, or its dedupe key is held by
        another active job). Recorded in pgq.job_audit with `actor`, who asked as you name them (unverified; None: not
        named), and the database role (session_user), which the caller cannot choose."""
        return self._run(_ops.retry(job_id, actor))

    def get(self, job_id: int) -> Job | None:
        """Return the job with this id, or None. Raises pgq.bounds.UndecodableJob (a PgqError) for a
        job whose stored payload, result or progress cannot be decoded (written before revision 0019
        bounded JSON; docs/concepts.md, "Bounded JSON")."""
        return self._run(_ops.get(job_id))

    def purge(self, older_than: dt.timedelta | float) -> int:
        """Delete jobs that finished more than `older_than` ago, in bounded batches (each its own
        short transaction) until none is left; returns how many were deleted."""
        return self._run(_ops.purge(older_than))

    def set_concurrency_limit(self, kind: str, limit: int | None, *, actor: str | None = None) -> None:
        """Allow at most `limit` running jobs of `kind` across all workers (None removes the limit).
        The limit applies to claims that start after this returns. A change is recorded in
        pgq.control_audit with `actor` (unverified; None: not named) and the database role, when the
        role may write it (pgq's admin; not a worker setting its tasks' limits at start-up)."""
        self._run(_ops.set_concurrency_limit(kind, limit, actor))

    def set_rate_limit(self, kind: str, rate: str | tuple[int, float] | None, *,
                             actor: str | None = None) -> None:
        """Let at most so many jobs of `kind` start in any window of that length, across all
        workers: "100/s", "5/min", "1000/h", "10/2s", or (max_starts, seconds); None removes the
        limit. Exact (a sliding window on the database clock, counted by the claim under a lock);
        jobs over the limit stay queued until the window has room. Raises InvalidJob for a bad rate.
        A change is recorded as `set_concurrency_limit` records it."""
        self._run(_ops.set_rate_limit(kind, rate, actor))

    def set_group_limits(self, kind: str, *, concurrency: int | None = None,
                               rate: str | tuple[int, float] | None = None,
                               actor: str | None = None) -> None:
        """Set the per-group limits of `kind`: at most `concurrency` running jobs per group key, and
        at most `rate` starts per group key ("10/s", "5/min", (max_starts, seconds)), across all
        workers; None: no such limit (both None removes the kind's group limits). Exact, enforced by
        the claim; jobs without a group key are not limited by them. Applies to claims that start
        after this returns. Raises InvalidJob for bad values. A change is recorded as
        `set_concurrency_limit` records it."""
        self._run(_ops.set_group_limits(kind, concurrency, rate, actor))

    def is_dirty(self, queue: str, key: str) -> bool:
        """True when `key` has input no successful run has processed yet (an active job)."""
        return self._run(_ops.is_dirty(queue, key))

    def stats(self) -> builtins.list[dict[str, Any]]:
        """Rows of the pgq.queue_stats view (one dict per queue, with `paused` and `paused_at`), each
        with `unknown_kinds`: {kind: queued jobs that no live worker of the queue knows}."""
        return self._run(_ops.queue_stats())

    def pause(self, queue: str, *, actor: str | None = None) -> bool:
        """Pause `queue`: once this returns, no worker anywhere claims its jobs (no restart needed);
        jobs already running finish, and enqueueing still works. Returns True if the queue was
        running, False if it was paused already. Needs an administrator's rights; raises
        InvalidJob for an empty name and a psycopg error when a hung claim holds the lock over 5 s
        (then nothing changed). A pause that changed the state records `actor` (unverified; None:
        the database role) as who paused it, with the role, in pgq.paused_queues and
        pgq.control_audit (explain shows them)."""
        return self._run(_ops.pause(queue, actor))

    def resume(self, queue: str, *, actor: str | None = None) -> bool:
        """Resume a paused `queue` and wake idle workers; True if it was paused, False if not. A
        resume that changed the state is recorded in pgq.control_audit with `actor` (unverified;
        None: not named) and the database role."""
        return self._run(_ops.resume(queue, actor))

    def list(
        self,
        status: str | JobStatus | None = None,
        queue: str | None = None,
        kind: str | None = None,
        limit: int = 100,
        *,
        before_id: int | None = None,
    ) -> builtins.list[Job]:
        """Jobs matching every given filter, newest first, at most `limit`; `before_id` pages.
        Raises InvalidJob for an unknown status."""
        return self._run(
            _ops.list_jobs(status=status, queue=queue, kind=kind, limit=limit, before_id=before_id)
        )

    def cancel_where(self, *, dry_run: bool = False, batch: int = _ops.BULK_BATCH, actor: str | None = None,
                           progress: Callable[[BulkResult], None] | None = None,
                           **filters: Unpack[JobFilters]) -> BulkResult:
        """Cancel every waiting, queued or running job matching all the given filters, as `cancel`
        does one: dependents follow, running handlers are interrupted. Filters and options: see
        `retry_where`."""
        where = _ops.given_filter("cancel", filters, dry_run=dry_run)
        return self._run(_ops.bulk("cancel", where, batch=batch, dry_run=dry_run, actor=actor, progress=progress))

    def retry_where(self, *, dry_run: bool = False, batch: int = _ops.BULK_BATCH, actor: str | None = None,
                          progress: Callable[[BulkResult], None] | None = None,
                          **filters: Unpack[JobFilters]) -> BulkResult:
        """Retry every failed or cancelled job matching all the given filters, as `retry` does one
        (a job whose dedupe key an active job holds is skipped).

        Filters (JobFilters; absent: any, but give one): `queue`, `kind`; `status`, one or several of
        the statuses the action applies to (the default: all of them); `error`, a case-insensitive
        substring of the last error; `payload`, a JSON value the payload contains (`@>`);
        `created_after`, `created_before`, `finished_after`, `finished_before`: ranges (after <= t <
        before, timezone-aware). Works in batches of `batch` jobs, each its own short transaction (no
        transaction locks more than one batch), lowest ids first, each job at most once per call; a call
        cut short leaves its batches done and can be run again. Each batch is recorded in pgq.job_audit
        (the jobs, the filters, `actor` and the database role). `dry_run`: only count the matching jobs.
        `progress(result so far)` after each batch. Returns the counts (BulkResult). Raises InvalidJob
        for a bad filter, or for none at all unless `dry_run` (to act on every job, say so with
        `status`), before anything is sent; needs an administrator's rights."""
        where = _ops.given_filter("retry", filters, dry_run=dry_run)
        return self._run(_ops.bulk("retry", where, batch=batch, dry_run=dry_run, actor=actor, progress=progress))

    def delete_where(self, *, dry_run: bool = False, batch: int = _ops.BULK_BATCH, actor: str | None = None,
                           progress: Callable[[BulkResult], None] | None = None,
                           **filters: Unpack[JobFilters]) -> BulkResult:
        """Delete every finished (succeeded, failed, cancelled) job matching all the given filters,
        with its dependency rows, as a purge does; rows another transaction holds are skipped.
        Filters and options: see `retry_where`."""
        where = _ops.given_filter("delete", filters, dry_run=dry_run)
        return self._run(_ops.bulk("delete", where, batch=batch, dry_run=dry_run, actor=actor, progress=progress))

    def workers(self) -> builtins.list[WorkerInfo]:
        """The worker registry (pgq.workers): every registered worker, live ones first, each with its
        queues (None: all), the kinds it knows, its slots, state (running / draining), when it was
        last seen, whether it is live, and the jobs it runs now. A worker killed without a clean
        stop stays listed, not live, until the rescue prunes it (three leases)."""
        return self._run(_ops.workers())

    def explain(self, job_id: int) -> Explanation:
        """Why job `job_id` is not running now, read in one snapshot by the SQL function
        pgq.explain (which a DBA can call in psql for the same answer): each reason with its facts
        (scheduled, held by the previous job of its sequence, waiting for parents, queue paused, its
        kind's concurrency limit or rate window full, or its group's, no live worker serving its
        queue or knowing its kind; the codes are pgq.insight.REASONS), or "ready" with its position
        in its queue, or how it finished, or that it runs. Raises NotFound for an unknown id,
        InvalidJob for an id that is not an int."""
        return self._run(_ops.explain(job_id))

    def dependencies(self, job_id: int, *, limit: int = _ops.DEPENDENCIES_LIMIT) -> Dependencies:
        """Job `job_id`'s parents (the jobs it depends on) and children (the jobs that depend on it),
        read in one statement: for each the other job's id, kind and status, whether the child needs
        the parent to succeed, and the parent's recorded outcome. At most `limit` parents and `limit`
        children (1..100000), lowest ids first; `parent_count` and `child_count` count them all, and
        `pending_parents` says how many parents a waiting job still waits for. A job without
        dependencies has none of either. Raises NotFound for an unknown id (where `get` returns
        None), InvalidJob for a bad id or limit."""
        return self._run(_ops.dependencies(job_id, limit=limit))
