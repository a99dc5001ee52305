"""Unit tests of pgq.cron: parsing, matching, and the tick windows the periodic leader asks for."""

from __future__ import annotations

import datetime as dt

import pytest

from pgq.cron import Cron, CronError, Every

UTC = dt.UTC


def at(*args: int) -> dt.datetime:
    return dt.datetime(*args, tzinfo=UTC)


def minutes_of_first_hours(cron: Cron, hours: int = 24) -> set[tuple[int, int]]:
    """(hour, minute) of every tick in the first `hours` hours of 2024-01-01 (a Monday), UTC."""
    return {(t.hour, t.minute) for t in cron.ticks(at(2023, 12, 31, 23, 59), at(2024, 1, 1, hours - 1, 59))}


@pytest.mark.parametrize(
    ("expr", "minutes", "hours"),
    [
        ("* * * * *", set(range(60)), set(range(24))),
        ("*/15 * * * *", {0, 15, 30, 45}, set(range(24))),
        ("5,10-12 3 * * *", {5, 10, 11, 12}, {3}),
        ("0-30/10 */6 * * *", {0, 10, 20, 30}, {0, 6, 12, 18}),
    ],
)
def test_cron_fields_expand(expr: str, minutes: set[int], hours: set[int]) -> None:
    assert minutes_of_first_hours(Cron.parse(expr)) == {(h, m) for h in hours for m in minutes}


def test_cron_accepts_names_and_sunday_as_7() -> None:
    # 2024-01-07 is a Sunday, 2024-01-01 a Monday; February 2024 starts on a Thursday.
    assert Cron.parse("0 0 * jan,Feb sun-mon").matches(at(2024, 1, 7, 0, 0))
    assert Cron.parse("0 0 * jan,Feb sun-mon").matches(at(2024, 1, 1, 0, 0))
    assert not Cron.parse("0 0 * jan,Feb sun-mon").matches(at(2024, 1, 2, 0, 0))
    assert not Cron.parse("0 0 * jan,Feb sun-mon").matches(at(2024, 3, 3, 0, 0))
    assert Cron.parse("0 0 * * 7").matches(at(2024, 1, 7, 0, 0))


@pytest.mark.parametrize(
    ("expr", "fragment"),
    [
        ("* * * *", "expected 5 fields"),
        ("60 * * * *", "bad minute"),
        ("* 24 * * *", "bad hour"),
        ("* * 0 * *", "bad day-of-month"),
        ("* * * 13 *", "bad month"),
        ("*/0 * * * *", "bad minute"),
        ("5-1 * * * *", "bad minute"),
        ("x * * * *", "bad minute"),
        ("* * * * 8", "bad day-of-week"),
    ],
)
def test_cron_parse_rejects_bad_fields_naming_them(expr: str, fragment: str) -> None:
    with pytest.raises(CronError, match=fragment):
        Cron.parse(expr)


def test_cron_runs_once_per_wall_clock_time_across_daylight_saving() -> None:
    cron = Cron.parse("30 2 * * *", "Europe/Berlin")
    # 2026-10-25: 02:30 happens twice (at 00:30 and 01:30 UTC): one tick, the first.
    autumn = list(cron.ticks(at(2026, 10, 24, 12, 0), at(2026, 10, 25, 12, 0)))
    assert autumn == [at(2026, 10, 25, 0, 30)]
    # 2026-03-29: the clocks jump from 02:00 to 03:00 (01:00 UTC): the tick comes at the jump.
    spring = list(cron.ticks(at(2026, 3, 28, 12, 0), at(2026, 3, 29, 12, 0)))
    assert spring == [at(2026, 3, 29, 1, 0)]


def test_cron_parse_rejects_unknown_time_zone() -> None:
    with pytest.raises(CronError, match="time zone"):
        Cron.parse("* * * * *", "Mars/Olympus")


def test_cron_day_of_month_or_day_of_week_when_both_restricted() -> None:
    cron = Cron.parse("0 12 1 * mon")  # the 1st of the month, or any Monday
    assert cron.matches(at(2024, 5, 1, 12, 0))  # a Wednesday, the 1st
    assert cron.matches(at(2024, 5, 6, 12, 0))  # a Monday
    assert not cron.matches(at(2024, 5, 7, 12, 0))
    only_day = Cron.parse("0 12 1 * *")
    assert not only_day.matches(at(2024, 5, 6, 12, 0))


def test_cron_ticks_window_excludes_start_includes_end() -> None:
    cron = Cron.parse("*/5 * * * *")
    ticks = list(cron.ticks(at(2024, 1, 1, 10, 0), at(2024, 1, 1, 10, 15)))
    assert ticks == [at(2024, 1, 1, 10, 5), at(2024, 1, 1, 10, 10), at(2024, 1, 1, 10, 15)]
    assert cron.latest(at(2024, 1, 1, 10, 0), at(2024, 1, 1, 10, 14, 59)) == at(2024, 1, 1, 10, 10)
    assert cron.latest(at(2024, 1, 1, 10, 0), at(2024, 1, 1, 10, 4)) is None


def test_cron_next_after_respects_horizon() -> None:
    cron = Cron.parse("30 2 * * *")
    start = at(2024, 1, 1, 0, 0, 30)
    assert cron.next_after(start, dt.timedelta(hours=3)) == at(2024, 1, 1, 2, 30)
    assert cron.next_after(start, dt.timedelta(hours=1)) is None


def test_cron_reads_fields_in_its_time_zone() -> None:
    cron = Cron.parse("0 9 * * *", "Europe/Paris")
    assert cron.matches(at(2024, 1, 15, 8, 0))  # 09:00 in Paris (UTC+1)
    assert cron.matches(at(2024, 7, 15, 7, 0))  # 09:00 in Paris (UTC+2)
    assert not cron.matches(at(2024, 1, 15, 9, 0))


def test_every_ticks_are_aligned_on_the_epoch() -> None:
    every = Every(10)
    ticks = list(every.ticks(at(2024, 1, 1, 0, 0, 5), at(2024, 1, 1, 0, 0, 30)))
    assert ticks == [at(2024, 1, 1, 0, 0, 10), at(2024, 1, 1, 0, 0, 20), at(2024, 1, 1, 0, 0, 30)]
    assert every.latest(at(2024, 1, 1, 0, 0, 5), at(2024, 1, 1, 0, 0, 29)) == at(2024, 1, 1, 0, 0, 20)
    assert every.next_after(at(2024, 1, 1, 0, 0, 20), dt.timedelta(seconds=10)) == at(2024, 1, 1, 0, 0, 30)
    assert every.next_after(at(2024, 1, 1, 0, 0, 20), dt.timedelta(seconds=5)) is None


@pytest.mark.parametrize("bad", [0, -1, 1.5, dt.timedelta(milliseconds=500), "5", True])
def test_every_rejects_non_whole_seconds(bad: object) -> None:
    with pytest.raises(CronError):
        Every.of(bad)  # type: ignore[arg-type]


def test_every_of_timedelta() -> None:
    assert Every.of(dt.timedelta(minutes=2)).seconds == 120
