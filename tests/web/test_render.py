"""The dashboard's formatting and its SVG charts, without a database."""

from __future__ import annotations

import datetime as dt
import xml.etree.ElementTree as ET

import pytest

from pgq.web import params
from pgq.web.chart import nice_ceiling, sparkline, throughput_chart
from pgq.web.errors import HttpError
from pgq.web.queries import Throughput
from pgq.web.views import (
    DetailTime,
    format_age,
    format_clock,
    format_duration,
    format_relative,
    format_time,
    format_window,
    reason_parts,
)

START = dt.datetime(2026, 11, 25, 9, 0, tzinfo=dt.UTC)
MINUTES = [START + dt.timedelta(minutes=i) for i in range(60)]


def throughput(succeeded: list[int], failed: list[int] | None = None, counted_from: dt.datetime = START,
               capped: bool = False) -> Throughput:
    return Throughput(MINUTES, succeeded, failed or [0] * 60, [0] * 60, counted_from, capped)


@pytest.mark.parametrize(("value", "top"), [(0, 1), (1, 1), (2, 2), (3, 5), (7, 10), (11, 20), (500, 500),
                                            (501, 1000), (123_456, 200_000)])
def test_nice_ceiling(value: int, top: int) -> None:
    assert nice_ceiling(value) == top


def test_the_chart_is_well_formed_svg_with_a_bar_and_a_title_per_minute() -> None:
    succeeded = [i % 7 for i in range(60)]
    failed = [1 if i % 10 == 0 else 0 for i in range(60)]
    svg = str(throughput_chart(throughput(succeeded, failed)))
    root = ET.fromstring(svg)
    ns = {"s": "http://www.w3.org/2000/svg"}
    assert len(root.findall("s:g", ns)) == 60
    titles = [t.text for t in root.iter("{http://www.w3.org/2000/svg}title")]
    assert "09:10 UTC: 3 succeeded, 1 failed, 0 cancelled" in titles
    assert titles[-1].endswith("(minute in progress)")
    assert [t.text for t in root.findall("s:text", ns) if t.text and ":" in t.text] == [
        "09:00", "09:10", "09:20", "09:30", "09:40", "09:50"]
    assert len(root.findall(".//s:rect[@class='failed']", ns)) == 6
    assert "style=" not in svg and "<script" not in svg
    assert "180 jobs finished in the last hour, 6 of them failed" in root.attrib["aria-label"]


def test_an_empty_hour_says_so() -> None:
    svg = str(throughput_chart(throughput([0] * 60)))
    assert "no job finished in the last hour" in svg
    ET.fromstring(svg)


def test_a_capped_hour_shades_the_minutes_not_counted() -> None:
    svg = str(throughput_chart(throughput([0] * 50 + [100] * 10, counted_from=MINUTES[51], capped=True)))
    assert 'class="uncounted"' in svg and "not counted" in svg


def test_the_sparkline() -> None:
    svg = str(sparkline([0, 3, 5], [0, 1, 0], MINUTES[:3]))
    root = ET.fromstring(svg)
    assert len(root.findall(".//{http://www.w3.org/2000/svg}rect")) == 3  # two bars, one failed part
    assert "8 finished in the hour" in root.attrib["aria-label"]


@pytest.mark.parametrize(("seconds", "text"), [(None, "\u2013"), (0, "0s"), (59.9, "59s"), (60, "1m 00s"),
                                               (3725, "1h 02m"), (90061, "1d 01h"), (-5, "0s")])
def test_format_age(seconds: float | None, text: str) -> None:
    assert format_age(seconds) == text


def test_relative_times_and_timestamps() -> None:
    now = START
    assert format_relative(now + dt.timedelta(seconds=130), now) == "in 2m 10s"
    assert format_relative(now - dt.timedelta(seconds=5), now) == "5s ago"
    assert format_relative(now, now) == "now"
    assert format_relative(None, now) == "\u2013"
    assert format_time(dt.datetime(2026, 11, 25, 12, 0, 7, tzinfo=dt.timezone(dt.timedelta(hours=2)))) == (
        "2026-11-25 10:00:07 UTC")
    assert format_duration(dt.timedelta(milliseconds=231)) == "231 ms"
    assert format_duration(dt.timedelta(seconds=75)) == "1m 15s"
    assert (format_window(1), format_window(60.0), format_window(90)) == ("second", "minute", "90 s")


def test_params() -> None:
    assert params.job_id("42") == 42
    assert params.limit({}, 50) == 50 and params.limit({"limit": "500"}, 50) == 500
    assert params.cursor({"cursor": ""}) is None and params.cursor({"cursor": "7"}) == 7
    f = params.job_filter({"status": "Failed", "queue": "", "q": "  key  "})
    assert f.status is not None and f.status.value == "failed" and f.queue is None and f.text == "key"
    assert not params.job_filter({"q": "   "}).active
    for bad in ("", "x", "-1", "0", str(2**63)):
        with pytest.raises(HttpError) as caught:
            params.job_id(bad)
        assert caught.value.status == 400
    with pytest.raises(HttpError):
        params.queue_name("")


def test_a_reasons_timestamps_are_parts_of_their_own_and_its_code_is_not_repeated() -> None:
    """Issue #44: pgq.explain writes its times as PostgreSQL's text of a timestamptz, to the
    microsecond; the job page gets them apart (with the fact each is) to show them readably."""
    finished = dt.datetime(2026, 11, 29, 3, 48, 44, 389805, tzinfo=dt.UTC)
    parts = reason_parts("finished", "finished: failed at 2026-11-29 03:48:44.389805+00 after 5 attempt(s): boom",
                         {"finished_at": "2026-11-29T03:48:44.389805+00:00", "status": "failed"})
    assert parts == ["failed at ", DetailTime(finished, "finished_at", False), " after 5 attempt(s): boom"]
    lease = reason_parts("running", "running on w since 2026-11-29 03:48:44+00 (lease until 2026-11-29 05:49:00+02)",
                         {"started_at": "2026-11-29T03:48:44+00:00"})
    assert [p for p in lease if isinstance(p, str)] == ["on w since ", " (lease until ", ")"]
    assert [(p.at, p.fact, p.nested) for p in lease if isinstance(p, DetailTime)] == [
        (dt.datetime(2026, 11, 29, 3, 48, 44, tzinfo=dt.UTC), "started_at", False),
        (dt.datetime(2026, 11, 29, 3, 49, tzinfo=dt.UTC), None, True)]  # inside parentheses: no fact given
    assert reason_parts("ready", "ready: position 3 in queue q", {}) == ["position 3 in queue q"]
    assert reason_parts("queue_paused", "queue q is paused (by x since 29/11/2026 03:48:44 UTC)", {}) == [
        "queue q is paused (by x since 29/11/2026 03:48:44 UTC)"]  # not ISO: shown as written


def test_clock_times_are_short_on_the_day_and_dated_before() -> None:
    now = dt.datetime(2026, 11, 29, 10, 0, tzinfo=dt.UTC)
    assert format_clock(dt.datetime(2026, 11, 29, 3, 48, 44, 389805, tzinfo=dt.UTC), now) == "03:48:44 UTC"
    assert format_clock(dt.datetime(2026, 11, 28, 23, 59, 59, tzinfo=dt.UTC), now) == "2026-11-28 23:59 UTC"
    assert format_clock(dt.datetime(2026, 11, 29, 1, 0, tzinfo=dt.timezone(dt.timedelta(hours=2))),
                        now) == "2026-11-28 23:00 UTC"
