"""`Queue` and `AsyncQueue`: the producer and worker API of pgq.

Every method builds an operation from pgq._ops (validating its input before anything is sent) and
hands it to a driver; the two classes differ only in how they wait. Connections come from a
psycopg pool: one the queue creates from a DSN (and closes), or one the caller passes (and keeps).
Methods with a `conn=` parameter run on the caller's connection instead, inside the caller's
transaction, and never commit it.
"""

from __future__ import annotations

import asyncio
import builtins
import contextlib
import datetime as dt
import threading
import time
from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Self, TypeVar

import psycopg
from psycopg_pool import AsyncConnectionPool, ConnectionPool

from . import _ops
from .errors import InvalidJob, PgqError
from .models import FINISHED, JSON, Claim, Job, JobSpec, JobStatus, delay_seconds, positive_seconds

if TYPE_CHECKING:
    from .waiting import Waiters

T = TypeVar("T")

DEFAULT_LEASE = dt.timedelta(seconds=60)
SpecLike = JobSpec | Mapping[str, Any]


def _specs(specs: Iterable[SpecLike]) -> list[JobSpec]:
    out: list[JobSpec] = []
    for s in specs:
        if isinstance(s, JobSpec):
            out.append(s)
        elif isinstance(s, Mapping):
            try:
                out.append(JobSpec(**s))
            except TypeError as exc:
                raise InvalidJob(f"bad job spec {dict(s)!r}: {exc}") from None
        else:
            raise InvalidJob(f"a job spec must be a JobSpec or a mapping, got {type(s).__name__}")
    return out


def _lease_s(claim: Claim, lease: dt.timedelta | float | None) -> float:
    return positive_seconds("lease", claim.lease if lease is None else lease)


def _retry_args() -> dict[str, Any]:
    """tenacity's settings for retrying an operation after a connection error. Only operations
    marked retry_safe get there, after a first failure: a connection error after a statement reached
    the server leaves its outcome unknown, so the others raise at once. tenacity is imported then,
    not with pgq (5 ms off `import pgq`)."""
    import tenacity

    return {
        "retry": tenacity.retry_if_exception(_connection_failure),
        "stop": tenacity.stop_after_attempt(4),
        "wait": tenacity.wait_random_exponential(multiplier=0.1, max=2.0),
        "reraise": True,
    }


def _connection_failure(exc: BaseException) -> bool:
    """Whether `exc` may be a lost connection, worth retrying: an OperationalError other than a lock
    or statement timeout (those reached the server, and retrying would only wait again)."""
    return isinstance(exc, psycopg.OperationalError) and not isinstance(
        exc, (psycopg.errors.LockNotAvailable, psycopg.errors.QueryCanceled))


WAIT_POLL_S = 0.5
"""How often `wait` reads the job when it cannot LISTEN (PgBouncer in transaction mode, no listen_dsn)."""


def _wait_deadline(timeout: dt.timedelta | float | None) -> float | None:
    """The monotonic deadline of a wait of `timeout` (None: no deadline); InvalidJob if negative."""
    if timeout is None:
        return None
    seconds = timeout.total_seconds() if isinstance(timeout, dt.timedelta) else timeout
    if isinstance(seconds, bool) or not isinstance(seconds, int | float) or not seconds >= 0:
        raise InvalidJob(f"timeout must be seconds >= 0 (or a timedelta), got {timeout!r}")
    return time.monotonic() + seconds


def _wait_left(deadline: float | None, job_id: int, polling: bool) -> float | None:
    """Seconds to sleep before the next look at the job; raises TimeoutError past the deadline."""
    if deadline is None:
        return WAIT_POLL_S if polling else None
    left = deadline - time.monotonic()
    if left <= 0:
        raise TimeoutError(f"job {job_id} did not finish in time")
    return min(left, WAIT_POLL_S) if polling else left


def _waiters(pool: ConnectionPool[Any] | AsyncConnectionPool[Any], pgbouncer: bool,
             listen_dsn: str | None) -> Waiters | None:
    """The LISTEN side of `wait` for a client on `pool` (None: it polls: behind PgBouncer without
    `listen_dsn`, or on a pool whose connection string or arguments are callables)."""
    from .waiting import Waiters  # the listener and tenacity load with the first wait, not with pgq

    if listen_dsn is not None:
        return Waiters(listen_dsn)
    conninfo, kwargs = pool.conninfo, pool.kwargs
    if pgbouncer or not isinstance(conninfo, str) or not isinstance(kwargs, dict):
        return None  # no direct connection to listen on, or one only the pool knows how to make
    return Waiters(conninfo, {k: v for k, v in kwargs.items() if k not in ("prepare_threshold", "autocommit")})


# autocommit: a single-statement operation is its own transaction (one round trip); the operations
# that need several statements open a transaction explicitly.
_POOL_KWARGS: dict[str, Any] = {"autocommit": True}

# Behind PgBouncer in transaction pooling mode, consecutive transactions of one client connection may
# run on different server connections. psycopg prepares a statement on the server after it ran
# `prepare_threshold` (5) times on a connection and then only sends its name: on another server
# connection that name is unknown ("prepared statement "_pg3_0" does not exist"), taken by another
# client's statement ("... already exists"), or worse, bound to a different query. PgBouncer before
# 1.21 (Debian 12 ships 1.18) cannot track protocol-level prepared statements at all, so pgq sends
# every statement unprepared (one extra parse per statement on the server: microseconds).
PGBOUNCER_KWARGS: dict[str, Any] = {"prepare_threshold": None}


# A queue that owns its pool (of two or more connections) keeps one connection out of it between
# calls and runs every call it can on that one: getconn/putconn cost about 40 us of a 500 us enqueue.
# A call finding it busy takes another from the pool as usual, so the pool's other connections serve
# concurrent callers. It goes back to the pool when its state is anything but idle (broken, a query
# cut off by a cancellation), when the queue closes, and every SPARE_MAX_AGE seconds, so that the
# pool's health checks and connection lifetime apply to it too.
#
# The kept connection keeps its cursor as well (while it holds a small result, see
# _ops.keeps_cursor): a new cursor starts without the loaders and dumpers the last one had found for
# the same columns and parameters, and building them again is most of the client's work in a short
# call that follows an idle spell (an idle worker's claim: 0.14 ms of its wake-up, see bench/README.md).
SPARE_MAX_AGE = 60.0
_IDLE = psycopg.pq.TransactionStatus.IDLE


def _spare_done(conn: psycopg.Connection[Any] | psycopg.AsyncConnection[Any], since: float) -> bool:
    """Whether the kept connection, kept since `since` (monotonic), goes back to the pool now."""
    return conn.broken or conn.info.transaction_status != _IDLE or time.monotonic() - since > SPARE_MAX_AGE


def pool_kwargs(pgbouncer: bool) -> dict[str, Any]:
    """psycopg connection kwargs of the pools pgq creates: autocommit, and with `pgbouncer` (the DSN
    is a PgBouncer in transaction pooling mode) no server-side prepared statements."""
    return {**_POOL_KWARGS, **PGBOUNCER_KWARGS} if pgbouncer else dict(_POOL_KWARGS)


def _keeps_connection(pool: ConnectionPool[Any] | AsyncConnectionPool[Any], owned: bool, wanted: bool | None) -> bool:
    """Whether a queue keeps a connection of `pool` between calls (see SPARE_MAX_AGE): as `wanted`, by
    default when the queue created the pool, and never with a pool of one. Raises PgqError when asked
    to keep one of a caller's pool whose connections are not in autocommit: a kept connection runs
    each call as its own transaction and commits nothing itself."""
    if wanted is False or (wanted is None and not owned) or pool.max_size < 2:
        return False
    if not owned and not (isinstance(pool.kwargs, dict) and pool.kwargs.get("autocommit") is True):
        raise PgqError("keep_connection=True with a pool of your own: create the pool with "
                       "kwargs={'autocommit': True, ...}")
    return True


def check_pgbouncer_pool(pool: ConnectionPool[Any] | AsyncConnectionPool[Any]) -> None:
    """With pgbouncer=True and a pool the caller owns, make sure its connections prepare nothing.

    Raises PgqError unless the pool was created with ``kwargs={"prepare_threshold": None, ...}``
    (pgq cannot change the connections of a pool it does not own)."""
    kwargs = pool.kwargs if isinstance(pool.kwargs, dict) else {}
    if "prepare_threshold" not in kwargs or kwargs["prepare_threshold"] is not None:
        raise PgqError(
            "pgbouncer=True with a pool of your own: create the pool with "
            "kwargs={'prepare_threshold': None, ...} so that its connections never prepare statements "
            "(PgBouncer in transaction mode breaks them)"
        )


class Queue:
    """Synchronous pgq client, usable as soon as it is constructed; thread-safe.

    `dsn_or_pool`: a libpq DSN (the queue opens a pool of `min_size`..`max_size` connections and
    closes it in `close()`), or a `psycopg_pool.ConnectionPool` owned by the caller (left open; every
    call takes a connection from it and gives it back).
    `keep_connection`: keep one connection of the pool out of it between calls, for the next call
    (see SPARE_MAX_AGE: it goes back at least every minute, and calls that find it busy use the
    pool). Default: when the queue created its pool. It needs a pool of two or more connections;
    with a pool of your own (whose connections must be in autocommit: PgqError otherwise), `close()`
    gives the connection back and leaves the pool open.
    `pgbouncer`: the DSN is a PgBouncer in transaction pooling mode, so the pool's connections never
    prepare statements; with a pool of your own, PgqError unless it was created with
    `kwargs={"prepare_threshold": None}`. Use as a context manager or call `close()`.
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
    ) -> None:
        if isinstance(dsn_or_pool, ConnectionPool):
            if pgbouncer:
                check_pgbouncer_pool(dsn_or_pool)
            self._pool: ConnectionPool[Any] = dsn_or_pool
            self._owns_pool = False
        else:
            self._pool = ConnectionPool(
                dsn_or_pool, min_size=min_size, max_size=max_size, timeout=timeout,
                kwargs=pool_kwargs(pgbouncer), open=True, name="pgq", configure=_ops.configure_connection,
            )
            self._owns_pool = True
        self._keeps_spare = _keeps_connection(self._pool, self._owns_pool, keep_connection)
        self._spare: psycopg.Connection[Any] | None = None  # see SPARE_MAX_AGE
        self._spare_cursor: psycopg.Cursor[Any] | None = None  # a cursor of _spare, or None
        self._spare_since = 0.0
        self._spare_lock = threading.Lock()
        self._listen = (pgbouncer, listen_dsn)
        self._waiters: Waiters | None = None

    @property
    def pool(self) -> ConnectionPool[Any]:
        """The connection pool in use."""
        return self._pool

    def close(self) -> None:
        """Give the kept connection back to the pool, and close the pool if this queue created it.
        Idempotent. A queue on a pool of your own stays usable after it (every call then takes a
        connection from the pool)."""
        with self._spare_lock:  # waits for a call running on the kept connection
            spare, self._spare, self._spare_cursor = self._spare, None, None
            self._keeps_spare = False
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
            return _ops.run_sync(conn, op, own_transaction=True)
        try:  # the happy path pays for no retry machinery
            return self._run_pooled(op)
        except psycopg.OperationalError as exc:
            if not op.retry_safe or not _connection_failure(exc):
                raise
        import tenacity

        for attempt in tenacity.Retrying(**_retry_args()):
            with attempt:
                return self._run_pooled(op)
        raise AssertionError("unreachable")  # pragma: no cover

    def _run_pooled(self, op: _ops.Operation[T]) -> T:
        if self._keeps_spare and self._spare_lock.acquire(blocking=False):
            try:
                return self._run_spare(op)
            finally:
                self._spare_lock.release()
        # getconn/putconn rather than pool.connection(): its `with conn` block costs a commit call and
        # a context manager per statement. A connection of a caller's pool may not be in autocommit:
        # end its transaction here, as that block would.
        conn = self._pool.getconn()
        try:
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
        # Under _spare_lock. The owned pool's connections are in autocommit: nothing to commit.
        conn = self._spare
        if conn is None:
            conn = self._spare = self._pool.getconn()
            self._spare_since = time.monotonic()
        cursor = self._spare_cursor
        try:
            if cursor is None:
                cursor = self._spare_cursor = conn.cursor()
            return _ops.run_sync(conn, op, own_transaction=True, cursor=cursor)
        finally:
            if _spare_done(conn, self._spare_since):
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
        queue: str = "default",
        priority: int = 0,
        run_at: dt.datetime | None = None,
        delay: dt.timedelta | float | None = None,
        dedupe_key: str | None = None,
        watermark: int | None = None,
        max_attempts: int | None = None,
        conn: psycopg.Connection[Any] | None = None,
    ) -> int:
        """Enqueue one job and return its id; see `enqueue_many` for the rules.

        Raises InvalidJob (nothing written) for bad input. With `conn`, the job is written in the
        caller's transaction: it exists if and only if that transaction commits.
        """
        spec = JobSpec(kind, payload, queue=queue, priority=priority, run_at=run_at, delay=delay,
                       dedupe_key=dedupe_key, watermark=watermark, max_attempts=max_attempts)
        return self._run(_ops.enqueue([spec]), conn)[0]

    def enqueue_many(self, specs: Iterable[SpecLike], *, conn: psycopg.Connection[Any] | None = None) -> list[int]:
        """Enqueue a batch in one statement; returns one id per spec, in order.

        A spec is a JobSpec or a mapping of its fields. All specs are validated before anything is
        sent (InvalidJob). Dedupe: a `dedupe_key` that an active (queued or running) job of the
        same queue holds returns that job's id and creates nothing, raising its input watermark to
        `watermark` if higher; a watermark at or below the one a successful run already processed
        returns that run's job id. Idle workers of the queues are notified once per queue.
        """
        return self._run(_ops.enqueue(_specs(specs)), conn)

    def claim(
        self,
        *,
        worker: str,
        queues: Sequence[str] | None = None,
        kinds: Sequence[str] | None = None,
        limit: int = 1,
        lease: dt.timedelta | float = DEFAULT_LEASE,
    ) -> list[Claim]:
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
        return self._run(_ops.complete([(claim, result, watermark)], raise_lost=True))[claim.id]

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
        return self._run(_ops.fail([(claim, error, retry_s, final)], raise_lost=True))[claim.id]

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
        return self._run(_ops.snooze([(claim, delay_s)], raise_lost=True))[claim.id]

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

    def cancel(self, job_id: int) -> Job:
        """Cancel a queued or running job; returns it (status `cancelled`, never retried). Raises
        NotFound, or InvalidState when the job already finished. A running job's worker is told in
        the same transaction (NOTIFY on channel pgq_cancel; without LISTEN, its next lease check) and
        stops the handler: an async handler gets CancelledError, a sync one sees
        `pgq.cancel_requested()` turn True. Whatever the handler returns then is discarded.
        """
        return self._run(_ops.cancel(job_id))

    def wait(self, job_id: int, timeout: dt.timedelta | float | None = None) -> Job:
        """Block until job `job_id` is succeeded, failed or cancelled, and return it (with its
        `result` or `last_error`). Raises the built-in TimeoutError when `timeout` seconds (None:
        no limit) pass first, NotFound for an unknown id.

        Woken by the database, not by polling: the job is marked awaited, and finishing it
        notifies channel pgq_finished, which one LISTEN connection per client (opened on the first
        wait, shared by all) receives. Behind PgBouncer in transaction mode, pass `listen_dsn` (a
        direct connection) to the constructor; without it, wait reads the job every 0.5 s."""
        deadline = _wait_deadline(timeout)
        waiters = self._start_waiters()
        woken = threading.Event()
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

    def _start_waiters(self) -> Waiters | None:
        with self._spare_lock:
            if self._waiters is None:
                self._waiters = _waiters(self._pool, *self._listen)
        if self._waiters is not None:
            self._waiters.start()
        return self._waiters

    def retry(self, job_id: int) -> Job:
        """Queue a failed or cancelled job again with fresh attempts; returns it. Raises NotFound,
        or InvalidState (not failed/cancelled, or its dedupe key is held by another active job)."""
        return self._run(_ops.retry(job_id))

    def get(self, job_id: int) -> Job | None:
        """Return the job with this id, or None."""
        return self._run(_ops.get(job_id))

    def purge(self, older_than: dt.timedelta | float) -> int:
        """Delete jobs that finished more than `older_than` ago, in bounded batches (each its own
        short transaction) until none is left; returns how many were deleted."""
        return self._run(_ops.purge(older_than))

    def set_concurrency_limit(self, kind: str, limit: int | None) -> None:
        """Allow at most `limit` running jobs of `kind` across all workers (None removes the limit).
        The limit applies to claims that start after this returns."""
        self._run(_ops.set_concurrency_limit(kind, limit))

    def set_rate_limit(self, kind: str, rate: str | tuple[int, float] | None) -> None:
        """Let at most so many jobs of `kind` start in any window of that length, across all
        workers: "100/s", "5/min", "1000/h", "10/2s", or (max_starts, seconds); None removes the
        limit. Exact (a sliding window on the database clock, counted by the claim under a lock);
        jobs over the limit stay queued until the window has room. Raises InvalidJob for a bad rate."""
        self._run(_ops.set_rate_limit(kind, rate))

    def is_dirty(self, queue: str, key: str) -> bool:
        """True when `key` has input no successful run has processed yet (an active job)."""
        return self._run(_ops.is_dirty(queue, key))

    def stats(self) -> builtins.list[dict[str, Any]]:
        """Rows of the pgq.queue_stats view (one dict per queue, with `paused` and `paused_at`)."""
        return self._run(_ops.queue_stats())

    def pause(self, queue: str) -> bool:
        """Pause `queue`: once this returns, no worker anywhere claims its jobs (no restart needed);
        jobs already running finish, and enqueueing still works. Returns True if the queue was
        running, False if it was paused already. Needs an administrator's rights; raises
        InvalidJob for an empty name and a psycopg error when a hung claim holds the lock over 5 s
        (then nothing changed)."""
        return self._run(_ops.pause(queue))

    def resume(self, queue: str) -> bool:
        """Resume a paused `queue` and wake idle workers; True if it was paused, False if not."""
        return self._run(_ops.resume(queue))

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
        return self._run(_ops.list_jobs(status=status, queue=queue, kind=kind, limit=limit, before_id=before_id))


class AsyncQueue:
    """asyncio pgq client: the methods of `Queue`, as coroutines, with the same contracts.

    `dsn_or_pool`: a DSN (the queue creates an AsyncConnectionPool; `close()` closes it) or an
    AsyncConnectionPool owned by the caller. `keep_connection` and `pgbouncer` as in `Queue`. Open it
    with `await q.open()` or `async with`.
    """

    def __init__(
        self,
        dsn_or_pool: str | AsyncConnectionPool[Any],
        *,
        min_size: int = 1,
        max_size: int = 10,
        timeout: float = 30.0,
        keep_connection: bool | None = None,
        pgbouncer: bool = False,
        listen_dsn: str | None = None,
    ) -> None:
        if isinstance(dsn_or_pool, AsyncConnectionPool):
            if pgbouncer:
                check_pgbouncer_pool(dsn_or_pool)
            self._pool: AsyncConnectionPool[Any] = dsn_or_pool
            self._owns_pool = False
        else:
            self._pool = AsyncConnectionPool(
                dsn_or_pool, min_size=min_size, max_size=max_size, timeout=timeout,
                kwargs=pool_kwargs(pgbouncer), open=False, name="pgq",
                configure=_ops.configure_connection_async,
            )
            self._owns_pool = True
        self._keeps_spare = _keeps_connection(self._pool, self._owns_pool, keep_connection)
        self._spare: psycopg.AsyncConnection[Any] | None = None  # see SPARE_MAX_AGE
        self._spare_cursor: psycopg.AsyncCursor[Any] | None = None  # a cursor of _spare, or None
        self._spare_since = 0.0
        self._spare_busy = False
        self._listen = (pgbouncer, listen_dsn)
        self._waiters: Waiters | None = None

    @property
    def pool(self) -> AsyncConnectionPool[Any]:
        """The connection pool in use."""
        return self._pool

    async def open(self) -> None:
        """Open the pool if this queue created it (connections are made in the background)."""
        if self._owns_pool:
            await self._pool.open()

    async def close(self) -> None:
        """See `Queue.close`."""
        # A call still running on the kept connection returns it itself.
        spare, self._spare, self._spare_cursor = self._spare, None, None
        self._keeps_spare = False
        if spare is not None and not self._spare_busy:
            await self._pool.putconn(spare)
        if self._waiters is not None:
            await asyncio.to_thread(self._waiters.close)
        if self._owns_pool:
            await self._pool.close()

    async def __aenter__(self) -> Self:
        await self.open()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def _run(self, op: _ops.Operation[T], conn: psycopg.AsyncConnection[Any] | None = None) -> T:
        if conn is not None:
            return await _ops.run_async(conn, op, own_transaction=True)
        try:  # the happy path pays for no retry machinery
            return await self._run_pooled(op)
        except psycopg.OperationalError as exc:
            if not op.retry_safe or not _connection_failure(exc):
                raise
        import tenacity

        async for attempt in tenacity.AsyncRetrying(**_retry_args()):
            with attempt:
                return await self._run_pooled(op)
        raise AssertionError("unreachable")  # pragma: no cover

    async def _run_pooled(self, op: _ops.Operation[T]) -> T:
        if self._keeps_spare and not self._spare_busy and not self._pool.closed:
            return await self._run_spare(op)
        # As Queue._run_pooled: about 40 us less per statement than pool.connection().
        conn = await self._pool.getconn()
        try:
            result = await _ops.run_async(conn, op, own_transaction=True)
            if not conn.autocommit:
                await conn.commit()
            return result
        except BaseException:
            if not conn.autocommit and not conn.broken:
                with contextlib.suppress(psycopg.Error):
                    await conn.rollback()
            raise
        finally:
            await self._pool.putconn(conn)

    async def _run_spare(self, op: _ops.Operation[T]) -> T:
        # As Queue._run_spare; _spare_busy instead of a lock, on the event loop's thread.
        self._spare_busy = True
        conn = self._spare
        cursor = self._spare_cursor
        try:
            if conn is None:
                conn = await self._pool.getconn()
                self._spare, self._spare_since = conn, time.monotonic()
            if cursor is None:
                cursor = self._spare_cursor = conn.cursor()
            return await _ops.run_async(conn, op, own_transaction=True, cursor=cursor)
        finally:
            self._spare_busy = False
            if conn is not None and (conn is not self._spare or _spare_done(conn, self._spare_since)):
                if conn is self._spare:
                    self._spare = self._spare_cursor = None
                if cursor is not None:
                    await cursor.close()
                await self._pool.putconn(conn)
            elif cursor is not None and not _ops.keeps_cursor(cursor):
                self._spare_cursor = None
                await cursor.close()

    async def enqueue(
        self,
        kind: str,
        payload: JSON = None,
        *,
        queue: str = "default",
        priority: int = 0,
        run_at: dt.datetime | None = None,
        delay: dt.timedelta | float | None = None,
        dedupe_key: str | None = None,
        watermark: int | None = None,
        max_attempts: int | None = None,
        conn: psycopg.AsyncConnection[Any] | None = None,
    ) -> int:
        """See `Queue.enqueue`."""
        spec = JobSpec(kind, payload, queue=queue, priority=priority, run_at=run_at, delay=delay,
                       dedupe_key=dedupe_key, watermark=watermark, max_attempts=max_attempts)
        return (await self._run(_ops.enqueue([spec]), conn))[0]

    async def enqueue_many(
        self, specs: Iterable[SpecLike], *, conn: psycopg.AsyncConnection[Any] | None = None
    ) -> builtins.list[int]:
        """See `Queue.enqueue_many`."""
        return await self._run(_ops.enqueue(_specs(specs)), conn)

    async def claim(
        self,
        *,
        worker: str,
        queues: Sequence[str] | None = None,
        kinds: Sequence[str] | None = None,
        limit: int = 1,
        lease: dt.timedelta | float = DEFAULT_LEASE,
    ) -> builtins.list[Claim]:
        """See `Queue.claim`."""
        return await self._run(_ops.claim(worker=worker, queues=queues, kinds=kinds, limit=limit, lease=lease))

    async def complete(self, claim: Claim, result: JSON = None, watermark: int | None = None) -> JobStatus:
        """See `Queue.complete`."""
        return (await self._run(_ops.complete([(claim, result, watermark)], raise_lost=True)))[claim.id]

    async def complete_many(self, items: Iterable[tuple[Claim, JSON]]) -> dict[int, JobStatus]:
        """See `Queue.complete_many`."""
        return await self._run(_ops.complete([(c, r, None) for c, r in items], raise_lost=False))

    async def fail(self, claim: Claim, error: str, retry_in: dt.timedelta | float | None = None,
                   *, final: bool = False) -> Job:
        """See `Queue.fail`."""
        retry_s = None if retry_in is None else _non_negative("retry_in", retry_in)
        return (await self._run(_ops.fail([(claim, error, retry_s, final)], raise_lost=True)))[claim.id]

    async def fail_many(self, items: Iterable[tuple[Claim, str]]) -> dict[int, Job]:
        """See `Queue.fail_many`."""
        return await self._run(_ops.fail([(c, e, None, False) for c, e in items], raise_lost=False))

    async def heartbeat(self, claims: Iterable[Claim], lease: dt.timedelta | float | None = None) -> None:
        """See `Queue.heartbeat`."""
        items = [(c, _lease_s(c, lease)) for c in claims]
        await self._run(_ops.heartbeat(items, raise_lost=True))

    async def snooze(self, claim: Claim, delay: dt.timedelta | float) -> Job:
        """See `Queue.snooze`."""
        delay_s = _non_negative("delay", delay)
        return (await self._run(_ops.snooze([(claim, delay_s)], raise_lost=True)))[claim.id]

    async def release(self, claims: Iterable[Claim]) -> builtins.list[int]:
        """See `Queue.release`."""
        released = await self._run(_ops.snooze([(c, 0.0) for c in claims], raise_lost=False))
        return builtins.list(released)

    async def rescue_expired(self) -> builtins.list[int]:
        """See `Queue.rescue_expired`."""
        return await self._run(_ops.rescue_expired())

    async def cancel(self, job_id: int) -> Job:
        """See `Queue.cancel`."""
        return await self._run(_ops.cancel(job_id))

    async def wait(self, job_id: int, timeout: dt.timedelta | float | None = None) -> Job:
        """See `Queue.wait`."""
        deadline = _wait_deadline(timeout)
        if self._waiters is None:
            self._waiters = _waiters(self._pool, *self._listen)
        waiters = self._waiters
        if waiters is not None:
            await asyncio.to_thread(waiters.start)
        loop = asyncio.get_running_loop()
        woken = asyncio.Event()

        def wake() -> None:
            loop.call_soon_threadsafe(woken.set)

        if waiters is not None:
            waiters.add(job_id, wake)
        try:
            while True:
                if waiters is None or waiters.listening:
                    job = await self._run(_ops.wait_mark(job_id))
                    if job.status in FINISHED:
                        return job
                left = _wait_left(deadline, job_id, waiters is None)
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(woken.wait(), left)
                woken.clear()
        finally:
            if waiters is not None:
                waiters.remove(job_id, wake)

    async def retry(self, job_id: int) -> Job:
        """See `Queue.retry`."""
        return await self._run(_ops.retry(job_id))

    async def get(self, job_id: int) -> Job | None:
        """See `Queue.get`."""
        return await self._run(_ops.get(job_id))

    async def purge(self, older_than: dt.timedelta | float) -> int:
        """See `Queue.purge`."""
        return await self._run(_ops.purge(older_than))

    async def set_concurrency_limit(self, kind: str, limit: int | None) -> None:
        """See `Queue.set_concurrency_limit`."""
        await self._run(_ops.set_concurrency_limit(kind, limit))

    async def set_rate_limit(self, kind: str, rate: str | tuple[int, float] | None) -> None:
        """See `Queue.set_rate_limit`."""
        await self._run(_ops.set_rate_limit(kind, rate))

    async def is_dirty(self, queue: str, key: str) -> bool:
        """See `Queue.is_dirty`."""
        return await self._run(_ops.is_dirty(queue, key))

    async def stats(self) -> builtins.list[dict[str, Any]]:
        """See `Queue.stats`."""
        return await self._run(_ops.queue_stats())

    async def pause(self, queue: str) -> bool:
        """See `Queue.pause`."""
        return await self._run(_ops.pause(queue))

    async def resume(self, queue: str) -> bool:
        """See `Queue.resume`."""
        return await self._run(_ops.resume(queue))

    async def list(
        self,
        status: str | JobStatus | None = None,
        queue: str | None = None,
        kind: str | None = None,
        limit: int = 100,
        *,
        before_id: int | None = None,
    ) -> builtins.list[Job]:
        """See `Queue.list`."""
        return await self._run(
            _ops.list_jobs(status=status, queue=queue, kind=kind, limit=limit, before_id=before_id)
        )


def _non_negative(name: str, value: dt.timedelta | float) -> float:
    seconds = delay_seconds(value)
    if seconds < 0:
        raise InvalidJob(f"{name} must not be negative, got {value!r}")
    return seconds
