"""Schedules of periodic tasks: a 5-field cron expression (`Cron`) or a fixed interval (`Every`).

A schedule turns time into *ticks*: the instants a periodic task is due. Ticks are aware datetimes,
whole seconds; their epoch seconds identify them in the database (the tick's dedupe key). Both
schedules answer three questions for the maintenance leader, always about a window of the database
clock: which ticks fall in (after, until]; the latest tick in such a window; the first tick after an
instant, looking no further than a horizon (the leader only needs to know when to wake up next).

Cron syntax (minute hour day-of-month month day-of-week), each field one of: `*`, `*/n`, `a`, `a-b`,
`a-b/n`, `a/n` (from a to the field's maximum), or a comma-separated list of those. Months and days of
the week also accept English three-letter names (`jan`, `mon`); day of week 0 and 7 are both Sunday.
As in classic cron, when both day-of-month and day-of-week are restricted (neither is `*`), a day
matches if either matches. Cron fields are read in the schedule's time zone (UTC by default).
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Protocol
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from .errors import PgqError

__all__ = ["Cron", "CronError", "Every", "Schedule"]

UTC = dt.UTC
_MINUTE = dt.timedelta(minutes=1)


class CronError(PgqError, ValueError):
    """A cron expression or interval that cannot be parsed; the message names the bad field."""


class Schedule(Protocol):
    """When a periodic task is due. Every argument and result is a timezone-aware datetime."""

    def ticks(self, after: dt.datetime, until: dt.datetime) -> Iterator[dt.datetime]:
        """Yield the ticks t with after < t <= until, in ascending order."""
        ...

    def latest(self, after: dt.datetime, until: dt.datetime) -> dt.datetime | None:
        """The last tick t with after < t <= until, or None."""
        ...

    def next_after(self, after: dt.datetime, horizon: dt.timedelta) -> dt.datetime | None:
        """The first tick t with after < t <= after + horizon, or None."""
        ...


def _aware(name: str, value: dt.datetime) -> dt.datetime:
    if value.tzinfo is None:
        raise ValueError(f"{name} must be a timezone-aware datetime")
    return value


@dataclass(frozen=True, slots=True)
class Every:
    """A tick every `seconds` (a whole number >= 1), aligned on multiples of it since the Unix epoch,
    so that every process computes the same ticks."""

    seconds: int

    def __post_init__(self) -> None:
        if isinstance(self.seconds, bool) or not isinstance(self.seconds, int) or self.seconds < 1:
            raise CronError(f"an interval must be a whole number of seconds >= 1, got {self.seconds!r}")

    @classmethod
    def of(cls, interval: dt.timedelta | float) -> Every:
        """Build from a timedelta or seconds; raise CronError unless it is a whole number of seconds >= 1."""
        seconds = interval.total_seconds() if isinstance(interval, dt.timedelta) else interval
        if isinstance(seconds, bool) or not isinstance(seconds, int | float) or seconds != int(seconds):
            raise CronError(f"an interval must be a whole number of seconds >= 1, got {interval!r}")
        return cls(int(seconds))

    def _index(self, when: dt.datetime) -> int:
        # Index of the last tick at or before `when` (floor division also floors negatives).
        return int(_aware("time", when).timestamp() // self.seconds)

    def _tick(self, index: int) -> dt.datetime:
        return dt.datetime.fromtimestamp(index * self.seconds, UTC)

    def ticks(self, after: dt.datetime, until: dt.datetime) -> Iterator[dt.datetime]:
        """See `Schedule.ticks`."""
        for index in range(self._index(after) + 1, self._index(until) + 1):
            yield self._tick(index)

    def latest(self, after: dt.datetime, until: dt.datetime) -> dt.datetime | None:
        """See `Schedule.latest`."""
        last = self._index(until)
        return self._tick(last) if last > self._index(after) else None

    def next_after(self, after: dt.datetime, horizon: dt.timedelta) -> dt.datetime | None:
        """See `Schedule.next_after`."""
        tick = self._tick(self._index(after) + 1)
        return tick if tick <= after + horizon else None

    def __str__(self) -> str:
        return f"every {self.seconds} s"


_MONTHS = {name: i for i, name in enumerate(
    ("jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec"), start=1)}
_DAYS = {name: i for i, name in enumerate(("sun", "mon", "tue", "wed", "thu", "fri", "sat"))}

# (name, lowest, highest, names) per field, in expression order.
_FIELDS: tuple[tuple[str, int, int, dict[str, int]], ...] = (
    ("minute", 0, 59, {}),
    ("hour", 0, 23, {}),
    ("day of month", 1, 31, {}),
    ("month", 1, 12, _MONTHS),
    ("day of week", 0, 7, _DAYS),
)


def _number(text: str, field: str, names: dict[str, int], expr: str) -> int:
    value = names.get(text.lower())
    if value is not None:
        return value
    if not text.isdigit():
        raise CronError(f"cron {expr!r}: bad {field} value {text!r}")
    return int(text)


def _parse_field(text: str, index: int, expr: str) -> frozenset[int]:
    field, low, high, names = _FIELDS[index]
    values: set[int] = set()
    for part in text.split(","):
        base, slash, step_text = part.partition("/")
        step = 1
        if slash:
            if not step_text.isdigit() or int(step_text) < 1:
                raise CronError(f"cron {expr!r}: bad step {step_text!r} in the {field} field")
            step = int(step_text)
        if base == "*":
            start, stop = low, high
        elif "-" in base:
            first, _, last = base.partition("-")
            start, stop = _number(first, field, names, expr), _number(last, field, names, expr)
        else:
            start = _number(base, field, names, expr)
            stop = high if slash else start
        if not low <= start <= high or not low <= stop <= high:
            raise CronError(f"cron {expr!r}: {field} {part!r} is outside {low}-{high}")
        if start > stop:
            raise CronError(f"cron {expr!r}: {field} range {part!r} runs backwards")
        values.update(range(start, stop + 1, step))
    if index == 4 and 7 in values:  # 7 is another name for Sunday
        values.discard(7)
        values.add(0)
    return frozenset(values)


@dataclass(frozen=True, slots=True)
class Cron:
    """A parsed 5-field cron expression, evaluated in time zone `tz` (an IANA name, default UTC).

    Construct with `Cron.parse(expr, tz)`; raises CronError naming the bad field, or an unknown zone.
    Ticks fall on whole minutes. In a zone with daylight saving time, a wall-clock minute that occurs
    twice (autumn) ticks twice and one that does not exist (spring) never ticks.
    """

    expr: str
    minutes: frozenset[int]
    hours: frozenset[int]
    days: frozenset[int]
    months: frozenset[int]
    weekdays: frozenset[int]  # 0 = Sunday
    day_restricted: bool
    weekday_restricted: bool
    tz: dt.tzinfo

    @classmethod
    def parse(cls, expr: str, tz: str | dt.tzinfo = "UTC") -> Cron:
        """Parse `expr`; see the module docstring for the syntax."""
        if not isinstance(expr, str):
            raise CronError(f"a cron expression must be a str, got {type(expr).__name__}")
        fields = expr.split()
        if len(fields) != 5:
            raise CronError(
                f"cron {expr!r}: expected 5 fields (minute hour day-of-month month day-of-week), "
                f"got {len(fields)}"
            )
        parsed = [_parse_field(text, i, expr) for i, text in enumerate(fields)]
        if isinstance(tz, str):
            try:
                zone: dt.tzinfo = UTC if tz.upper() == "UTC" else ZoneInfo(tz)
            except (ZoneInfoNotFoundError, ValueError):
                raise CronError(f"unknown time zone {tz!r}") from None
        else:
            zone = tz
        minutes, hours, days, months, weekdays = parsed
        return cls(expr, minutes, hours, days, months, weekdays, day_restricted=fields[2] != "*",
                   weekday_restricted=fields[4] != "*", tz=zone)

    def matches(self, when: dt.datetime) -> bool:
        """Whether the minute containing `when` (read in the schedule's zone) is a tick."""
        local = _aware("time", when).astimezone(self.tz)
        if local.minute not in self.minutes or local.hour not in self.hours or local.month not in self.months:
            return False
        day_ok = local.day in self.days
        weekday_ok = (local.isoweekday() % 7) in self.weekdays
        if self.day_restricted and self.weekday_restricted:
            return day_ok or weekday_ok
        return day_ok and weekday_ok

    @staticmethod
    def _floor(when: dt.datetime) -> dt.datetime:
        return _aware("time", when).astimezone(UTC).replace(second=0, microsecond=0)

    def ticks(self, after: dt.datetime, until: dt.datetime) -> Iterator[dt.datetime]:
        """See `Schedule.ticks`. Walks the window minute by minute: keep windows to hours or days."""
        minute = self._floor(after) + _MINUTE
        while minute <= until:
            if self.matches(minute):
                yield minute
            minute += _MINUTE

    def latest(self, after: dt.datetime, until: dt.datetime) -> dt.datetime | None:
        """See `Schedule.latest` (walks backwards from `until`, minute by minute)."""
        minute = self._floor(until)
        while minute > after:
            if self.matches(minute):
                return minute
            minute -= _MINUTE
        return None

    def next_after(self, after: dt.datetime, horizon: dt.timedelta) -> dt.datetime | None:
        """See `Schedule.next_after` (walks minute by minute up to the horizon: keep it short)."""
        minute = self._floor(after) + _MINUTE
        end = after + horizon
        while minute <= end:
            if self.matches(minute):
                return minute
            minute += _MINUTE
        return None

    def __str__(self) -> str:
        return f"cron {self.expr!r}"
