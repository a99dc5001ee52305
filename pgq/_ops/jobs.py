"""Operations of producers and workers: enqueue, claim, and the fenced acknowledgements (complete,
fail, heartbeat, snooze), the lease check, and the rescue of expired leases."""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import psycopg

from .. import bounds
from ..errors import InvalidJob
from ..models import (
    STATUS_BY_VALUE,
    Claim,
    Job,
    JobSpec,
    JobStatus,
    TracedJobSpec,
    claims_from_tuples,
    delay_seconds,
    encode_json,
)
from .core import (
    Fetch,
    K,
    Operation,
    Steps,
    Stmt,
    _check_lost,
    _clean_text,
    _text_list,
)


def enqueue(specs: Sequence[JobSpec]) -> Operation[list[int]]:
    """Enqueue `specs`; returns one id per spec, in order. Jobs without dedupe keys or dependencies
    are plain INSERTs (job_insert_one, job_insert); any dedupe key sends the batch through
    pgq.enqueue_many (job_enqueue_one, job_enqueue), where the dedupe and watermark rules live; jobs
    with `depends_on` go through pgq.enqueue_after (job_enqueue_after). One statement, or two in one
    transaction for a batch that mixes dependencies and dedupe keys.

    Deduplicated specs (all with a dedupe_key) are retry-safe: re-running returns the same ids.
    """
    # Uniqueness variants (revision 0018) go through pgq.enqueue_unique, the others as before.
    if any(s.uniqueness for s in specs):
        return _enqueue_with_uniqueness(specs)
    # Sequenced jobs are chained by pgq.enqueue_after (revision 0017), as jobs with dependencies are.
    if any(s.depends_on is not None or s.sequence_key is not None for s in specs):
        return _enqueue_with_dependencies(specs)

    def steps() -> Steps[list[int]]:
        return (yield from _enqueue_steps(specs))

    return Operation("job_enqueue", steps, retry_safe=all(s.dedupe_key is not None for s in specs))


def enqueue_traced(specs: Sequence[JobSpec], contexts: Sequence[str | None]) -> Operation[list[int]]:
    """`enqueue`, then the W3C trace context of each new job stored with it in the same transaction
    (pgq.otel): `contexts` holds one JSON object text (or None) per spec. A deduplicated spec that
    returned an older job's id leaves that job's context alone (pgq.trace_context_set). Without any
    context (a tracer that records nothing) it is `enqueue` itself."""
    inner = enqueue(specs)
    if all(c is None for c in contexts):
        return inner

    def steps() -> Steps[list[int]]:
        ids = yield from inner.steps()
        yield from _trace_context_set(ids, list(contexts))
        return ids

    return Operation("job_enqueue", steps, transaction=True)


def _trace_context_set(ids: list[int], contexts: list[str | None]) -> Steps[None]:
    if any(c is not None for c in contexts):
        yield Stmt("job_trace_context_set", {"ids": ids, "contexts": contexts}, fetch="none")


def trace_context_get(ids: Sequence[int]) -> Operation[dict[int, str]]:
    """The stored trace contexts (JSON object text) of jobs `ids`: {id: context} for those that have
    one."""
    wanted = list(ids)

    def steps() -> Steps[dict[int, str]]:
        if not wanted:
            return {}
        rows = yield Stmt("job_trace_context_get", {"ids": wanted}, fetch="tuples")
        return {row[0]: row[1] for row in rows}

    return Operation("job_trace_context_get", steps, retry_safe=True)


def _enqueue_steps(specs: Sequence[JobSpec]) -> Steps[list[int]]:
    """The statement of `enqueue` for specs without dependencies."""
    if not specs:
        return []
    if len(specs) == 1:
        s = specs[0]
        rows = yield Stmt("job_insert_one" if s.dedupe_key is None else "job_enqueue_one", {
            "kind": s.kind, "payload": s.payload_json, "queue": s.queue, "priority": s.priority,
            "run_at": s.run_at, "delay": s.delay_s, "dedupe_key": s.dedupe_key, "watermark": s.watermark,
            "max_attempts": s.max_attempts, "group_key": s.group_key,
        }, fetch="tuples")
    elif all(s.dedupe_key is None for s in specs):
        rows = yield Stmt("job_insert", _insert_params(specs), fetch="tuples")
        return sorted(row[0] for row in rows)  # ids follow input order (sql/job_insert.sql)
    else:
        rows = yield Stmt("job_enqueue", _enqueue_params(specs), fetch="tuples")
    return [row[0] for row in rows]  # the id comes first in each row


def _enqueue_with_dependencies(specs: Sequence[JobSpec]) -> Operation[list[int]]:
    """`enqueue` of a batch in which some jobs have `depends_on`: those (and the others without a
    dedupe key) through job_enqueue_after; jobs with dedupe keys through job_enqueue, in the same
    transaction. A parent id that is no job raises ForeignKeyViolation and writes nothing."""
    keyed = [i for i, s in enumerate(specs) if s.dedupe_key is not None]
    rest = [i for i, s in enumerate(specs) if s.dedupe_key is None]

    def steps() -> Steps[list[int]]:
        ids: list[int] = [0] * len(specs)
        if keyed:
            keyed_ids = yield from _enqueue_steps([specs[i] for i in keyed])
            for i, job_id in zip(keyed, keyed_ids, strict=True):
                ids[i] = job_id
        rows = yield Stmt("job_enqueue_after", _enqueue_after_params([specs[i] for i in rest]), fetch="tuples")
        for i, row in zip(rest, rows, strict=True):
            ids[i] = row[0]
        return ids

    return Operation("job_enqueue", steps, transaction=bool(keyed))


def _enqueue_with_uniqueness(specs: Sequence[JobSpec]) -> Operation[list[int]]:
    """`enqueue` of a batch in which some jobs have unique_for, on_conflict 'replace' or debounce:
    those through job_enqueue_unique (one statement), the others as `enqueue` sends them, in the
    same transaction."""
    unique = [i for i, s in enumerate(specs) if s.uniqueness]
    rest = [i for i, s in enumerate(specs) if not s.uniqueness]
    inner = enqueue([specs[i] for i in rest]) if rest else None

    def steps() -> Steps[list[int]]:
        ids: list[int] = [0] * len(specs)
        u = [specs[i] for i in unique]
        rows = yield Stmt("job_enqueue_unique", {
            **_job_columns(u),
            "dedupe_keys": [s.dedupe_key for s in u],
            "unique_fors": [None if s.unique_for is None else delay_seconds(s.unique_for) for s in u],
            "replaces": [s.on_conflict == "replace" or s.debounce is not None for s in u],
            "debounces": [None if s.debounce is None else delay_seconds(s.debounce) for s in u],
        }, fetch="tuples")
        for i, row in zip(unique, rows, strict=True):
            ids[i] = row[0]
        if inner is not None:
            rest_ids = yield from inner.steps()
            for i, job_id in zip(rest, rest_ids, strict=True):
                ids[i] = job_id
        return ids

    return Operation("job_enqueue", steps, transaction=bool(rest),
                     retry_safe=all(s.dedupe_key is not None for s in specs))


def _enqueue_after_params(specs: Sequence[JobSpec]) -> dict[str, Any]:
    """Parameters of job_enqueue_after: one element per job, and the dependencies as an edge list
    (1-based position of the job in the batch, parent id)."""
    edge_jobs: list[int] = []
    edge_parents: list[int] = []
    for position, s in enumerate(specs, 1):
        for parent in s.depends_on or ():
            edge_jobs.append(position)
            edge_parents.append(parent)
    return {
        **_job_columns(specs),
        "run_on_failure": [s.on_parent_failure == "run" for s in specs],
        "edge_jobs": edge_jobs,
        "edge_parents": edge_parents,
        "sequence_keys": [s.sequence_key for s in specs],
        "sequence_continue": [s.sequence_on_failure == "continue" for s in specs],
    }


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
        ("group_keys", [s.group_key for s in specs]),
    )
    for array, values in optional:
        params[array] = None if values.count(None) == len(values) else values
    return params


def _job_columns(specs: Sequence[JobSpec]) -> dict[str, Any]:
    """The arrays of a job's own columns, one element per spec, that pgq.enqueue_many and
    pgq.enqueue_after both take."""
    return {
        "kinds": [s.kind for s in specs],
        "payloads": [s.payload_json for s in specs],
        "queues": [s.queue for s in specs],
        "priorities": [s.priority for s in specs],
        "run_ats": [s.run_at for s in specs],
        "delays": [s.delay_s for s in specs],
        "max_attempts": [s.max_attempts for s in specs],
        "group_keys": [s.group_key for s in specs],
    }


def _enqueue_params(specs: Sequence[JobSpec]) -> dict[str, Any]:
    """Parameters of job_enqueue: the job columns, dedupe keys and watermarks."""
    return {
        **_job_columns(specs),
        "dedupe_keys": [s.dedupe_key for s in specs],
        "watermarks": [s.watermark for s in specs],
    }


CLAIM_CHUNK = 1024
"""The most jobs one claim statement asks for. pgq.claim takes up to 1,024 rows when it runs alone in
its queue (it locks them), but at most CLAIM_RESERVED when other claims of the queue are under way:
then it reserves each row with a transaction-level advisory lock, an entry of PostgreSQL's shared,
finite lock table (max_locks_per_transaction x max_connections entries). A bigger claim is sent as
several statements, one after the other on the same connection, until one comes back short."""
CLAIM_RESERVED = 256
"""The most rows pgq.claim takes when it reserves them (revision 0024)."""


def claim(
    *,
    worker: str,
    queues: Sequence[str] | None,
    kinds: Sequence[str] | None,
    limit: int,
    lease: dt.timedelta | float,
) -> Operation[list[Claim]]:
    """Claim up to `limit` ready jobs of `queues` (all queues when None) and `kinds` (any when None),
    honouring pauses and concurrency and rate limits exactly; returns them in claim order (priority,
    run_at, id). One statement per CLAIM_CHUNK jobs (sql/job_claim.sql: pgq.claim), each committed
    on its own. Not retry-safe: a lost reply may hide claims, which are then rescued when their
    lease expires.
    """
    lease_s = bounds.lease_s("lease", lease)
    if isinstance(limit, bool) or not isinstance(limit, int) or limit < 1:
        raise InvalidJob(f"limit must be an int >= 1, got {limit!r}")
    if not isinstance(worker, str) or not worker:
        raise InvalidJob("worker must be a non-empty str")
    queue_list = _text_list("queues", queues)
    kind_list = _text_list("kinds", kinds)
    lease_td = dt.timedelta(seconds=lease_s)

    def chunk(before: list[Claim]) -> Operation[list[Claim]]:
        wanted = min(limit - len(before), CLAIM_CHUNK)

        def steps() -> Steps[list[Claim]]:
            rows = yield Stmt("job_claim", {"queues": queue_list, "kinds": kind_list, "limit": wanted,
                                            "lease_s": lease_s, "worker": worker}, fetch="tuples")
            # The statement returns its rows in claim order (priority, run_at, id) already.
            return before + claims_from_tuples(rows, lease_td)

        def then(got: list[Claim]) -> Operation[list[Claim]] | None:
            # A short chunk means nothing more is ready now; one of CLAIM_RESERVED rows may only
            # mean that the claim reserved (another claim of the queue was under way).
            new = len(got) - len(before)
            full = new in (wanted, CLAIM_RESERVED)
            return chunk(got) if full and len(got) < limit else None

        return Operation("job_claim", steps, then=then)

    return chunk([])


def complete(
    items: Sequence[tuple[Claim, Any, int | None]], *, raise_lost: bool, progress: Mapping[int, str] | None = None,
    follow_ups: Mapping[int, Sequence[JobSpec]] | None = None, busy: set[int] | None = None,
) -> Operation[dict[int, JobStatus]]:
    """Finish attempts successfully: `(claim, result, watermark)` each; watermark None means the
    watermark the job had when claimed. Returns {job id: new status} for the attempts that still
    held their lease (succeeded, or queued for a dirty re-run). Attempts that lost their lease are
    left unchanged; with `raise_lost` they raise LeaseLost (after the others were completed).
    `progress`: progress to store with some of them (job id -> JSON text). `follow_ups`: jobs to
    enqueue for some of them (job id -> specs), inserted in the same transaction for each job that
    succeeded, and only for those: not for a lost lease, nor for a dirty re-run (not with
    `raise_lost`, whose exception would roll them back).

    `busy`: what to do with attempts whose row another transaction holds locked (a producer's open
    transaction, an operator's). None: one statement that waits for them (rows locked in id order).
    A set (a worker's own acknowledgements): wait at most ACK_LOCK_TIMEOUT, then send the batch
    through job_complete_skip.sql, which skips held rows; their ids are added to the set and left
    out of the result, and they are not lost (send them again later)."""
    ids = [c.job.id for c, _, _ in items]
    wanted = _follow_ups_of(ids, follow_ups, raise_lost)
    params: dict[str, Any] = {
        "ids": ids,
        "tokens": [c.token for c, _, _ in items],
        "results": [None if r is None else encode_json("result", r, None) for _, r, _ in items],
        "watermarks": [c.job.input_watermark if w is None else w for c, _, w in items],
        "progress": _progress_param(ids, progress),
        "wait": False,
    }

    def steps() -> Steps[dict[int, JobStatus]]:
        if not items:
            return {}
        first = yield from _at_once("job_complete", params, busy, bool(wanted), fetch="tuples")
        # (id, status, woke) each; the status is NULL for a row the _skip statement found held.
        rows = first if first is not None else (yield Stmt("job_complete_skip", params, fetch="tuples"))
        done = {row[0]: STATUS_BY_VALUE[row[1]] for row in rows if row[1] is not None}
        # A row per job: only a batch with held rows has any to skip (a second pass per job otherwise).
        skipped = [row[0] for row in rows if row[1] is None] if len(done) != len(rows) else []
        if wanted:
            yield from _enqueue_follow_ups(wanted, (i for i, s in done.items() if s == JobStatus.SUCCEEDED))
        return _busy_or_lost("complete", params["ids"], done, skipped, busy, raise_lost)

    return Operation("job_complete", steps, transaction=bool(wanted))


def _follow_ups_of(ids: list[int], follow_ups: Mapping[int, Sequence[JobSpec]] | None,
                   raise_lost: bool) -> dict[int, Sequence[JobSpec]]:
    """The follow-up jobs of the attempts `ids` (job id -> specs), none when there are none."""
    if not follow_ups:
        return {}
    if raise_lost:
        raise ValueError("follow-up jobs need raise_lost=False")
    return {i: follow_ups[i] for i in ids if follow_ups.get(i)}


def _enqueue_follow_ups(wanted: Mapping[int, Sequence[JobSpec]], ended: Iterable[int]) -> Steps[None]:
    """Enqueue the follow-up jobs of the attempts `ended` (in the acknowledgement's transaction)."""
    specs = [spec for i in sorted(ended) for spec in wanted.get(i, ())]
    if specs:
        ids = yield from enqueue(specs).steps()
        # A traced worker's follow-ups carry the context of the job that enqueued them (pgq.otel).
        contexts = [spec.trace_context if isinstance(spec, TracedJobSpec) else None for spec in specs]
        yield from _trace_context_set(ids, contexts)


def fail(
    items: Sequence[tuple[Claim, str, float | None, bool]], *, raise_lost: bool,
    progress: Mapping[int, str] | None = None, follow_ups: Mapping[int, Sequence[JobSpec]] | None = None,
    busy: set[int] | None = None,
) -> Operation[dict[int, Job]]:
    """Record failed attempts: `(claim, error, retry_in seconds or None, final)` each. Returns the
    jobs that still held their lease, as updated (queued for a retry, or failed); lost leases,
    `progress` and `busy` as in `complete`. `follow_ups` as in `complete`, inserted for the jobs that failed
    for good (not for those queued for a retry)."""
    ids = [c.job.id for c, _, _, _ in items]
    wanted = _follow_ups_of(ids, follow_ups, raise_lost)
    params: dict[str, Any] = {
        "ids": ids,
        "tokens": [c.token for c, _, _, _ in items],
        "errors": [_clean_text(e) for _, e, _, _ in items],
        "retry_in": [r for _, _, r, _ in items],
        "finals": [f for _, _, _, f in items],
        "progress": _progress_param(ids, progress),
        "wait": False,
    }

    def steps() -> Steps[dict[int, Job]]:
        if not items:
            return {}
        failed, skipped = yield from _jobs_or_busy("job_fail", params, busy, bool(wanted))
        if wanted:
            yield from _enqueue_follow_ups(wanted, (i for i, j in failed.items() if j.status == JobStatus.FAILED))
        return _busy_or_lost("fail", params["ids"], failed, skipped, busy, raise_lost)

    return Operation("job_fail", steps, transaction=bool(wanted))


def heartbeat(items: Sequence[tuple[Claim, float]], *, raise_lost: bool,
              progress: Mapping[int, str] | None = None, busy: set[int] | None = None,
              wait: bool = False) -> Operation[set[int]]:
    """Renew leases: `(claim, lease seconds)` each. Returns the ids renewed; lost leases,
    `progress` and `busy` as in `complete`. Retry-safe (renewing twice only moves the expiry to the
    same place, and stores the same progress).

    `wait`: a patient renewal: one statement that waits for every row's lock (in id order) instead
    of skipping the busy ones, and runs each lease from the moment it got the row; meanwhile
    job_rescue leaves those rows alone. For rows a worker found busy; it may wait as long as the
    transaction holding them lasts."""
    ids = [c.job.id for c, _ in items]
    params: dict[str, Any] = {
        "ids": ids,
        "tokens": [c.token for c, _ in items],
        "lease_s": [s for _, s in items],
        "progress": _progress_param(ids, progress),
        "wait": wait,
    }

    def steps() -> Steps[set[int]]:
        if not items:
            return set()
        first = None if wait else (yield from _at_once("job_heartbeat", params, busy, False, fetch="tuples"))
        # (id, lease_expires_at) each; the expiry is NULL for a row the _skip statement found held.
        rows = first if first is not None else (yield Stmt("job_heartbeat_skip", params, fetch="tuples"))
        renewed = {row[0]: row[0] for row in rows if row[1] is not None}
        skipped = [row[0] for row in rows if row[1] is None]
        return set(_busy_or_lost("heartbeat", params["ids"], renewed, skipped, busy, raise_lost))

    return Operation("job_heartbeat", steps, retry_safe=True)


def snooze(items: Sequence[tuple[Claim, float]], *, raise_lost: bool,
           progress: Mapping[int, str] | None = None, busy: set[int] | None = None) -> Operation[dict[int, Job]]:
    """Requeue running attempts `delay` seconds from now without spending an attempt:
    `(claim, delay seconds)` each. Returns the jobs that still held their lease; lost leases,
    `progress` and `busy` as in `complete`."""
    ids = [c.job.id for c, _ in items]
    params: dict[str, Any] = {
        "ids": ids,
        "tokens": [c.token for c, _ in items],
        "delays": [d for _, d in items],
        "progress": _progress_param(ids, progress),
        "wait": False,
    }

    def steps() -> Steps[dict[int, Job]]:
        if not items:
            return {}
        snoozed, skipped = yield from _jobs_or_busy("job_snooze", params, busy)
        return _busy_or_lost("snooze", params["ids"], snoozed, skipped, busy, raise_lost)

    return Operation("job_snooze", steps)


def _jobs_or_busy(name: str, params: dict[str, Any], busy: set[int] | None,
                  transaction: bool = False) -> Steps[tuple[dict[int, Job], list[int]]]:
    """Run job_fail or job_snooze (see `_at_once`), or else their `_skip` statements (rows with a
    `busy` column); returns the jobs changed and the ids skipped as busy."""
    first = yield from _at_once(name, params, busy, transaction)
    if first is not None:
        return {job.id: job for job in map(Job.from_row, first)}, []
    rows = yield Stmt(f"{name}_skip", params)
    return ({row["id"]: Job.from_row(row) for row in rows if not row["busy"]},
            [row["id"] for row in rows if row["busy"]])


ACK_LOCK_TIMEOUT = "50ms"
"""How long a worker's acknowledgement or heartbeat, sent as one statement in its own transaction,
waits for a row lock another transaction holds before it is sent again through the statement that
skips held rows (`*_skip.sql`). Claims never hold a running job's row, so in practice only a
producer's or an operator's open transaction makes one wait."""


def _at_once(name: str, params: dict[str, Any], busy: set[int] | None, transaction: bool,
             fetch: Fetch = "rows") -> Steps[list[Any] | None]:
    """The acknowledgement `name` as one plain UPDATE, the cheap way (one write per row), or None
    when the caller must use `<name>_skip` instead. A caller's own use (`busy` None) waits for
    locks as long as they are held. A worker's (`busy` a set) waits at most ACK_LOCK_TIMEOUT, and
    only in a transaction of its own (not one that enqueues follow-up jobs, which a refused
    statement would abort): past that, None."""
    if busy is None:
        rows: list[Any] = yield Stmt(name, {**params, "lock_timeout": None}, fetch=fetch)
        return rows
    if transaction:
        return None
    try:
        rows = yield Stmt(name, {**params, "lock_timeout": ACK_LOCK_TIMEOUT}, fetch=fetch)
    except psycopg.errors.LockNotAvailable:
        return None
    return rows


def _busy_or_lost(operation: str, sent: list[int], done: dict[int, K], skipped: list[int],
                  busy: set[int] | None, raise_lost: bool) -> dict[int, K]:
    """Add the ids `skipped` (busy) to `busy`, then raise LeaseLost (with `raise_lost`) for the ids
    neither done nor busy."""
    if busy is not None and skipped:
        busy.update(skipped)
        if raise_lost:
            skip = set(skipped)
            return _check_lost(operation, [i for i in sent if i not in skip], done, raise_lost)
    return _check_lost(operation, sent, done, raise_lost)


def error_set(claim: Claim, error: str) -> Operation[bool]:
    """Store `error` as the last_error of `claim`'s job while its attempt still holds its lease
    (sql/job_error_set.sql): why a worker hands the attempt back. Returns whether it did (False: the
    lease was lost). Retry-safe (storing the same text twice changes nothing)."""
    params: dict[str, Any] = {"id": claim.job.id, "token": claim.token, "error": _clean_text(error)}

    def steps() -> Steps[bool]:
        rows = yield Stmt("job_error_set", params)
        return bool(rows)

    return Operation("job_error_set", steps, retry_safe=True)


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
