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
"""

from __future__ import annotations

import datetime as dt
import json
import math
import re
from typing import Final

from .errors import InvalidJob

__all__ = [
    "INT4_MAX",
    "INT8_MAX",
    "MAX_DELAY_S",
    "MAX_LEASE_S",
    "RUN_AT_MIN",
    "check_int4",
    "check_job_id",
    "check_run_at",
    "delay_s",
    "has_lone_surrogate",
    "json_has_lone_surrogate",
    "lease_s",
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
