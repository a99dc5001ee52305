"""Charts as server-rendered SVG: the overview's jobs finished per minute over the last hour, and each
queue's sparkline. Plain markup, styled by the classes of static/app.css (the Content-Security-Policy
allows no inline style), with a <title> per minute for the tooltip. Every text in it is escaped."""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence

from markupsafe import Markup, escape

from .queries import Throughput

__all__ = ["nice_ceiling", "sparkline", "throughput_chart"]

# Geometry of the throughput chart, in the units of its viewBox (it scales to the page's width).
WIDTH, HEIGHT = 960, 220
LEFT, RIGHT, TOP, BOTTOM = 48, 8, 12, 26


def nice_ceiling(value: int) -> int:
    """The smallest of 1, 2, 5, 10, 20, 50, ... that is >= `value` (at least 1): the top of a y axis."""
    step = 1
    while True:
        for factor in (1, 2, 5):
            if step * factor >= value:
                return step * factor
        step *= 10


def _number(value: float) -> str:
    return f"{value:.1f}".rstrip("0").rstrip(".")


def _label(value: int) -> str:
    return f"{value // 1000}k" if value >= 10_000 and value % 1000 == 0 else f"{value:,}"


def _span(seconds: int) -> str:
    # "minute", "15 minutes", "hour", "24 hours", "7 days": a bucket's or a window's length in words.
    for unit, size in (("day", 86400), ("hour", 3600), ("minute", 60)):
        if seconds % size == 0 and (seconds >= size or unit == "minute"):
            n = seconds // size
            if unit == "day" and n == 1:
                return "24 hours"
            return unit if n == 1 else f"{n} {unit}s"
    return f"{seconds} seconds"


def _axis_label(start: dt.datetime, bucket_s: int) -> str | None:
    # Every 10 minutes on the hour's chart, every 3 hours on the day's, each midnight on the week's.
    if bucket_s < 900:
        return f"{start:%H:%M}" if start.minute % 10 == 0 else None
    if bucket_s < 3600:
        return f"{start:%H:%M}" if start.minute == 0 and start.hour % 3 == 0 else None
    return f"{start:%a %d}" if start.hour == 0 else None


def throughput_chart(data: Throughput) -> Markup:
    """A stacked bar per bucket (minute, quarter hour, hour) of `data`: succeeded, cancelled and failed
    jobs; the current (partial) bucket drawn lighter, buckets left uncounted (capped) shaded. Returns SVG
    markup."""
    count = len(data.minutes)
    totals = [s + f + c for s, f, c in zip(data.succeeded, data.failed, data.cancelled, strict=True)]
    top = nice_ceiling(max(totals, default=0))
    plot_w, plot_h = WIDTH - LEFT - RIGHT, HEIGHT - TOP - BOTTOM
    slot = plot_w / max(count, 1)
    bar = max(slot * 0.72, 1.0)

    def y(value: float) -> float:
        return TOP + plot_h - plot_h * value / top

    total = sum(totals)
    failed = sum(data.failed)
    span = _span(count * data.bucket_s)
    summary = f"{total:,} jobs finished in the last {span}, {failed:,} of them failed"
    parts = [f'<svg class="chart" viewBox="0 0 {WIDTH} {HEIGHT}" role="img" aria-label="{escape(summary)}" '
             'xmlns="http://www.w3.org/2000/svg">']
    for tick in (0, top // 2 if top >= 2 else None, top):
        if tick is None:
            continue
        ty = _number(y(tick))
        parts.append(f'<line class="grid" x1="{LEFT}" x2="{WIDTH - RIGHT}" y1="{ty}" y2="{ty}"/>')
        parts.append(f'<text class="axis" x="{LEFT - 6}" y="{_number(y(tick) + 4)}" text-anchor="end">'
                     f"{escape(_label(tick))}</text>")
    counted = [m >= data.counted_from for m in data.minutes]
    if not all(counted):
        width = slot * counted.index(True) if True in counted else plot_w
        parts.append(f'<rect class="uncounted" x="{LEFT}" y="{TOP}" width="{_number(width)}" height="{plot_h}">'
                     "<title>not counted: more finished jobs than the dashboard reads from the jobs (are the counts "
                     "kept? see the note)</title></rect>")
    for i, minute in enumerate(data.minutes):
        x = LEFT + i * slot + (slot - bar) / 2
        partial = " partial" if i == count - 1 else ""
        when = f"{minute:%H:%M}" if data.bucket_s == 60 else f"{minute:%a %H:%M}"
        title = (f"{when} UTC: {data.succeeded[i]:,} succeeded, {data.failed[i]:,} failed, "
                 f"{data.cancelled[i]:,} cancelled" + (f" ({_span(data.bucket_s)} in progress)" if partial else ""))
        parts.append(f'<g class="minute{partial}"><title>{escape(title)}</title>')
        parts.append(f'<rect class="slot" x="{_number(LEFT + i * slot)}" y="{TOP}" width="{_number(slot)}" '
                     f'height="{plot_h}"/>')
        base = 0
        for value, cls in ((data.succeeded[i], "succeeded"), (data.cancelled[i], "cancelled"),
                           (data.failed[i], "failed")):
            if value:
                parts.append(f'<rect class="{cls}" x="{_number(x)}" y="{_number(y(base + value))}" '
                             f'width="{_number(bar)}" height="{_number(y(base) - y(base + value))}"/>')
                base += value
        parts.append("</g>")
        label = _axis_label(minute, data.bucket_s)
        if label:
            parts.append(f'<text class="axis" x="{_number(x + bar / 2)}" y="{HEIGHT - 8}" text-anchor="middle">'
                         f"{escape(label)}</text>")
    parts.append(f'<line class="baseline" x1="{LEFT}" x2="{WIDTH - RIGHT}" y1="{TOP + plot_h}" y2="{TOP + plot_h}"/>')
    if total == 0:
        parts.append(f'<text class="empty" x="{LEFT + plot_w / 2}" y="{TOP + plot_h / 2}" text-anchor="middle">'
                     f"no job finished in the last {escape(span)}</text>")
    parts.append("</svg>")
    return Markup("".join(parts))


def sparkline(values: Sequence[int], failed: Sequence[int], minutes: Sequence[dt.datetime]) -> Markup:
    """A small bar chart of a queue's jobs finished per minute, failures in red on top."""
    width, height = 120, 28
    top = max(max(values, default=0), 1)
    slot = width / max(len(values), 1)
    parts = [f'<svg class="spark" viewBox="0 0 {width} {height}" xmlns="http://www.w3.org/2000/svg" '
             f'preserveAspectRatio="none" role="img" aria-label="{escape(f"{sum(values):,} finished in the hour")}">']
    for i, (value, bad) in enumerate(zip(values, failed, strict=True)):
        if not value:
            continue
        h = max(height * value / top, 1.0)
        fh = min(h, max(height * bad / top, 1.0)) if bad else 0.0
        x = _number(i * slot)
        title = escape(f"{minutes[i]:%H:%M} UTC: {value:,} finished, {bad:,} failed")
        w = _number(max(slot - 0.4, 0.6))
        parts.append(f'<g><title>{title}</title><rect class="succeeded" x="{x}" y="{_number(height - h + fh)}" '
                     f'width="{w}" height="{_number(h - fh)}"/>')
        if fh:
            parts.append(f'<rect class="failed" x="{x}" y="{_number(height - h)}" width="{w}" height="{_number(fh)}"/>')
        parts.append("</g>")
    parts.append(f'<line class="baseline" x1="0" x2="{width}" y1="{height}" y2="{height}"/></svg>')
    return Markup("".join(parts))
