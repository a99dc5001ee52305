"""The bounds of every duration, time and number a caller hands pgq (issue 40).

Every time pgq stores must be one that every reader can read: psycopg (and Python's datetime) reads
no 'infinity' and no year outside 1..9999, so a single such row used to break every listing for
everyone. The database refuses times outside the bounds itself (CHECK constraints of revision 0020),
whoever writes them; these checks refuse them in the client first, with InvalidJob, before anything
is sent:

- delays (`delay`, `debounce`, a failure's `retry_in`, a snooze): finite, at most MAX_DELAY_S
  (100 years);
- `run_at`: timezone-aware, not before RUN_AT_MIN (1900-01-01 UTC) and at most 100 years ahead (of
  this machine's clock; the database allows one more day, for clock differences);
- leases (`lease` of a claim or a heartbeat, a worker's lease and its registry refresh): finite,
  positive, at most MAX_LEASE_S (one day; the database allows one more hour of lock waits);
- `unique_for`: positive, at most 31 days (revision 0018);
- integers sent as SQL integer or bigint (limits, job ids): within those types;
- text: no lone surrogate (a str code point in U+D800..U+DFFF, which `surrogateescape` makes of
  bytes that are not UTF-8, and JSON escapes such as "\\ud800"): Postgres stores UTF-8 only.

JSON (revision 0019, issue 46):

The bounds of JSON that callers store (revision 0019), and what stands for a stored value that
cannot be decoded.

The database refuses a payload, result or progress nested more than `MAX_JSON_DEPTH` levels below
its top (the top value is level 0) or larger than `MAX_JSONB_BYTES` as jsonb, and a trace context
other than ``{"traceparent": ..., "tracestate": ...}`` with strings of at most
`MAX_TRACEPARENT_CHARS` and `MAX_TRACESTATE_CHARS` characters. The client checks the depth before
sending (`check_depth`), so a value too deep is an InvalidJob that sent nothing.

Rows written before revision 0019 (or by a superuser with the triggers disabled) may still hold a
value Python's json module cannot decode (nested past its recursion limit): pgq's jsonb loader
decodes it as an `Undecodable`, so that one such row never fails a whole claim or listing.
"""


from __future__ import annotations

import datetime as dt
import json
import math
import re
from typing import Any, Final

from .errors import InvalidJob, PgqError

__all__ = [
    "INT4_MAX",
    "INT8_MAX",
    "MAX_DELAY_S",
    "MAX_JSONB_BYTES",
    "MAX_JSON_DEPTH",
    "MAX_LEASE_S",
    "MAX_TRACEPARENT_CHARS",
    "MAX_TRACESTATE_CHARS",
    "RUN_AT_MIN",
    "Undecodable",
    "UndecodableJob",
    "check_depth",
    "check_int4",
    "check_job_id",
    "check_run_at",
    "checked",
    "delay_s",
    "has_lone_surrogate",
    "json_has_lone_surrogate",
    "lease_s",
    "undecodable_fields",
]

MAX_DELAY_S: Final = 36525 * 86400.0
"""The longest delay, debounce, retry_in or snooze: 100 years (of 365.25 days)."""
MAX_LEASE_S: Final = 86400.0
"""The longest lease of an attempt, heartbeat extension, worker lease or registry refresh: a day."""
RUN_AT_MIN: Final = dt.datetime(1900, 1, 1, tzinfo=dt.UTC)
"""The earliest run_at the database takes (revision 0020's jobs_run_at_bounded)."""
INT4_MAX: Final = 2**31 - 1
INT8_MAX: Final = 2**63 - 1


def _seconds(name: str, value: object) -> float:
    """`value` (a timedelta or a number of seconds) as float seconds; InvalidJob for another type or
    a value that is not finite."""
    if isinstance(value, dt.timedelta):
        seconds = value.total_seconds()
    elif isinstance(value, bool) or not isinstance(value, int | float):
        raise InvalidJob(f"{name} must be a timedelta or seconds, got {type(value).__name__}")
    else:
        try:
            seconds = float(value)
        except OverflowError:  # an int too large for a float
            seconds = math.inf
    if not math.isfinite(seconds):
        raise InvalidJob(f"{name} must be a finite duration, got {value!r}")
    return seconds


def _shown(value: object) -> str:
    if not isinstance(value, dt.timedelta):
        return repr(value)
    seconds = value.total_seconds()
    return f"{seconds / 86400:g} days" if abs(seconds) >= 86400 else f"{seconds:g} s"


def delay_s(name: str, value: object, *, positive: bool = False) -> float:
    """`value` in seconds; raises InvalidJob unless it is finite, >= 0 (> 0 with `positive`) and at
    most MAX_DELAY_S (100 years)."""
    seconds = _seconds(name, value)
    if positive and not seconds > 0:
        raise InvalidJob(f"{name} must be a positive duration, got {_shown(value)}")
    if seconds < 0:
        raise InvalidJob(f"{name} must not be negative, got {_shown(value)}")
    if seconds > MAX_DELAY_S:
        raise InvalidJob(f"{name} must be at most 100 years, got {_shown(value)}")
    return seconds


def lease_s(name: str, value: object) -> float:
    """`value` in seconds; raises InvalidJob unless it is finite, > 0 and at most MAX_LEASE_S (a day)."""
    seconds = _seconds(name, value)
    if not seconds > 0:
        raise InvalidJob(f"{name} must be positive, got {_shown(value)}")
    if seconds > MAX_LEASE_S:
        raise InvalidJob(f"{name} must be at most one day, got {_shown(value)}")
    return seconds


def check_run_at(run_at: object) -> None:
    """Raise InvalidJob unless `run_at` is a timezone-aware datetime from RUN_AT_MIN to 100 years
    from now (this machine's clock)."""
    if not isinstance(run_at, dt.datetime) or run_at.tzinfo is None or run_at.utcoffset() is None:
        raise InvalidJob("run_at must be a timezone-aware datetime")
    try:
        ahead = (run_at - dt.datetime.now(dt.UTC)).total_seconds()
    except OverflowError:  # pragma: no cover - datetime arithmetic within years 1..9999 does not overflow
        ahead = math.inf
    if run_at < RUN_AT_MIN or ahead > MAX_DELAY_S:
        raise InvalidJob(f"run_at must be from 1900-01-01 to 100 years from now, got {run_at.isoformat()}")


def check_int4(name: str, value: int) -> None:
    """Raise InvalidJob if the int `value` does not fit in an SQL integer (|value| <= 2**31 - 1)."""
    if not -INT4_MAX <= value <= INT4_MAX:
        raise InvalidJob(f"{name} must be at most {INT4_MAX}, got {value}")


def check_job_id(job_id: object) -> None:
    """Raise InvalidJob unless `job_id` is an int (not a bool) that fits in an SQL bigint."""
    if isinstance(job_id, bool) or not isinstance(job_id, int):
        raise InvalidJob(f"job id must be an int, got {type(job_id).__name__}")
    if not -INT8_MAX <= job_id <= INT8_MAX:
        raise InvalidJob(f"job id must fit in a bigint (at most {INT8_MAX}), got {job_id}")


_SURROGATE = re.compile("[\ud800-\udfff]")


def has_lone_surrogate(text: str) -> bool:
    """Whether `text` holds a code point Postgres cannot store (a lone surrogate). ASCII text is
    answered at once."""
    return not text.isascii() and _SURROGATE.search(text) is not None


def json_has_lone_surrogate(text: str) -> bool:
    """Whether the JSON `text` (as pgq encodes it: ASCII, non-BMP characters as escaped surrogate
    pairs) holds a lone surrogate, escaped or not. Decodes it only when it has a surrogate escape."""
    if has_lone_surrogate(text):
        return True
    if "\\ud" not in text and "\\uD" not in text:
        return False
    try:
        json.dumps(json.loads(text), ensure_ascii=False).encode("utf-8")
    except UnicodeEncodeError:
        return True
    return False


MAX_JSON_DEPTH = 64
"""Levels a stored JSON value may nest below its top (`strict $.**{65}` finds nothing)."""

MAX_JSONB_BYTES = 8 * 1024 * 1024
"""The largest stored JSON value, in bytes of jsonb (uncompressed). The client's own limit, 1,000,000
bytes of JSON text (models.MAX_PAYLOAD_BYTES), always fits: jsonb takes at most about six bytes per
byte of compact JSON text (an array of one-digit numbers)."""

MAX_TRACEPARENT_CHARS = 256
"""The longest traceparent a stored trace context may hold (version 00's is 55 characters)."""

MAX_TRACESTATE_CHARS = 512
"""The longest tracestate a stored trace context may hold (W3C: what every vendor must propagate)."""


class Undecodable:
    """A stored JSON value that could not be decoded (`reason`), in place of the value: in the job
    a claim or a read returned. Falsy; compares equal to nothing but itself."""

    __slots__ = ("reason", "size")

    def __init__(self, reason: str, size: int) -> None:
        self.reason = reason
        self.size = size

    def __repr__(self) -> str:
        return f"<undecodable JSON of {self.size} bytes: {self.reason}>"

    def __bool__(self) -> bool:
        return False


class UndecodableJob(PgqError):
    """A stored job holds JSON pgq cannot decode (written before revision 0019's bounds, or past them
    by a superuser): its payload, result or progress nests too deeply for Python."""


def undecodable_fields(job: Any) -> list[str]:
    """The names of `job`'s fields (payload, result, progress) that hold an Undecodable."""
    return [name for name in ("payload", "result", "progress") if isinstance(getattr(job, name, None), Undecodable)]


def checked(job: Any) -> Any:
    """Return `job` (a Job) unchanged; raise UndecodableJob naming it and its undecodable fields if
    it has any. For reads: a job returned to a caller either decodes whole or is an error."""
    bad = undecodable_fields(job)
    if bad:
        value: Undecodable = getattr(job, bad[0])
        raise UndecodableJob(f"job {job.id} ({job.kind}): its stored {' and '.join(bad)} cannot be decoded "
                             f"({value.reason}); cancel or delete it")
    return job


# Outside its strings, JSON text holds only brackets, punctuation and the characters of numbers,
# true, false and null; all brackets become square ones (only their nesting matters).
_SQUARE = bytes.maketrans(b"{}", b"[]")
_DROP = b"0123456789+-.eEtrufalsn,: \t\r\n"


def check_depth(what: str, text: str) -> None:
    """Raise InvalidJob unless the JSON `text` nests at most MAX_JSON_DEPTH levels below its top,
    the database's bound. Reads nothing but the text: one with at most MAX_JSON_DEPTH opening
    brackets is within the bound and costs two counts; others a few passes of C string methods."""
    if text.count("[") + text.count("{") <= MAX_JSON_DEPTH:
        return
    data = text.encode()  # ASCII from pgq's encoder: bytes methods are the fastest
    if b"\\" in data:  # escaped backslashes, then escaped quotes: every quote left delimits a string
        data = data.replace(b"\\\\", b"").replace(b'\\"', b"")
    # Each string becomes the scalar 0; then empty containers go (no value nests below them), then
    # the scalars: every container left held at least one value, so the rounds that remove the
    # innermost pairs until nothing is left count the deepest level holding a value.
    shape = b"0".join(data.split(b'"')[::2]).translate(_SQUARE).replace(b"[]", b"").translate(None, _DROP)
    for _ in range(MAX_JSON_DEPTH):
        shape = shape.replace(b"[]", b"")
        if not shape:
            return
    raise InvalidJob(f"{what} nests deeper than {MAX_JSON_DEPTH} levels")
