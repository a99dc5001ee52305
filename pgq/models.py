"""Data types of pgq's public API: Job, JobStatus, JobSpec, Claim."""

from __future__ import annotations

import datetime as dt
import enum
import json
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, fields, is_dataclass
from json.encoder import c_make_encoder, encode_basestring_ascii  # type: ignore[attr-defined]
from typing import Any, NoReturn

from .bounds import check_depth
from .errors import InvalidJob

JSON = Any
"""A value `json.dumps` accepts (dict, list, str, int, float, bool, None)."""

PRIORITY_MIN = -32768
PRIORITY_MAX = 32767
MAX_PAYLOAD_BYTES = 1_000_000
"""Largest accepted payload, in bytes of JSON text. Jobs carry arguments, not documents."""


class JobStatus(enum.StrEnum):
    """Status of a job; the values equal those of the SQL enum `pgq.job_status`."""

    WAITING = "waiting"
    """Enqueued with `depends_on`: waits until its parents have finished (revision 0007)."""
    QUEUED = "queued"
    RUNNING = "running"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    CANCELLED = "cancelled"

    @classmethod
    def parse(cls, value: str | JobStatus) -> JobStatus:
        """Return the status named `value`; raise InvalidJob naming the valid ones otherwise."""
        try:
            return cls(value)
        except ValueError:
            valid = ", ".join(s.value for s in cls)
            raise InvalidJob(f"unknown status {value!r} (expected one of: {valid})") from None


STATUS_BY_VALUE: dict[str, JobStatus] = {s.value: s for s in JobStatus}
"""JobStatus by its SQL value: a dict lookup, cheaper than calling the enum on hot paths."""
ACTIVE = (JobStatus.WAITING, JobStatus.QUEUED, JobStatus.RUNNING)
FINISHED = (JobStatus.SUCCEEDED, JobStatus.FAILED, JobStatus.CANCELLED)


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


def _slot_setters(cls: type) -> dict[str, Callable[[Any, Any], None]]:
    """The `__set__` of each field's slot of a slotted dataclass, by name in field order: what fills
    a frozen instance without object.__setattr__ (about three times as fast)."""
    return {f.name: getattr(cls, f.name).__set__ for f in fields(cls)}


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


# The longest unique_for (revision 0018): pgq.key_finishes forgets purged keys older than this.
MAX_UNIQUE_FOR_S = 31 * 86400.0


@dataclass(frozen=True, slots=True, init=False)
class JobSpec:
    """One job to enqueue: the arguments of `Queue.enqueue`, validated on construction.

    Raises InvalidJob for an empty kind or queue, a payload that is not JSON-serializable or too
    large, text with NUL characters, a priority outside smallint, a negative delay, both `run_at`
    and `delay`, max_attempts < 1, `depends_on` that is not a list of job ids or comes with a
    dedupe_key or watermark, or `on_parent_failure` other than "cancel" or "run".

    `depends_on`: ids of jobs this one waits for (status waiting) until every one has finished; it
    runs if they all succeeded, and is cancelled as soon as one fails or is cancelled, unless
    `on_parent_failure` is "run" (then it runs once they all finished, whatever the outcome: a batch
    callback). Kept as a tuple without duplicates; an empty list is no dependency.

    `group_key`: the job's group (a tenant, a customer; non-empty text): per-group limits
    (`Queue.set_group_limits`) and fair claiming apply per group key.

    `sequence_key`: the job's sequence (non-empty text; revision 0017): jobs with the same key in a
    queue run one at a time, in enqueue order; not with a dedupe_key or watermark.
    `sequence_on_failure`: "hold" (the job failing for good holds the rest of its sequence until it
    is retried or cancelled) or "continue" (the sequence moves on).

    Uniqueness variants of `dedupe_key` (revision 0018; none with watermark, depends_on or
    sequence_key): `unique_for` (a positive duration, at most 31 days): the key also dedupes against
    its job that finished less than that long ago; `on_conflict`: "ignore" (the default: the active
    job's id is returned, nothing changes) or "replace" (a job of the key not started yet takes this payload,
    priority and run_at; behind a running one a new job is added that waits for it); `debounce` (a
    positive duration): "replace" with run_at now + debounce (database clock; not with run_at or
    delay). unique_for cannot be combined with "replace" or debounce.
    """

    kind: str
    payload: JSON = None
    queue: str = "default"
    priority: int = 0
    run_at: dt.datetime | None = None
    delay: dt.timedelta | float | None = None
    dedupe_key: str | None = None
    watermark: int | None = None
    max_attempts: int | None = None
    depends_on: tuple[int, ...] | None = None
    on_parent_failure: str = "cancel"
    group_key: str | None = None
    sequence_key: str | None = None
    sequence_on_failure: str = "hold"
    unique_for: dt.timedelta | float | None = None
    on_conflict: str | None = None
    debounce: dt.timedelta | float | None = None
    payload_json: str = field(init=False, repr=False, compare=False)

    def __init__(
        self,
        kind: str,
        payload: JSON = None,
        queue: str = "default",
        priority: int = 0,
        run_at: dt.datetime | None = None,
        delay: dt.timedelta | float | None = None,
        dedupe_key: str | None = None,
        watermark: int | None = None,
        max_attempts: int | None = None,
        depends_on: Iterable[int] | None = None,
        on_parent_failure: str = "cancel",
        group_key: str | None = None,
        sequence_key: str | None = None,
        sequence_on_failure: str = "hold",
        unique_for: dt.timedelta | float | None = None,
        on_conflict: str | None = None,
        debounce: dt.timedelta | float | None = None,
    ) -> None:
        # The __init__ dataclass would write for these fields, filling the slots directly: a frozen
        # dataclass's own sets each one through object.__setattr__, which took a third of the time
        # of building a spec (batch enqueues build thousands).
        _SET_SPEC_KIND(self, kind)
        _SET_SPEC_PAYLOAD(self, payload)
        _SET_SPEC_QUEUE(self, queue)
        _SET_SPEC_PRIORITY(self, priority)
        _SET_SPEC_RUN_AT(self, run_at)
        _SET_SPEC_DELAY(self, delay)
        _SET_SPEC_DEDUPE_KEY(self, dedupe_key)
        _SET_SPEC_WATERMARK(self, watermark)
        _SET_SPEC_MAX_ATTEMPTS(self, max_attempts)
        _SET_SPEC_DEPENDS_ON(self, None if depends_on is None else _job_ids(depends_on))
        _SET_SPEC_ON_PARENT_FAILURE(self, on_parent_failure)
        _SET_SPEC_GROUP_KEY(self, group_key)
        _SET_SPEC_SEQUENCE_KEY(self, sequence_key)
        _SET_SPEC_SEQUENCE_ON_FAILURE(self, sequence_on_failure)
        _SET_SPEC_UNIQUE_FOR(self, unique_for)
        _SET_SPEC_ON_CONFLICT(self, on_conflict)
        _SET_SPEC_DEBOUNCE(self, debounce)
        # The checks, on the arguments (locals are cheaper to read than slots).
        # The common job (plain str names, an int priority, no options) passes three cheap tests; batch
        # enqueues build thousands of specs, so anything else takes the detailed checks below.
        if not (type(kind) is str and kind and "\x00" not in kind
                and type(queue) is str and queue and "\x00" not in queue):
            _check_text("kind", kind, required=True)
            _check_text("queue", queue, required=True)
        if type(priority) is not int or not PRIORITY_MIN <= priority <= PRIORITY_MAX:
            _check_priority(priority)
        if (run_at is not None or delay is not None or dedupe_key is not None or watermark is not None
                or max_attempts is not None or depends_on is not None or on_parent_failure != "cancel"
                or group_key is not None or sequence_key is not None or sequence_on_failure != "hold"
                or unique_for is not None or on_conflict is not None or debounce is not None):
            self._check_options()
        _SET_SPEC_PAYLOAD_JSON(self, encode_json("payload", payload, {}))

    def _check_options(self) -> None:
        if self.dedupe_key is not None:
            _check_text("dedupe_key", self.dedupe_key, required=True)
        if self.group_key is not None:
            _check_text("group_key", self.group_key, required=True)
        if self.run_at is not None and self.delay is not None:
            raise InvalidJob("give run_at or delay, not both")
        if self.run_at is not None and (
            not isinstance(self.run_at, dt.datetime) or self.run_at.tzinfo is None
        ):
            raise InvalidJob("run_at must be a timezone-aware datetime")
        if self.delay is not None and delay_seconds(self.delay) < 0:
            raise InvalidJob(f"delay must not be negative, got {self.delay!r}")
        if self.watermark is not None and (
            isinstance(self.watermark, bool) or not isinstance(self.watermark, int)
        ):
            raise InvalidJob("watermark must be an int")
        if self.max_attempts is not None and (
            isinstance(self.max_attempts, bool) or not isinstance(self.max_attempts, int)
            or self.max_attempts < 1
        ):
            raise InvalidJob(f"max_attempts must be an int >= 1, got {self.max_attempts!r}")
        if self.on_parent_failure not in ("cancel", "run"):
            raise InvalidJob(f"on_parent_failure must be 'cancel' or 'run', got {self.on_parent_failure!r}")
        if self.depends_on and (self.dedupe_key is not None or self.watermark is not None):
            raise InvalidJob("depends_on cannot be combined with dedupe_key or watermark")
        if self.sequence_key is not None:
            _check_text("sequence_key", self.sequence_key, required=True)
            if self.dedupe_key is not None or self.watermark is not None:
                raise InvalidJob("sequence_key cannot be combined with dedupe_key or watermark")
        if self.sequence_on_failure not in ("hold", "continue"):
            raise InvalidJob(f"sequence_on_failure must be 'hold' or 'continue', got {self.sequence_on_failure!r}")
        if self.unique_for is not None or self.on_conflict is not None or self.debounce is not None:
            self._check_uniqueness()

    def _check_uniqueness(self) -> None:
        if self.on_conflict not in (None, "ignore", "replace"):
            raise InvalidJob(f"on_conflict must be 'ignore' or 'replace', got {self.on_conflict!r}")
        for name, value in (("unique_for", self.unique_for), ("debounce", self.debounce)):
            if value is not None and delay_seconds(value) <= 0:
                raise InvalidJob(f"{name} must be a positive duration, got {_duration_shown(value)}")
        if self.unique_for is not None and delay_seconds(self.unique_for) > MAX_UNIQUE_FOR_S:
            raise InvalidJob(f"unique_for must be at most 31 days, got {_duration_shown(self.unique_for)}")
        if self.dedupe_key is None:
            raise InvalidJob("unique_for, on_conflict and debounce need a dedupe_key")
        if self.watermark is not None or self.depends_on is not None or self.sequence_key is not None:
            raise InvalidJob("unique_for, on_conflict and debounce cannot be combined with watermark, depends_on "
                             "or sequence_key")
        if self.unique_for is not None and (self.on_conflict == "replace" or self.debounce is not None):
            raise InvalidJob("unique_for cannot be combined with on_conflict='replace' or debounce")
        if self.debounce is not None and self.on_conflict == "ignore":
            raise InvalidJob("debounce replaces the queued job: not with on_conflict='ignore'")
        if self.debounce is not None and (self.run_at is not None or self.delay is not None):
            raise InvalidJob("debounce sets run_at: not with run_at or delay")

    @property
    def delay_s(self) -> float | None:
        """The delay in seconds, or None."""
        return None if self.delay is None else delay_seconds(self.delay)

    @property
    def uniqueness(self) -> bool:
        """Whether the job goes through pgq.enqueue_unique (unique_for, replace or debounce)."""
        return self.unique_for is not None or self.on_conflict == "replace" or self.debounce is not None


# In field order (kind ... on_parent_failure, group_key, sequence_key, sequence_on_failure, then payload_json).
(_SET_SPEC_KIND, _SET_SPEC_PAYLOAD, _SET_SPEC_QUEUE, _SET_SPEC_PRIORITY, _SET_SPEC_RUN_AT, _SET_SPEC_DELAY,
 _SET_SPEC_DEDUPE_KEY, _SET_SPEC_WATERMARK, _SET_SPEC_MAX_ATTEMPTS, _SET_SPEC_DEPENDS_ON,
 _SET_SPEC_ON_PARENT_FAILURE, _SET_SPEC_GROUP_KEY, _SET_SPEC_SEQUENCE_KEY, _SET_SPEC_SEQUENCE_ON_FAILURE,
 _SET_SPEC_UNIQUE_FOR, _SET_SPEC_ON_CONFLICT, _SET_SPEC_DEBOUNCE,
 _SET_SPEC_PAYLOAD_JSON) = _slot_setters(JobSpec).values()


@dataclass(frozen=True, slots=True, init=False)
class TracedJobSpec(JobSpec):
    """A JobSpec with the W3C trace context (a JSON object's text) of the span that enqueues it: the
    follow-up jobs of an instrumented worker (pgq.otel), whose acknowledgement stores the context
    with each job it inserts. Built with `traced`."""

    trace_context: str = field(default="", compare=False)

    @classmethod
    def traced(cls, spec: JobSpec, trace_context: str) -> TracedJobSpec:
        """`spec` (already validated), carrying `trace_context`."""
        copy = object.__new__(cls)
        for setter, value in zip(_SPEC_SETTERS, (getattr(spec, name) for name in _SPEC_FIELDS), strict=True):
            setter(copy, value)
        _SET_TRACE_CONTEXT(copy, trace_context)
        return copy


_SPEC_FIELDS = tuple(_slot_setters(JobSpec))
_SPEC_SETTERS = tuple(_slot_setters(JobSpec).values())
_SET_TRACE_CONTEXT = _slot_setters(TracedJobSpec)["trace_context"]


def _check_priority(priority: object) -> None:
    """Raise InvalidJob unless `priority` is an int (not a bool) within smallint."""
    if isinstance(priority, bool) or not isinstance(priority, int):
        raise InvalidJob(f"priority must be an int, got {type(priority).__name__}")
    if not PRIORITY_MIN <= priority <= PRIORITY_MAX:
        raise InvalidJob(f"priority {priority} out of range [{PRIORITY_MIN}, {PRIORITY_MAX}]")


def _job_ids(values: Iterable[int]) -> tuple[int, ...] | None:
    """`depends_on` as a tuple of distinct job ids in first-seen order (None when empty); raises
    InvalidJob for a str, a non-iterable, or an element that is not an int >= 1."""
    if isinstance(values, str | bytes) or not isinstance(values, Iterable):
        raise InvalidJob(f"depends_on must be a list of job ids, got {type(values).__name__}")
    try:
        ids = tuple(dict.fromkeys(values))
    except TypeError:
        raise InvalidJob("depends_on must hold job ids (int >= 1)") from None
    for job_id in ids:
        if isinstance(job_id, bool) or not isinstance(job_id, int) or job_id < 1:
            raise InvalidJob(f"depends_on must hold job ids (int >= 1), got {job_id!r}")
    return ids or None


def delay_seconds(value: dt.timedelta | float | int) -> float:
    """Return a delay given as timedelta or seconds as float seconds; raise InvalidJob otherwise."""
    if isinstance(value, dt.timedelta):
        return value.total_seconds()
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise InvalidJob(f"a duration must be a timedelta or seconds, got {type(value).__name__}")
    return float(value)


def _duration_shown(value: object) -> str:
    # A timedelta as seconds (its repr, datetime.timedelta(0), reads badly in an error message).
    if not isinstance(value, dt.timedelta):
        return repr(value)
    seconds = value.total_seconds()
    return f"{seconds / 86400:g} days" if abs(seconds) >= 86400 else f"{seconds:g} s"


def positive_seconds(name: str, value: dt.timedelta | float | int) -> float:
    """Return `value` in seconds; raise InvalidJob unless it is > 0."""
    seconds = delay_seconds(value)
    if not seconds > 0:
        raise InvalidJob(f"{name} must be positive, got {value!r}")
    return seconds


def encode_json(what: str, value: JSON, default: JSON) -> str:
    """Serialize `value` (None -> `default`) to JSON text for a jsonb column.

    Raises InvalidJob if it is not JSON-serializable (NaN and infinities included: jsonb rejects
    them), contains NUL characters (Postgres text cannot hold them), exceeds MAX_PAYLOAD_BYTES, or
    nests deeper than the database accepts (pgq.bounds.MAX_JSON_DEPTH).
    """
    try:
        text = _encode(default if value is None else value)
    except (TypeError, ValueError) as exc:
        raise InvalidJob(f"{what} is not JSON-serializable: {exc}") from None
    except RecursionError:
        raise InvalidJob(f"{what} is not JSON-serializable: it contains itself (or nests too deeply)") from None
    if "\\u0000" in text and _JSON_NUL.search(text):
        raise InvalidJob(f"{what} contains a NUL character, which Postgres cannot store")
    if len(text) > MAX_PAYLOAD_BYTES and len(text.encode()) > MAX_PAYLOAD_BYTES:
        raise InvalidJob(f"{what} is {len(text.encode())} bytes of JSON; the limit is {MAX_PAYLOAD_BYTES}")
    check_depth(what, text)
    return text


def _unserializable(value: object) -> NoReturn:
    raise TypeError(f"Object of type {type(value).__name__} is not JSON serializable")


# One encoder for every call, built once: json.dumps with options builds a new one each time, and
# JSONEncoder.encode a new C encoder. Output as json.dumps(value, separators=(",", ":"),
# allow_nan=False); no circular-reference bookkeeping (a value that contains itself ends in
# RecursionError instead). Stateless, so threads may share it.
_py_encoder = json.JSONEncoder(allow_nan=False, separators=(",", ":"), check_circular=False)
_c_encoder = (
    None if c_make_encoder is None  # CPython without its _json accelerator
    else c_make_encoder(None, _unserializable, encode_basestring_ascii, None, ":", ",", False, False, False)
)


def _encode(value: JSON) -> str:
    if _c_encoder is None:  # pragma: no cover
        return _py_encoder.encode(value)
    return "".join(_c_encoder(value, 0))

# An escaped NUL in JSON text: "\u0000" not itself preceded by an escaping backslash.
_JSON_NUL = re.compile(r"(?<!\\)(?:\\\\)*\\u0000")


def group_key_from(group_by: str | None, payload: JSON, option: str = "group_by") -> str | None:
    """The group key a task declared with `group_by=field` gives a job with `payload`: the field's
    value as text (a str as it is, an int in decimal). None when `group_by` is None or the payload
    has no such field (or it is None): the job then has no group. Raises InvalidJob for a value of
    another type, or an empty str. The sequence key of `sequence_by` likewise (`option` names it)."""
    if group_by is None or not isinstance(payload, dict):
        return None
    value = payload.get(group_by)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, str | int):
        raise InvalidJob(f"{option} field {group_by!r} must hold a str or an int, got {type(value).__name__}")
    key = value if isinstance(value, str) else str(value)
    _check_text(f"{option} field {group_by!r}", key, required=True)
    return key


def _check_text(name: str, value: object, *, required: bool) -> None:
    if not isinstance(value, str):
        raise InvalidJob(f"{name} must be a str, got {type(value).__name__}")
    if required and not value:
        raise InvalidJob(f"{name} must not be empty")
    if "\x00" in value:
        raise InvalidJob(f"{name} contains a NUL character, which Postgres cannot store")


def jsonable(value: Any) -> Any:
    """`value` ready for json.dumps: datetimes as ISO 8601 text, durations as seconds, enums as their
    value, dataclasses (a Job, a Claim) as mappings of their fields, mappings and sequences converted
    through; anything else as it is."""
    if isinstance(value, dt.datetime):
        return value.isoformat()
    if isinstance(value, dt.timedelta):
        return value.total_seconds()
    if isinstance(value, enum.Enum):
        return value.value
    if isinstance(value, Mapping):
        return {str(k): jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [jsonable(v) for v in value]
    if is_dataclass(value) and not isinstance(value, type):
        return {f.name: jsonable(getattr(value, f.name)) for f in fields(value)}
    return value


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
