"""JobSpec, the job to enqueue, and its validation: the checks and the JSON encoding of what a
producer passes in."""

from __future__ import annotations

import datetime as dt
import json
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from json.encoder import c_make_encoder, encode_basestring_ascii  # type: ignore[attr-defined]
from typing import NoReturn

from .. import bounds
from ..errors import InvalidJob
from .types import JSON, MAX_PAYLOAD_BYTES, PRIORITY_MAX, PRIORITY_MIN, _slot_setters

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
        if not (type(kind) is str and kind and "\x00" not in kind and kind.isascii()
                and type(queue) is str and queue and "\x00" not in queue and queue.isascii()):
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
        if self.run_at is not None:
            bounds.check_run_at(self.run_at)
        if self.delay is not None:
            bounds.delay_s("delay", self.delay)
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
            if value is not None:
                bounds.delay_s(name, value, positive=True)
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
    if "\\ud" in text and bounds.json_has_lone_surrogate(text):
        raise InvalidJob(f"{what} contains a lone surrogate (not UTF-8), which Postgres cannot store")
    if len(text) > MAX_PAYLOAD_BYTES and len(text.encode()) > MAX_PAYLOAD_BYTES:
        raise InvalidJob(f"{what} is {len(text.encode())} bytes of JSON; the limit is {MAX_PAYLOAD_BYTES}")
    bounds.check_depth(what, text)
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
    if bounds.has_lone_surrogate(value):
        raise InvalidJob(f"{name} contains a lone surrogate (not UTF-8), which Postgres cannot store")
