"""Schedules of periodic tasks: a 5-field cron expression (`Cron`) or a fixed interval (`Every`).

A schedule turns time into *ticks*: the instants a periodic task is due. Ticks are aware datetimes,
whole seconds; their epoch seconds identify them in the database (the tick's dedupe key). Both
schedules answer three questions for the maintenance leader, always about a window of the database
clock: which ticks fall in (after, until]; the latest tick in such a window; the first tick after an
instant, looking no further than a horizon (the leader only needs to know when to wake up next).

Cron expressions are read by the `cronsim` library: 5 fields (minute hour day-of-month month
day-of-week), each `*`, `*/n`, `a`, `a-b`, `a-b/n` or a comma-separated list of those, English
three-letter names for months and days, day of week 0 and 7 both Sunday, and cronsim's extensions
(`L` for the last day of the month, `mon#2` for the second Monday). As in classic cron, when both
day-of-month and day-of-week are restricted, a day matches if either matches. Fields are read in the
schedule's time zone (UTC by default).
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Protocol
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from cronsim import CronSim, CronSimError

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


@dataclass(frozen=True, slots=True)
class Cron:
    """A 5-field cron expression, evaluated in time zone `tz` (an IANA name, default UTC), by the
    `cronsim` library (the syntax and semantics of Debian's cron).

    Construct with `Cron.parse(expr, tz)`; raises CronError naming the bad field, or an unknown zone.
    Ticks fall on whole minutes. In a zone with daylight saving time a job runs once per wall-clock
    time: a minute that occurs twice (autumn) ticks at its first occurrence only, and a minute the
    clocks skip (spring) ticks at the moment they jump.
    """

    expr: str
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
        if isinstance(tz, str):
            try:
                zone: dt.tzinfo = UTC if tz.upper() == "UTC" else ZoneInfo(tz)
            except (ZoneInfoNotFoundError, ValueError):
                raise CronError(f"unknown time zone {tz!r}") from None
        else:
            zone = tz
        try:
            CronSim(expr, dt.datetime(2000, 1, 1, tzinfo=zone))
        except CronSimError as exc:
            raise CronError(f"cron {expr!r}: {str(exc).lower() or 'invalid'}") from None
        return cls(expr, zone)

    def _after(self, when: dt.datetime, *, reverse: bool = False) -> Iterator[dt.datetime]:
        # cronsim yields the matching minutes strictly after `when` (before it, with reverse), in
        # the schedule's zone; ticks are given in UTC.
        for tick in CronSim(self.expr, _aware("time", when).astimezone(self.tz), reverse=reverse):
            yield tick.astimezone(UTC)

    def matches(self, when: dt.datetime) -> bool:
        """Whether the minute containing `when` (read in the schedule's zone) is a tick."""
        minute = _aware("time", when).astimezone(UTC).replace(second=0, microsecond=0)
        return next(self._after(minute - _MINUTE)) == minute

    def ticks(self, after: dt.datetime, until: dt.datetime) -> Iterator[dt.datetime]:
        """See `Schedule.ticks`."""
        for tick in self._after(after):
            if tick > until:
                return
            yield tick

    def latest(self, after: dt.datetime, until: dt.datetime) -> dt.datetime | None:
        """See `Schedule.latest`."""
        # Reverse iteration excludes its start: start just past `until` so that `until` counts.
        tick = next(self._after(_aware("until", until) + dt.timedelta(microseconds=1), reverse=True), None)
        return tick if tick is not None and tick > after else None

    def next_after(self, after: dt.datetime, horizon: dt.timedelta) -> dt.datetime | None:
        """See `Schedule.next_after`."""
        tick = next(self._after(after), None)
        return tick if tick is not None and tick <= after + horizon else None

    def __str__(self) -> str:
        return f"cron {self.expr!r}"
