"""pgq's operations, written once, free of I/O.

An operation is a generator: it yields `Stmt` objects ("run sql/<name>.sql with these parameters")
and receives each statement's result; its return value is the operation's result. The sync driver
(`run_sync`) and the async driver (`run_async`) in this module are the only code that talks to
psycopg, so `Queue` and `AsyncQueue` share every line of queue logic and differ only in how they
wait. Database errors are thrown back into the generator, so an operation can translate them.
"""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Callable, Generator, Iterable, Mapping, Sequence
from contextlib import AbstractAsyncContextManager, AbstractContextManager, nullcontext
from dataclasses import dataclass
from typing import Any, Generic, Literal, TypeVar

import psycopg
from psycopg import errors as pg_errors
from psycopg.abc import Buffer
from psycopg.adapt import Loader
from psycopg.pq import Format
from psycopg.rows import dict_row, tuple_row

from . import _sql
from .errors import CONSTRAINT_MESSAGES, InvalidJob, InvalidState, LeaseLost, NotFound, NotMigrated, PgqError
from .models import (
    STATUS_BY_VALUE,
    Claim,
    Job,
    JobSpec,
    JobStatus,
    claims_from_tuples,
    delay_seconds,
    encode_json,
    positive_seconds,
)

T = TypeVar("T")

Fetch = Literal["rows", "tuples", "rowcount", "none"]


@dataclass(frozen=True, slots=True)
class Stmt:
    """Run `sql/<name>.sql` with `params`; the operation receives rows (dicts, or tuples in binary
    format, cheaper to decode, for the hot paths that read many rows), the row count, or None."""

    name: str
    params: dict[str, Any]
    fetch: Fetch = "rows"


Steps = Generator[Stmt, Any, T]


@dataclass(frozen=True, slots=True)
class Operation(Generic[T]):
    """An operation ready to be driven.

    `transaction`: run all statements in one transaction (otherwise each statement commits on its
    own; on a caller's connection, statements simply join the caller's transaction).
    `retry_safe`: re-running the whole operation after a connection error that may have happened
    after a statement reached the server cannot do harm (reads, heartbeats, deduplicated enqueues).
    `then`: given this operation's result, an operation to run next on the same connection (in its
    own transaction) whose result replaces it, or None to stop there.
    `guards_itself`: its first statement already applies `transaction_guard.sql`'s settings to its
    transaction (maintenance_lock does), so the driver runs no `transaction_guard` before it.
    """

    name: str
    steps: Callable[[], Steps[T]]
    transaction: bool = False
    retry_safe: bool = False
    then: Callable[[T], Operation[T] | None] | None = None
    guards_itself: bool = False


# ---------------------------------------------------------------------------------------------
# Operations


def enqueue(specs: Sequence[JobSpec]) -> Operation[list[int]]:
    """Enqueue `specs` in one statement; returns one id per spec, in order. Jobs without dedupe keys
    are plain INSERTs (job_insert_one, job_insert); any dedupe key sends the batch through
    pgq.enqueue_many (job_enqueue_one, job_enqueue), where the dedupe and watermark rules live.

    Deduplicated specs (all with a dedupe_key) are retry-safe: re-running returns the same ids.
    """

    def steps() -> Steps[list[int]]:
        if not specs:
            return []
        if len(specs) == 1:
            s = specs[0]
            rows = yield Stmt("job_insert_one" if s.dedupe_key is None else "job_enqueue_one", {
                "kind": s.kind, "payload": s.payload_json, "queue": s.queue, "priority": s.priority,
                "run_at": s.run_at, "delay": s.delay_s, "dedupe_key": s.dedupe_key, "watermark": s.watermark,
                "max_attempts": s.max_attempts,
            }, fetch="tuples")
        elif all(s.dedupe_key is None for s in specs):
            rows = yield Stmt("job_insert", _insert_params(specs), fetch="tuples")
            return sorted(row[0] for row in rows)  # ids follow input order (sql/job_insert.sql)
        else:
            rows = yield Stmt("job_enqueue", _enqueue_params(specs), fetch="tuples")
        return [row[0] for row in rows]  # the id comes first in each row

    return Operation("job_enqueue", steps, retry_safe=all(s.dedupe_key is not None for s in specs))


def _insert_params(specs: Sequence[JobSpec]) -> dict[str, Any]:
    """Parameters of job_insert: a column shared by the whole batch as one scalar (NULL array), a
    column that is None for every job as a NULL array, the others as arrays."""
    params: dict[str, Any] = {"payloads": [s.payload_json for s in specs]}
    columns: tuple[tuple[str, list[Any]], ...] = (
        ("kind", [s.kind for s in specs]),
        ("queue", [s.queue for s in specs]),
        ("priority", [s.priority for s in specs]),
    )
    for (scalar, values), array in zip(columns, ("kinds", "queues", "priorities"), strict=True):
        shared = values.count(values[0]) == len(values)
        params[scalar], params[array] = (values[0], None) if shared else (None, values)
    optional: tuple[tuple[str, list[Any]], ...] = (
        ("run_ats", [s.run_at for s in specs]),
        ("delays", [s.delay_s for s in specs]),
        ("watermarks", [s.watermark for s in specs]),
        ("max_attempts", [s.max_attempts for s in specs]),
    )
    for array, values in optional:
        params[array] = None if values.count(None) == len(values) else values
    return params


def _enqueue_params(specs: Sequence[JobSpec]) -> dict[str, Any]:
    return {
        "kinds": [s.kind for s in specs],
        "payloads": [s.payload_json for s in specs],
        "queues": [s.queue for s in specs],
        "priorities": [s.priority for s in specs],
        "run_ats": [s.run_at for s in specs],
        "delays": [s.delay_s for s in specs],
        "dedupe_keys": [s.dedupe_key for s in specs],
        "watermarks": [s.watermark for s in specs],
        "max_attempts": [s.max_attempts for s in specs],
    }


def claim(
    *,
    worker: str,
    queues: Sequence[str] | None,
    kinds: Sequence[str] | None,
    limit: int,
    lease: dt.timedelta | float,
) -> Operation[list[Claim]]:
    """Claim up to `limit` ready jobs, honouring concurrency limits exactly. Not retry-safe: a lost
    reply may hide claims, which are then rescued when their lease expires.

    For one queue the cheap single statement job_claim_fast runs first; when it claims nothing
    (nothing ready, or some concurrency limit exists) the general claim runs: two statements in one
    transaction, lock the limits, then claim.
    """
    lease_s = positive_seconds("lease", lease)
    if isinstance(limit, bool) or not isinstance(limit, int) or limit < 1:
        raise InvalidJob(f"limit must be an int >= 1, got {limit!r}")
    if not isinstance(worker, str) or not worker:
        raise InvalidJob("worker must be a non-empty str")
    queue_list = _text_list("queues", queues)
    kind_list = _text_list("kinds", kinds)
    lease_td = dt.timedelta(seconds=lease_s)

    def to_claims(rows: list[tuple[Any, ...]]) -> list[Claim]:
        # The statements return their rows in claim order (priority, run_at, id) already.
        return claims_from_tuples(rows, lease_td)

    def general(wanted: int) -> Steps[list[Claim]]:
        locked = yield Stmt("claim_limits_lock", {"kinds": kind_list})
        rows = yield Stmt(
            "job_claim",
            {
                "queues": queue_list,
                "kinds": kind_list,
                "limit": wanted,
                "lease_s": lease_s,
                "worker": worker,
                "limited_kinds": [r["kind"] for r in locked],
                "limited_max": [r["max_running"] for r in locked],
                "limited_starts": [r["max_starts"] for r in locked],
                "limited_per_s": [r["per_s"] for r in locked],
            },
            fetch="tuples",
        )
        return to_claims(rows)

    def fast() -> Steps[list[Claim]]:
        assert queue_list is not None
        rows = yield Stmt("job_claim_fast", {"queue": queue_list[0], "kinds": kind_list, "limit": limit,
                                             "lease_s": lease_s, "worker": worker}, fetch="tuples")
        return to_claims(rows)

    def rest(first: list[Claim]) -> Operation[list[Claim]] | None:
        # Any claim at all proves no limit exists (job_claim_fast claims nothing then): the general
        # claim could only add jobs that became ready meanwhile, not worth delaying these for.
        if first:
            return None

        return Operation("job_claim", lambda: general(limit), transaction=True)

    if queue_list is not None and len(queue_list) == 1:
        return Operation("job_claim", fast, then=rest)
    return Operation("job_claim", lambda: general(limit), transaction=True)


def complete(
    items: Sequence[tuple[Claim, Any, int | None]], *, raise_lost: bool, progress: Mapping[int, str] | None = None
) -> Operation[dict[int, JobStatus]]:
    """Finish attempts successfully: `(claim, result, watermark)` each; watermark None means the
    watermark the job had when claimed. Returns {job id: new status} for the attempts that still
    held their lease (succeeded, or queued for a dirty re-run). Attempts that lost their lease are
    left unchanged; with `raise_lost` they raise LeaseLost (after the others were completed).
    `progress`: progress to store with some of them (job id -> JSON text)."""
    ids = [c.job.id for c, _, _ in items]
    params: dict[str, Any] = {
        "ids": ids,
        "tokens": [c.token for c, _, _ in items],
        "results": [None if r is None else encode_json("result", r, None) for _, r, _ in items],
        "watermarks": [c.job.input_watermark if w is None else w for c, _, w in items],
        "progress": _progress_param(ids, progress),
    }

    def steps() -> Steps[dict[int, JobStatus]]:
        if not items:
            return {}
        rows = yield Stmt("job_complete", params, fetch="tuples")  # (id, status, woke) each
        return _check_lost("complete", params["ids"], {row[0]: STATUS_BY_VALUE[row[1]] for row in rows}, raise_lost)

    return Operation("job_complete", steps)


def fail(
    items: Sequence[tuple[Claim, str, float | None, bool]], *, raise_lost: bool,
    progress: Mapping[int, str] | None = None,
) -> Operation[dict[int, Job]]:
    """Record failed attempts: `(claim, error, retry_in seconds or None, final)` each. Returns the
    jobs that still held their lease, as updated (queued for a retry, or failed); lost leases and
    `progress` as in `complete`."""
    ids = [c.job.id for c, _, _, _ in items]
    params: dict[str, Any] = {
        "ids": ids,
        "tokens": [c.token for c, _, _, _ in items],
        "errors": [_clean_text(e) for _, e, _, _ in items],
        "retry_in": [r for _, _, r, _ in items],
        "finals": [f for _, _, _, f in items],
        "progress": _progress_param(ids, progress),
    }

    def steps() -> Steps[dict[int, Job]]:
        if not items:
            return {}
        rows = yield Stmt("job_fail", params)
        return _check_lost("fail", params["ids"], {job.id: job for job in map(Job.from_row, rows)}, raise_lost)

    return Operation("job_fail", steps)


def heartbeat(items: Sequence[tuple[Claim, float]], *, raise_lost: bool,
              progress: Mapping[int, str] | None = None) -> Operation[set[int]]:
    """Renew leases: `(claim, lease seconds)` each. Returns the ids renewed; lost leases and
    `progress` as in `complete`. Retry-safe (renewing twice only moves the expiry to the same place,
    and stores the same progress)."""
    ids = [c.job.id for c, _ in items]
    params: dict[str, Any] = {
        "ids": ids,
        "tokens": [c.token for c, _ in items],
        "lease_s": [s for _, s in items],
        "progress": _progress_param(ids, progress),
    }

    def steps() -> Steps[set[int]]:
        if not items:
            return set()
        rows = yield Stmt("job_heartbeat", params)
        renewed = {row["id"]: row["id"] for row in rows}
        return set(_check_lost("heartbeat", params["ids"], renewed, raise_lost))

    return Operation("job_heartbeat", steps, retry_safe=True)


def snooze(items: Sequence[tuple[Claim, float]], *, raise_lost: bool,
           progress: Mapping[int, str] | None = None) -> Operation[dict[int, Job]]:
    """Requeue running attempts `delay` seconds from now without spending an attempt:
    `(claim, delay seconds)` each. Returns the jobs that still held their lease; lost leases and
    `progress` as in `complete`."""
    ids = [c.job.id for c, _ in items]
    params: dict[str, Any] = {
        "ids": ids,
        "tokens": [c.token for c, _ in items],
        "delays": [d for _, d in items],
        "progress": _progress_param(ids, progress),
    }

    def steps() -> Steps[dict[int, Job]]:
        if not items:
            return {}
        rows = yield Stmt("job_snooze", params)
        return _check_lost("snooze", params["ids"], {job.id: job for job in map(Job.from_row, rows)}, raise_lost)

    return Operation("job_snooze", steps)


def _progress_param(ids: list[int], progress: Mapping[int, str] | None) -> list[str | None] | None:
    """The `progress` array of an acknowledgement or heartbeat: one JSON text (or NULL) per id, or
    NULL for the whole array when no job has any (the common case costs nothing)."""
    if not progress:
        return None
    return [progress.get(i) for i in ids]


def lease_check(claims: Sequence[Claim]) -> Operation[dict[int, str]]:
    """Which of `claims` no longer hold their lease: {job id: "cancelled" or "lease lost" (rescued,
    finished elsewhere, deleted)}; a read."""
    params: dict[str, Any] = {"ids": [c.job.id for c in claims], "tokens": [c.token for c in claims]}

    def steps() -> Steps[dict[int, str]]:
        if not claims:
            return {}
        rows = yield Stmt("job_lease_check", params, fetch="tuples")
        return {row[0]: "cancelled" if row[1] else "lease lost" for row in rows}

    return Operation("job_lease_check", steps, retry_safe=True)


K = TypeVar("K")


def _check_lost(operation: str, sent: list[int], done: dict[int, K], raise_lost: bool) -> dict[int, K]:
    if raise_lost and len(done) < len(sent):
        raise LeaseLost((i for i in sent if i not in done), operation)
    return done


RESCUE_BATCH = 1000


def rescue_expired() -> Operation[list[int]]:
    """Rescue every attempt whose lease has expired, in batches of RESCUE_BATCH (each its own
    transaction). Returns the ids rescued (requeued or failed)."""

    def steps() -> Steps[list[int]]:
        rescued: list[int] = []
        while True:
            rows = yield Stmt("job_rescue", {"limit": RESCUE_BATCH})
            rescued.extend(row["id"] for row in rows)
            if len(rows) < RESCUE_BATCH:
                return rescued

    return Operation("job_rescue", steps)


def cancel(job_id: int) -> Operation[Job]:
    """Cancel a queued or running job; raises NotFound or InvalidState (already finished)."""
    _check_id(job_id)

    def steps() -> Steps[Job]:
        rows = yield Stmt("job_cancel", {"id": job_id})
        if rows:
            return Job.from_row(rows[0])
        current = yield from _get(job_id)
        raise InvalidState(job_id, current.status.value, "cancel")

    return Operation("job_cancel", steps)


def wait_mark(job_id: int) -> Operation[Job]:
    """Mark job `job_id` awaited (finishing it then notifies channel pgq_finished) and return it as
    it is now; raises NotFound. Idempotent."""
    _check_id(job_id)

    def steps() -> Steps[Job]:
        rows = yield Stmt("job_wait_mark", {"id": job_id})
        if rows:
            return Job.from_row(rows[0])
        return (yield from _get(job_id))

    return Operation("job_wait_mark", steps, retry_safe=True)


def retry(job_id: int) -> Operation[Job]:
    """Queue a failed or cancelled job again with fresh attempts; raises NotFound, or InvalidState
    when it is not failed/cancelled or another active job holds its dedupe key."""
    _check_id(job_id)

    def steps() -> Steps[Job]:
        try:
            rows = yield Stmt("job_retry", {"id": job_id})
        except pg_errors.UniqueViolation as exc:
            detail = CONSTRAINT_MESSAGES.get(exc.diag.constraint_name or "", "unique violation")
            raise InvalidState(job_id, "failed or cancelled", "retry", detail) from None
        if rows:
            return Job.from_row(rows[0])
        current = yield from _get(job_id)
        raise InvalidState(job_id, current.status.value, "retry")

    return Operation("job_retry", steps)


def get(job_id: int) -> Operation[Job | None]:
    """Read one job, or None."""
    _check_id(job_id)

    def steps() -> Steps[Job | None]:
        rows = yield Stmt("job_get", {"id": job_id})
        return Job.from_row(rows[0]) if rows else None

    return Operation("job_get", steps, retry_safe=True)


def _get(job_id: int) -> Steps[Job]:
    rows = yield Stmt("job_get", {"id": job_id})
    if not rows:
        raise NotFound(job_id)
    return Job.from_row(rows[0])


def list_jobs(
    *,
    status: str | JobStatus | None,
    queue: str | None,
    kind: str | None,
    limit: int,
    before_id: int | None,
) -> Operation[list[Job]]:
    """Jobs matching the filters, newest first; raises InvalidJob for an unknown status."""
    parsed = None if status is None else JobStatus.parse(status).value
    if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= 100_000:
        raise InvalidJob(f"limit must be an int in [1, 100000], got {limit!r}")
    params = {"status": parsed, "queue": queue, "kind": kind, "limit": limit, "before_id": before_id}

    def steps() -> Steps[list[Job]]:
        rows = yield Stmt("job_list", params)
        return [Job.from_row(row) for row in rows]

    return Operation("job_list", steps, retry_safe=True)


PURGE_BATCH = 5000


def purge(older_than: dt.timedelta | float, batch: int = PURGE_BATCH) -> Operation[int]:
    """Delete jobs finished longer than `older_than` ago, `batch` rows per transaction, until none is
    left; returns how many were deleted. Retry-safe (deleting what is gone deletes nothing)."""
    seconds = delay_seconds(older_than)  # timedelta(0) or 0: every finished job
    if not seconds >= 0:
        raise InvalidJob(f"older_than must be >= 0, got {older_than!r}")

    def steps() -> Steps[int]:
        total = 0
        while True:
            deleted: int = yield Stmt("job_purge", {"older_than_s": seconds, "batch": batch}, fetch="rowcount")
            total += deleted
            if deleted == 0:
                return total

    return Operation("job_purge", steps, retry_safe=True)


def set_concurrency_limit(kind: str, limit: int | None) -> Operation[None]:
    """Set (or with None remove) the running-jobs limit of `kind`."""
    if not isinstance(kind, str) or not kind:
        raise InvalidJob("kind must be a non-empty str")
    if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int) or limit < 1):
        raise InvalidJob(f"concurrency limit must be an int >= 1 or None, got {limit!r}")

    def steps() -> Steps[None]:
        if limit is None:
            yield Stmt("concurrency_limit_delete", {"kind": kind}, fetch="none")
        else:
            yield Stmt("concurrency_limit_set", {"kind": kind, "max_running": limit}, fetch="none")

    return Operation("concurrency_limit_set", steps, retry_safe=True)


_RATE_UNITS = {"s": 1.0, "sec": 1.0, "second": 1.0, "m": 60.0, "min": 60.0, "minute": 60.0,
               "h": 3600.0, "hour": 3600.0, "d": 86400.0, "day": 86400.0}


def parse_rate(rate: str | tuple[int, float]) -> tuple[int, float]:
    """A rate limit as (max_starts, per seconds): "100/s", "5/min", "1000/h", "10/2s", or a tuple
    (max_starts, seconds). Raises InvalidJob for anything else (a window over one day included)."""
    if isinstance(rate, tuple) and len(rate) == 2:
        count, per = rate
    elif isinstance(rate, str) and rate.count("/") == 1:
        head, _, tail = rate.replace(" ", "").partition("/")
        number = tail.rstrip("abcdefghijklmnopqrstuvwxyz")
        unit = tail[len(number):]
        try:
            count, per = int(head), (float(number) if number else 1.0) * _RATE_UNITS[unit]
        except (ValueError, KeyError):
            raise InvalidJob(f"rate limit must look like '100/s', '5/min' or '1000/h', got {rate!r}") from None
    else:
        raise InvalidJob(f"rate limit must look like '100/s', '5/min' or '1000/h', got {rate!r}")
    if (isinstance(count, bool) or not isinstance(count, int) or count < 1
            or isinstance(per, bool) or not isinstance(per, int | float) or not 0 < per <= 86400):
        raise InvalidJob(f"rate limit needs a whole number >= 1 per a window of up to a day, got {rate!r}")
    return count, float(per)


def set_rate_limit(kind: str, rate: str | tuple[int, float] | None) -> Operation[None]:
    """Set (or with None remove) the global rate limit of `kind`: see `parse_rate`."""
    if not isinstance(kind, str) or not kind:
        raise InvalidJob("kind must be a non-empty str")
    parsed = None if rate is None else parse_rate(rate)

    def steps() -> Steps[None]:
        if parsed is None:
            yield Stmt("rate_limit_delete", {"kind": kind}, fetch="none")
        else:
            yield Stmt("rate_limit_set", {"kind": kind, "max_starts": parsed[0], "per_s": parsed[1]}, fetch="none")

    return Operation("rate_limit_set", steps, retry_safe=True)


def is_dirty(queue: str, dedupe_key: str) -> Operation[bool]:
    """Whether the key has an active job, i.e. input not yet processed by a successful run."""

    def steps() -> Steps[bool]:
        rows = yield Stmt("key_is_dirty", {"queue": queue, "dedupe_key": dedupe_key})
        return bool(rows[0]["dirty"])

    return Operation("key_is_dirty", steps, retry_safe=True)


def queue_stats() -> Operation[list[dict[str, Any]]]:
    """Rows of the pgq.queue_stats view."""

    def steps() -> Steps[list[dict[str, Any]]]:
        rows = yield Stmt("queue_stats", {})
        return [dict(row) for row in rows]

    return Operation("queue_stats", steps, retry_safe=True)


def pause(queue: str) -> Operation[bool]:
    """Pause `queue`: once this returns no worker claims its jobs (enqueue still works, running jobs
    finish). True if it was running, False if it was paused already. Idempotent."""
    name = _queue_name(queue)

    def steps() -> Steps[bool]:
        rows = yield Stmt("queue_pause", {"queue": name})
        return bool(rows[0]["changed"])

    return Operation("queue_pause", steps, retry_safe=True)


def resume(queue: str) -> Operation[bool]:
    """Resume a paused `queue` and wake idle workers; True if it was paused. Idempotent."""
    name = _queue_name(queue)

    def steps() -> Steps[bool]:
        rows = yield Stmt("queue_resume", {"queue": name})
        return bool(rows[0]["changed"])

    return Operation("queue_resume", steps, retry_safe=True)


def _queue_name(queue: object) -> str:
    if not isinstance(queue, str) or not queue or "\x00" in queue:
        raise InvalidJob(f"queue must be a non-empty str, got {queue!r}")
    return queue


def queue_backlog(queues: Sequence[str] | None) -> Operation[list[dict[str, Any]]]:
    """Rows of the pgq.queue_backlog view for `queues` (None: all): per queue ready, scheduled,
    running, expired_leases and oldest_ready_age_s (seconds, None when nothing is ready)."""
    queue_list = _text_list("queues", queues)

    def steps() -> Steps[list[dict[str, Any]]]:
        rows = yield Stmt("queue_backlog", {"queues": queue_list})
        return [dict(row) for row in rows]

    return Operation("queue_backlog", steps, retry_safe=True)


def _text_list(name: str, values: Iterable[str] | None) -> list[str] | None:
    if values is None:
        return None
    if isinstance(values, str):
        raise InvalidJob(f"{name} must be a list of str, not a str")
    result = list(values)
    if not result or not all(isinstance(v, str) and v for v in result):
        raise InvalidJob(f"{name} must be a non-empty list of non-empty str")
    return result


def _check_id(job_id: object) -> None:
    if isinstance(job_id, bool) or not isinstance(job_id, int):
        raise InvalidJob(f"job id must be an int, got {type(job_id).__name__}")


def _clean_text(text: str) -> str:
    # Error texts come from exceptions and may hold anything; Postgres text cannot hold NUL.
    return str(text).replace("\x00", "\\0")


# ---------------------------------------------------------------------------------------------
# Drivers: the only code that executes statements.


_raw_decode = json.JSONDecoder().raw_decode


class _JsonbBinaryLoader(Loader):
    """jsonb in binary format (the claim's payloads and results), parsed by the json module's C
    scanner straight from text: `json.loads` on bytes, psycopg's default, spends most of its time
    detecting the encoding and checking arguments (about 3.5 µs against 0.9 µs for a small payload,
    which a claim pays once per job). The same values as `json.loads`, and its errors."""

    format = Format.BINARY
    decoded_bytes = 0
    """Bytes of jsonb this process has decoded so far, all connections together (see
    `jsonb_bytes_decoded`)."""

    def load(self, data: Buffer) -> Any:
        _JsonbBinaryLoader.decoded_bytes += len(data)
        if not data or data[0] != 1:
            raise psycopg.DataError(f"unknown jsonb binary format: {data[0] if data else 'empty'}")
        text = str(memoryview(data)[1:], "utf-8")
        try:
            value, end = _raw_decode(text)
        except ValueError:
            return json.loads(text)  # raises the error json.loads raises
        return value if end == len(text) else json.loads(text)


_JSONB_OID = psycopg.postgres.types["jsonb"].oid


def jsonb_bytes_decoded() -> int:
    """How many bytes of jsonb values (payloads, results) pgq's loader has decoded in this process so
    far, on every connection it is installed on. A worker reads it before and after a claim to learn
    how big its jobs' payloads are; other decoding meanwhile (a concurrent claim, a handler reading
    jobs) only makes that figure larger. Locks nothing."""
    return _JsonbBinaryLoader.decoded_bytes


def configure_connection(conn: psycopg.Connection[Any]) -> None:
    """Set up a new connection of a pool pgq creates and owns (never a caller's connection); the
    pool's `configure` callback. Installs pgq's loaders, so that its statements skip the per-cursor
    set-up (a few microseconds each, and ten times that when the process was idle: on the wake-up
    path of an idle worker), and sets the session's time zone to UTC (sql/session_utc.sql says why:
    datetimes pgq reads on its own connections are in UTC). Leaves no transaction open. Raises
    psycopg errors of the statement (the pool then discards the connection and tries again)."""
    conn.adapters.register_loader("jsonb", _JsonbBinaryLoader)
    if conn.info.parameter_status("TimeZone") != "UTC":
        conn.execute(_sql.query("session_utc"))
        if not conn.autocommit:
            conn.commit()


async def configure_connection_async(conn: psycopg.AsyncConnection[Any]) -> None:
    """`configure_connection` for a connection of an AsyncConnectionPool."""
    conn.adapters.register_loader("jsonb", _JsonbBinaryLoader)
    if conn.info.parameter_status("TimeZone") != "UTC":
        await conn.execute(_sql.query("session_utc"))
        if not conn.autocommit:
            await conn.commit()


def _cursor_adapters(cur: psycopg.Cursor[Any] | psycopg.AsyncCursor[Any]) -> None:
    # On the cursor, not the connection: a connection from a caller's pool keeps its own loaders.
    # Connections of pgq's own pools have them already (configure_connection).
    if cur.connection.adapters.get_loader(_JSONB_OID, Format.BINARY) is not _JsonbBinaryLoader:
        cur.adapters.register_loader("jsonb", _JsonbBinaryLoader)


TRANSACTION_IDLE_LIMIT = "5s"
"""How long a transaction pgq opened itself may sit idle before the server ends its session (see
`transaction_guard.sql`, which also turns JIT compilation off in it): its statements follow each
other within milliseconds."""
_GUARD_PARAMS = {"idle_limit": TRANSACTION_IDLE_LIMIT}


def _needs_guard(conn: psycopg.Connection[Any] | psycopg.AsyncConnection[Any], op: Operation[Any]) -> bool:
    # For an operation the driver runs in a transaction: whether that transaction is its own (not a
    # savepoint in the caller's, whose settings are the caller's) and the operation does not apply
    # the guard's settings itself.
    return not op.guards_itself and conn.info.transaction_status == psycopg.pq.TransactionStatus.IDLE


KEPT_CURSOR_MAX_ROWS = 4
"""A cursor kept for the next operation (`keeps_cursor`) holds its last result in memory until that
operation's first statement replaces it; one that returned more rows than this is closed instead. Short
calls, whose set-up a kept cursor saves (an enqueue, an idle worker's claim, a heartbeat), return a few
rows; bigger results pay for a new cursor many times over."""


def keeps_cursor(cur: psycopg.Cursor[Any] | psycopg.AsyncCursor[Any]) -> bool:
    """Whether `cur`, which ran an operation's statements (`run_sync` / `run_async` with `cursor=`), may
    be kept for the next operation on its connection: it is open and its last result holds at most
    KEPT_CURSOR_MAX_ROWS rows. A kept cursor reuses the loaders and dumpers it found for the columns and
    parameters it has seen, which a new cursor looks up and builds again."""
    return not cur.closed and cur.rowcount <= KEPT_CURSOR_MAX_ROWS


def run_sync(conn: psycopg.Connection[Any], op: Operation[T], *, own_transaction: bool,
             cursor: psycopg.Cursor[Any] | None = None) -> T:
    """Drive `op` (and the operations its `then` chains) to completion on `conn` (not closed; the
    caller owns it).

    The statements run on `cursor`, a cursor of `conn` that is left open (see `keeps_cursor`), or
    else on a new cursor per operation, closed at its end.

    With `own_transaction`, an operation marked `transaction` runs inside `conn.transaction()`
    (a savepoint when the connection is already in a transaction). A transaction begun here first
    runs `transaction_guard.sql` (unless the operation `guards_itself`): the server ends the session
    if it then idles for more than TRANSACTION_IDLE_LIMIT, and compiles none of its statements with
    JIT. Both settings end with the transaction. Database errors are thrown into the operation, which
    may translate them; whatever escapes is raised here.
    """
    current: Operation[T] | None = op
    result: T
    while current is not None:
        in_transaction = current.transaction and own_transaction
        guard = in_transaction and _needs_guard(conn, current)
        ctx: AbstractContextManager[Any] = conn.transaction() if in_transaction else nullcontext()
        with ctx, (conn.cursor(row_factory=dict_row) if cursor is None else nullcontext(cursor)) as cur:
            _cursor_adapters(cur)
            if guard:
                cur.execute(_sql.query("transaction_guard"), _GUARD_PARAMS)
            steps = current.steps()
            step = _step(steps, None, None)
            while isinstance(step, Stmt):
                cur.row_factory = _ROW_FACTORY[step.fetch]
                try:
                    cur.execute(_sql.query(step.name), step.params, binary=step.fetch == "tuples")
                    got = cur.fetchall() if step.fetch in _FETCHING else _count(cur, step)
                except psycopg.Error as exc:
                    step = _step(steps, None, exc)
                else:
                    step = _step(steps, got, None)
            result = step.value
        current = current.then(result) if current.then is not None else None
    return result


async def run_async(conn: psycopg.AsyncConnection[Any], op: Operation[T], *, own_transaction: bool,
                    cursor: psycopg.AsyncCursor[Any] | None = None) -> T:
    """The asyncio twin of `run_sync` (the driver loop only; the operations are shared)."""
    current: Operation[T] | None = op
    result: T
    while current is not None:
        in_transaction = current.transaction and own_transaction
        guard = in_transaction and _needs_guard(conn, current)
        ctx: AbstractAsyncContextManager[Any] = conn.transaction() if in_transaction else _anull()
        async with ctx, (conn.cursor(row_factory=dict_row) if cursor is None else nullcontext(cursor)) as cur:
            _cursor_adapters(cur)
            if guard:
                await cur.execute(_sql.query("transaction_guard"), _GUARD_PARAMS)
            steps = current.steps()
            step = _step(steps, None, None)
            while isinstance(step, Stmt):
                cur.row_factory = _ROW_FACTORY[step.fetch]
                try:
                    await cur.execute(_sql.query(step.name), step.params, binary=step.fetch == "tuples")
                    got = await cur.fetchall() if step.fetch in _FETCHING else _count(cur, step)
                except psycopg.Error as exc:
                    step = _step(steps, None, exc)
                else:
                    step = _step(steps, got, None)
            result = step.value
        current = current.then(result) if current.then is not None else None
    return result


_FETCHING = ("rows", "tuples")
_ROW_FACTORY: dict[Fetch, Any] = {"rows": dict_row, "tuples": tuple_row, "rowcount": dict_row, "none": dict_row}


@dataclass(frozen=True, slots=True)
class _Done(Generic[T]):
    value: T


def _step(steps: Steps[T], result: Any, error: psycopg.Error | None) -> Stmt | _Done[T]:
    """Advance an operation by one statement: send it the last result (or throw the translated
    error into it); return its next statement, or its final value."""
    try:
        return steps.throw(_translate(error)) if error is not None else steps.send(result)
    except StopIteration as stop:
        return _Done(stop.value)


def _count(cur: psycopg.Cursor[Any] | psycopg.AsyncCursor[Any], stmt: Stmt) -> int | None:
    return cur.rowcount if stmt.fetch == "rowcount" else None


class _anull(AbstractAsyncContextManager[None]):
    async def __aexit__(self, *exc: object) -> None:
        return None


def _translate(exc: psycopg.Error) -> BaseException:
    """Map errors whose meaning pgq knows: a missing schema, and constraint violations by name."""
    mapped: BaseException = exc
    if isinstance(exc, pg_errors.UndefinedTable | pg_errors.UndefinedFunction | pg_errors.InvalidSchemaName):
        mapped = NotMigrated(
            f"the pgq schema is missing or outdated; run `pgq migrate` ({exc.diag.message_primary})"
        )
    elif isinstance(exc, pg_errors.CheckViolation):
        message = CONSTRAINT_MESSAGES.get(exc.diag.constraint_name or "")
        if message:
            mapped = InvalidJob(message)
    elif isinstance(exc, pg_errors.ProgramLimitExceeded):
        # A btree entry holds at most 2704 bytes (after compression): queue names and dedupe keys
        # are indexed, so a huge one fails the statement, which wrote nothing.
        mapped = InvalidJob(f"a value is too large for pgq's indexes ({exc.diag.message_primary}): keep queue "
                            "names and dedupe keys under about 2 KB")
    elif isinstance(exc, pg_errors.InvalidSqlStatementName | pg_errors.DuplicatePreparedStatement):
        # pgq never prepares by name itself: psycopg's automatic prepared statements met a pooler
        # that moves transactions between server connections.
        mapped = PgqError(
            f"{exc.diag.message_primary}: is this DSN a PgBouncer in transaction pooling mode? Then pass "
            "pgbouncer=True (pgq worker/commands: --pgbouncer) so that no statement is prepared"
        )
    if mapped is not exc:
        mapped.__cause__ = exc
    return mapped


# ---------------------------------------------------------------------------------------------
# Worker and maintenance operations (pgq.worker, pgq.worker.maintenance)


def next_run_at(queues: Sequence[str] | None) -> Operation[float | None]:
    """Seconds (database clock) until the earliest queued job of `queues` (None: all) is due;
    negative when one is due already, None when nothing is queued."""
    queue_list = _text_list("queues", queues)

    def steps() -> Steps[float | None]:
        rows = yield Stmt("job_next_run_at", {"queues": queue_list})
        seconds = rows[0]["seconds"] if rows else None
        return None if seconds is None else float(seconds)

    return Operation("job_next_run_at", steps, retry_safe=True)


@dataclass(frozen=True, slots=True)
class LeaderRun(Generic[T]):
    """Outcome of a maintenance run: whether it held the step's lock, the database clock at the
    start of its transaction, and the step's value (None when it was not the leader)."""

    leader: bool
    now: dt.datetime
    value: T | None


def _leader(lock_key: int) -> Steps[tuple[bool, dt.datetime]]:
    rows = yield Stmt("maintenance_lock", {"key": lock_key, **_GUARD_PARAMS})
    return bool(rows[0]["leader"]), rows[0]["now"]


def rescue_as_leader(
    lock_key: int, limit: int = RESCUE_BATCH
) -> Operation[LeaderRun[list[tuple[int, str, str, str]]]]:
    """One transaction: take the rescue lock (`pg_try_advisory_xact_lock(lock_key)`), and when it was
    free, rescue up to `limit` expired attempts. Value: (job id, new status, queue, kind) per job
    rescued."""

    def steps() -> Steps[LeaderRun[list[tuple[int, str, str, str]]]]:
        leader, now = yield from _leader(lock_key)
        if not leader:
            return LeaderRun(False, now, None)
        rows = yield Stmt("job_rescue", {"limit": limit})
        return LeaderRun(True, now, [(row["id"], row["status"], row["queue"], row["kind"]) for row in rows])

    return Operation("job_rescue", steps, transaction=True, guards_itself=True)


# pgq's statements that lock job (or limit) rows or hold a lock until they commit: a session stuck
# sending the result of one of these to a frozen client holds those rows. No other statement takes
# a row lock (READ_ONLY_STATEMENTS); tests check that every .sql file is in exactly one of the two.
WRITING_STATEMENTS: tuple[str, ...] = (
    "claim_limits_lock", "concurrency_limit_delete", "concurrency_limit_set", "job_cancel", "job_claim",
    "job_claim_fast", "job_complete", "job_enqueue", "job_enqueue_one", "job_fail", "job_heartbeat",
    "job_insert", "job_insert_one", "job_purge", "job_rescue", "job_retry", "job_snooze",
    "job_wait_mark", "maintenance_lock", "periodic_enqueue", "queue_pause", "queue_resume",
    "rate_limit_delete", "rate_limit_set",
)
READ_ONLY_STATEMENTS: tuple[str, ...] = (
    "job_get", "job_lease_check", "job_list", "job_next_run_at", "key_is_dirty", "ping", "queue_backlog",
    "queue_exists", "queue_stats", "schema_check", "session_utc", "stalled_session_end", "transaction_guard",
)


@dataclass(frozen=True, slots=True)
class StalledSession:
    """A session ended by `end_stalled_as_leader`: its backend pid, application_name, client address
    ("local" for a unix socket), the pgq statement it was stuck in, and for how long (seconds)."""

    pid: int
    application_name: str
    client: str
    statement: str
    stalled_s: float


def end_stalled_as_leader(lock_key: int, after_s: float) -> Operation[LeaderRun[list[StalledSession]]]:
    """One transaction: take the rescue lock, and when it was free, end every session of this
    database stuck for more than `after_s` seconds writing the result of one of pgq's writing
    statements to a client that stopped reading (see `stalled_session_end.sql`). Only sessions this
    role may signal are considered. Value: the sessions ended."""

    def steps() -> Steps[LeaderRun[list[StalledSession]]]:
        leader, now = yield from _leader(lock_key)
        if not leader:
            return LeaderRun(False, now, None)
        rows = yield Stmt("stalled_session_end", {"after_s": after_s, "statements": list(WRITING_STATEMENTS)})
        return LeaderRun(True, now, [
            StalledSession(r["pid"], r["application_name"], r["client"], r["statement"], r["stalled_s"])
            for r in rows if r["ended"]])

    return Operation("stalled_session_end", steps, transaction=True, guards_itself=True)


def purge_as_leader(lock_key: int, older_than_s: float, batch: int = PURGE_BATCH) -> Operation[LeaderRun[int]]:
    """One transaction: take the retention lock, and when it was free, delete one batch of jobs that
    finished more than `older_than_s` seconds ago. Value: the number deleted."""

    def steps() -> Steps[LeaderRun[int]]:
        leader, now = yield from _leader(lock_key)
        if not leader:
            return LeaderRun(False, now, None)
        deleted: int = yield Stmt("job_purge", {"older_than_s": older_than_s, "batch": batch}, fetch="rowcount")
        return LeaderRun(True, now, deleted)

    return Operation("job_purge", steps, transaction=True, retry_safe=True, guards_itself=True)


def periodic_enqueue_as_leader(
    lock_key: int, plan: Callable[[dt.datetime], Sequence[JobSpec]]
) -> Operation[LeaderRun[list[tuple[int, str]]]]:
    """One transaction: take the periodic lock, and when it was free, enqueue the ticks `plan(now)`
    returns (`now`: the database clock) unless a job of the tick exists in any status. The specs
    must carry dedupe keys. Value: (job id, dedupe key) per job created."""

    def steps() -> Steps[LeaderRun[list[tuple[int, str]]]]:
        leader, now = yield from _leader(lock_key)
        if not leader:
            return LeaderRun(False, now, None)
        specs = plan(now)
        if not specs:
            return LeaderRun(True, now, [])
        params = {
            "kinds": [s.kind for s in specs],
            "payloads": [s.payload_json for s in specs],
            "queues": [s.queue for s in specs],
            "priorities": [s.priority for s in specs],
            "dedupe_keys": [s.dedupe_key for s in specs],
            "max_attempts": [s.max_attempts for s in specs],
        }
        rows = yield Stmt("periodic_enqueue", params)
        return LeaderRun(True, now, [(row["id"], row["dedupe_key"]) for row in rows])

    return Operation("periodic_enqueue", steps, transaction=True, guards_itself=True)
