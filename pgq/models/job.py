"""A job as read from the database, a claimed attempt of one, and a job's dependencies."""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from .types import JSON, STATUS_BY_VALUE, JobStatus, _slot_setters


@dataclass(frozen=True, slots=True)
class Job:
    """A row of `pgq.jobs`, as read at one moment. Timestamps come from the database clock."""

    id: int
    queue: str
    kind: str
    payload: JSON
    priority: int
    status: JobStatus
    run_at: dt.datetime
    attempts: int
    max_attempts: int
    dedupe_key: str | None
    lease_token: str | None
    """The running attempt's lease token in a claim (`Claim.job`, `pgq.current_job()`); None in any
    read of a job (`Queue.get`, `list`): no role but the admin may read it (revision 0020)."""
    lease_expires_at: dt.datetime | None
    claimed_by: str | None
    last_error: str | None
    result: JSON
    input_watermark: int | None
    done_watermark: int | None
    created_at: dt.datetime
    started_at: dt.datetime | None
    finished_at: dt.datetime | None
    progress: JSON = None
    """The progress the job's handler last reported (`pgq.set_progress`), kept across attempts."""
    group_key: str | None = None
    """The job's group (`enqueue(group_key=...)`, a task's `group_by`): per-group limits and fair
    claiming apply per group key. None: no group."""
    sequence_key: str | None = None
    """The job's sequence (`enqueue(sequence_key=...)`, a task's `sequence_by`, revision 0017): jobs
    with the same key in a queue run one at a time, in enqueue order. None: none."""

    @property
    def error(self) -> str | None:
        """The error the job finished with: `last_error` while the job is failed or cancelled, None
        otherwise. A job that succeeded, or is waiting, queued or running again, did not end with
        the `last_error` of an earlier attempt: see `previous_attempt_error`."""
        return self.last_error if self.status in (JobStatus.FAILED, JobStatus.CANCELLED) else None

    @property
    def previous_attempt_error(self) -> str | None:
        """The error of an earlier attempt that is no longer the job's outcome: `last_error` while the
        job has succeeded or is waiting, queued or running again (a retry, a hand-back, a rescue),
        None otherwise. The column keeps it after a success, since a success writes no error; this
        is how the CLI, the dashboard and its API label it."""
        return None if self.status in (JobStatus.FAILED, JobStatus.CANCELLED) else self.last_error

    @property
    def lease_owner(self) -> str | None:
        """The worker that holds the running attempt's lease: `claimed_by` while the job runs, None
        otherwise (the column then names the worker of the last attempt, which holds nothing)."""
        return self.claimed_by if self.status is JobStatus.RUNNING else None

    @classmethod
    def from_row(cls, row: Mapping[str, Any]) -> Job:
        """Build a Job from a row of the job columns (see sql/job_columns in the .sql files)."""
        values = dict(row)
        values["status"] = JobStatus(values["status"])
        token = values.get("lease_token")
        values["lease_token"] = None if token is None else str(token)
        return cls(**{name: values[name] for name in cls.__slots__})

    @classmethod
    def from_tuple(cls, row: tuple[Any, ...]) -> Job:
        """Build a Job from every job column in table order (this class's field order), with
        `status` and `lease_token` read as text: the claim's fast path, one call per claimed job.
        Raises ValueError unless `row` has exactly one value per field.

        Fills the slots directly, one named setter per field: a frozen dataclass's __init__ sets
        each field through object.__setattr__, three times as slow for twenty fields, and a loop
        over the setters twice as slow as these calls."""
        (id_, queue, kind, payload, priority, status, run_at, attempts, max_attempts, dedupe_key, lease_token,
         lease_expires_at, claimed_by, last_error, result, input_watermark, done_watermark, created_at,
         started_at, finished_at, progress, group_key, sequence_key) = row
        job = object.__new__(cls)
        _SET_JOB_ID(job, id_)
        _SET_JOB_QUEUE(job, queue)
        _SET_JOB_KIND(job, kind)
        _SET_JOB_PAYLOAD(job, payload)
        _SET_JOB_PRIORITY(job, priority)
        _SET_JOB_STATUS(job, STATUS_BY_VALUE[status])
        _SET_JOB_RUN_AT(job, run_at)
        _SET_JOB_ATTEMPTS(job, attempts)
        _SET_JOB_MAX_ATTEMPTS(job, max_attempts)
        _SET_JOB_DEDUPE_KEY(job, dedupe_key)
        _SET_JOB_LEASE_TOKEN(job, lease_token)
        _SET_JOB_LEASE_EXPIRES_AT(job, lease_expires_at)
        _SET_JOB_CLAIMED_BY(job, claimed_by)
        _SET_JOB_LAST_ERROR(job, last_error)
        _SET_JOB_RESULT(job, result)
        _SET_JOB_INPUT_WATERMARK(job, input_watermark)
        _SET_JOB_DONE_WATERMARK(job, done_watermark)
        _SET_JOB_CREATED_AT(job, created_at)
        _SET_JOB_STARTED_AT(job, started_at)
        _SET_JOB_FINISHED_AT(job, finished_at)
        _SET_JOB_PROGRESS(job, progress)
        _SET_JOB_GROUP_KEY(job, group_key)
        _SET_JOB_SEQUENCE_KEY(job, sequence_key)
        return job


# In field order (id ... progress, group_key, sequence_key).
(_SET_JOB_ID, _SET_JOB_QUEUE, _SET_JOB_KIND, _SET_JOB_PAYLOAD, _SET_JOB_PRIORITY, _SET_JOB_STATUS, _SET_JOB_RUN_AT,
 _SET_JOB_ATTEMPTS, _SET_JOB_MAX_ATTEMPTS, _SET_JOB_DEDUPE_KEY, _SET_JOB_LEASE_TOKEN, _SET_JOB_LEASE_EXPIRES_AT,
 _SET_JOB_CLAIMED_BY, _SET_JOB_LAST_ERROR, _SET_JOB_RESULT, _SET_JOB_INPUT_WATERMARK, _SET_JOB_DONE_WATERMARK,
 _SET_JOB_CREATED_AT, _SET_JOB_STARTED_AT, _SET_JOB_FINISHED_AT, _SET_JOB_PROGRESS,
 _SET_JOB_GROUP_KEY, _SET_JOB_SEQUENCE_KEY) = _slot_setters(Job).values()


@dataclass(frozen=True, slots=True)
class Claim:
    """One claimed attempt of a job: the job as claimed and the lease token that fences it.

    `lease` is the lease duration the claim was made with; heartbeats renew by the same amount
    unless told otherwise.
    """

    job: Job
    token: str
    lease: dt.timedelta

    @property
    def id(self) -> int:
        """The job's id."""
        return self.job.id


def claims_from_tuples(rows: Iterable[tuple[Any, ...]], lease: dt.timedelta) -> list[Claim]:
    """The claims of the rows a claim statement returned (each as `Job.from_tuple` reads it), in the
    same order, each fenced by the lease token of its row. Raises ValueError for a row without one
    value per job field.

    Fills each Claim's slots directly, as Job.from_tuple does: this runs once per claimed job, and
    the dataclass __init__ (three object.__setattr__ calls) was a third of the Claim's cost."""
    new, from_tuple = object.__new__, Job.from_tuple
    set_job, set_token, set_lease = _SET_CLAIM_JOB, _SET_CLAIM_TOKEN, _SET_CLAIM_LEASE
    claims = []
    for row in rows:
        job = from_tuple(row)
        claim = new(Claim)
        set_job(claim, job)
        set_token(claim, job.lease_token or "")
        set_lease(claim, lease)
        claims.append(claim)
    return claims


_SET_CLAIM_JOB, _SET_CLAIM_TOKEN, _SET_CLAIM_LEASE = _slot_setters(Claim).values()


# -- dependencies (revision 0007) ---------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Dependency:
    """One dependency of a job, seen from it: the other job (a parent it depends on, or a child that
    depends on it), as read at one moment.

    `kind` and `status` are None when that job no longer exists (retention deleted a finished parent,
    whose dependency rows stay; or the job was deleted by hand). `needs_success`: the child is
    cancelled if the parent fails or is cancelled (False: enqueued with on_parent_failure "run", it
    runs whatever the outcome). `parent_outcome`: how the parent finished, recorded when it did;
    None while it has not.
    """

    id: int
    kind: str | None
    status: JobStatus | None
    needs_success: bool
    parent_outcome: JobStatus | None
    sequence_hold: bool | None = None
    """None: an edge of depends_on. Otherwise a sequence edge (revision 0017: the child is the next
    job of the parent's sequence): True, the parent failing for good holds the child; False, the
    parent was enqueued with sequence_on_failure "continue"."""


@dataclass(frozen=True, slots=True)
class Dependencies:
    """A job's parents and children (`Queue.dependencies`), read in one statement.

    `parents` and `children` hold at most the limit asked for, lowest ids first; `parent_count` and
    `child_count` count them all. `pending_parents` is the job's counter of parents it still waits
    for (None: enqueued without depends_on): above 0 while the job is waiting; a job cancelled
    while it waited keeps the count it had.
    """

    job_id: int
    status: JobStatus
    pending_parents: int | None
    parents: tuple[Dependency, ...]
    children: tuple[Dependency, ...]
    parent_count: int
    child_count: int

    @property
    def unfinished_parents(self) -> tuple[Dependency, ...]:
        """The parents among `parents` that have not finished yet (no recorded outcome): those a
        waiting job waits for."""
        return tuple(p for p in self.parents if p.parent_outcome is None)

    @property
    def held_by(self) -> int | None:
        """For a waiting job of a sequence, the job before it in its sequence that it still waits for
        (running, queued, waiting, or failed and holding it); None otherwise."""
        if self.status is not JobStatus.WAITING:
            return None
        return next((p.id for p in self.unfinished_parents if p.sequence_hold is not None), None)

    @classmethod
    def from_rows(cls, rows: Iterable[Mapping[str, Any]]) -> Dependencies | None:
        """Build from the rows of sql/job_dependencies.sql (a row per relation: 'job', 'parent',
        'child'); None when there is no 'job' row, i.e. no such job."""
        job: Mapping[str, Any] | None = None
        edges: dict[str, list[Dependency]] = {"parent": [], "child": []}
        for row in rows:
            if row["relation"] == "job":
                job = row
                continue
            status, outcome = row["status"], row["parent_outcome"]
            edges[row["relation"]].append(Dependency(
                int(row["id"]), row["kind"], None if status is None else JobStatus(status),
                bool(row["needs_success"]), None if outcome is None else JobStatus(outcome),
                row.get("sequence_hold")))
        if job is None:
            return None
        return cls(int(job["id"]), JobStatus(job["status"]), job["pending_parents"], tuple(edges["parent"]),
                   tuple(edges["child"]), int(job["parent_count"]), int(job["child_count"]))
