"""Unit tests of pgq.cron: parsing, matching, and the tick windows the periodic leader asks for."""

from __future__ import annotations

import datetime as dt

import pytest

from pgq.cron import Cron, CronError, Every

UTC = dt.UTC


def at(*args: int) -> dt.datetime:
    return dt.datetime(*args, tzinfo=UTC)


@pytest.mark.parametrize(
    ("expr", "minutes", "hours"),
    [
        ("* * * * *", set(range(60)), set(range(24))),
        ("*/15 * * * *", {0, 15, 30, 45}, set(range(24))),
        ("5,10-12 3 * * *", {5, 10, 11, 12}, {3}),
        ("0-30/10 */6 * * *", {0, 10, 20, 30}, {0, 6, 12, 18}),
        ("50/5 * * * *", {50, 55}, set(range(24))),
    ],
)
def test_cron_parse_expands_fields(expr: str, minutes: set[int], hours: set[int]) -> None:
    cron = Cron.parse(expr)
    assert cron.minutes == minutes
    assert cron.hours == hours


def test_cron_parse_accepts_names_and_sunday_as_7() -> None:
    cron = Cron.parse("0 0 * jan,Feb sun-mon")
    assert cron.months == {1, 2}
    assert cron.weekdays == {0, 1}
    assert Cron.parse("0 0 * * 7").weekdays == {0}


@pytest.mark.parametrize(
    ("expr", "fragment"),
    [
        ("* * * *", "expected 5 fields"),
        ("60 * * * *", "minute"),
        ("* 24 * * *", "hour"),
        ("* * 0 * *", "day of month"),
        ("* * * 13 *", "month"),
        ("*/0 * * * *", "step"),
        ("5-1 * * * *", "backwards"),
        ("x * * * *", "bad minute value"),
    ],
)
def test_cron_parse_rejects_bad_fields_naming_them(expr: str, fragment: str) -> None:
    with pytest.raises(CronError, match=fragment):
        Cron.parse(expr)


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
