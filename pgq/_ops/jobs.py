"""Operations of producers and workers: enqueue, claim, and the fenced acknowledgements (complete,
fail, heartbeat, snooze), the lease check, and the rescue of expired leases."""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping, Sequence
from typing import Any

from ..errors import InvalidJob
from ..models import (
    STATUS_BY_VALUE,
    Claim,
    Job,
    JobSpec,
    JobStatus,
    claims_from_tuples,
    encode_json,
    positive_seconds,
)
from .core import (
    Operation,
    Steps,
    Stmt,
    _check_lost,
    _clean_text,
    _text_list,
)


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
