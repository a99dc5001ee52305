"""Rendering for the terminal: aligned tables, compact ages and durations, safe cells, JSON values."""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Callable, Collection, Mapping, Sequence
from typing import Any

from ..models import Dependencies, jsonable
from .args import UNIT_SECONDS

__all__ = ["cell", "dependencies_json", "format_age", "format_duration", "format_relative", "jsonable", "print_rows",
           "render_table", "seconds_of"]


def render_table(headers: Sequence[str], rows: Sequence[Sequence[str]], right: Collection[int] = ()) -> str:
    """Render an aligned text table: a header line, then one line per row; columns separated by two
    spaces, those whose index is in `right` right-aligned. Trailing spaces are stripped."""
    widths = [len(h) for h in headers]
    for row in rows:
        for i, cell in enumerate(row):
            widths[i] = max(widths[i], len(cell))

    def line(cells: Sequence[str]) -> str:
        parts = [c.rjust(w) if i in right else c.ljust(w) for i, (c, w) in enumerate(zip(cells, widths, strict=True))]
        return "  ".join(parts).rstrip()

    return "\n".join([line(headers), *(line(r) for r in rows)])


def format_age(seconds: float | None, *, sep: str = "", none: str = "-") -> str:
    """Format a duration in seconds compactly: ``45s``, ``3m05s``, ``2h07m``, ``3d04h`` (`sep` between the
    two units, e.g. " " for ``3m 05s``); `none` for None."""
    if seconds is None:
        return none
    s = max(0, int(seconds))
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m{sep}{s % 60:02d}s"
    if s < 86_400:
        return f"{s // 3600}h{sep}{s % 3600 // 60:02d}m"
    return f"{s // 86_400}d{sep}{s % 86_400 // 3600:02d}h"


def format_duration(value: dt.timedelta) -> str:
    """Format a duration exactly, in the units `parse_duration` reads: ``7d``, ``1h30m``, ``2.5s``, ``0s``."""
    rest = value.total_seconds()
    parts: list[str] = []
    for unit, size in UNIT_SECONDS.items():
        if unit == "s":
            if rest or not parts:
                parts.append(f"{rest:g}s")
        elif rest >= size:
            count = int(rest // size)
            parts.append(f"{count}{unit}")
            rest -= count * size
    return "".join(parts)


def format_relative(when: dt.datetime, now: dt.datetime, *, sep: str = "") -> str:
    """Format `when` relative to `now`: ``now``, ``in 4m05s`` or ``4m05s ago`` (`sep` as in format_age)."""
    delta = (when - now).total_seconds()
    if abs(delta) < 1:
        return "now"
    return f"in {format_age(delta, sep=sep)}" if delta > 0 else f"{format_age(-delta, sep=sep)} ago"


def seconds_of(value: dt.timedelta | float | None) -> float | None:
    """`value` in seconds (a timedelta's total, a number as is); None stays None."""
    if value is None:
        return None
    return value.total_seconds() if isinstance(value, dt.timedelta) else float(value)


def cell(text: str, limit: int | None = None) -> str:
    """Make `text` safe for one table cell: control characters escaped, cut to `limit` with an ellipsis."""
    safe = "".join(ch if ch.isprintable() else repr(ch)[1:-1] for ch in text)
    if limit is not None and len(safe) > limit:
        return safe[: limit - 1] + "…"
    return safe


def print_rows(rows: Sequence[Mapping[str, Any]], as_json: bool, table: Callable[[Sequence[Mapping[str, Any]]], str]
               ) -> None:
    """Print `rows` as an indented JSON array (`as_json`) or as the text `table(rows)` renders."""
    if as_json:
        print(json.dumps([jsonable(row) for row in rows], indent=2))
    else:
        print(table(rows))


def dependencies_json(deps: Dependencies) -> dict[str, Any]:
    """A job's dependencies as JSON values (`pgq jobs show --json`, the dashboard's API):
    `pending_parents`, `parent_count`, `child_count`, and the `parents` and `children` read, each with
    id, kind, status, needs_success and parent_outcome."""
    return {name: jsonable(getattr(deps, name))
            for name in ("pending_parents", "parent_count", "child_count", "parents", "children")}
