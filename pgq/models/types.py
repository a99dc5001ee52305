"""The small types of pgq's API: JobStatus, its groups, the JSON alias and the payload bounds."""

from __future__ import annotations

import datetime as dt
import enum
from collections.abc import Callable, Mapping
from dataclasses import fields, is_dataclass
from typing import Any

from ..errors import InvalidJob

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


def _slot_setters(cls: type) -> dict[str, Callable[[Any, Any], None]]:
    """The `__set__` of each field's slot of a slotted dataclass, by name in field order: what fills
    a frozen instance without object.__setattr__ (about three times as fast)."""
    return {f.name: getattr(cls, f.name).__set__ for f in fields(cls)}


_PLAIN = frozenset({int, float, str, bool, type(None)})
# Exactly these types (not their subclasses: an IntEnum or a str Enum goes on to its value).


def jsonable(value: Any) -> Any:
    """`value` ready for json.dumps: datetimes as ISO 8601 text, durations as seconds, enums as their
    value, dataclasses (a Job, a Claim) as mappings of their fields, mappings and sequences converted
    through; anything else as it is."""
    if type(value) in _PLAIN:  # most values of a big answer (the dashboard's per-minute counts): as they are
        return value
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
