"""How the dashboard shows values: the Jinja2 environment of its templates (autoescaping on, undefined
names an error) and its filters, and the JSON form of jobs and rows for the API. Ages and relative
times are computed against the database clock the page was read at, passed in as `now`."""

from __future__ import annotations

import dataclasses
import datetime as dt
import json
import re
from collections.abc import Mapping
from typing import Any
from urllib.parse import urlencode

import jinja2

from ..bounds import Undecodable, undecodable_fields
from ..cli import render
from ..cli.render import dependencies_json
from ..models import Job, JobStatus, jsonable

__all__ = [
    "NONE_SHOWN",
    "DetailTime",
    "dependencies_json",
    "environment",
    "fact_time",
    "format_age",
    "format_clock",
    "format_duration",
    "format_relative",
    "format_time",
    "format_window",
    "job_json",
    "job_row_json",
    "jsonable",
    "pretty_json",
    "progress_fraction",
    "queue_path",
    "reason_parts",
]

NONE_SHOWN = "\u2013"
"""What a missing value is shown as: an en dash."""


def format_age(seconds: float | None) -> str:
    """A duration in seconds, compactly: ``45s``, ``3m 05s``, ``2h 07m``, ``3d 04h``; NONE_SHOWN for None."""
    return render.format_age(seconds, sep=" ", none=NONE_SHOWN)


def format_relative(when: dt.datetime | None, now: dt.datetime) -> str:
    """`when` relative to `now`: ``5s ago``, ``in 2m 10s``, ``now``; NONE_SHOWN for None."""
    return NONE_SHOWN if when is None else render.format_relative(when, now, sep=" ")


def format_time(when: dt.datetime | None) -> str:
    """A timestamp in UTC to the second: ``2026-11-25 10:42:07 UTC``; NONE_SHOWN for None."""
    if when is None:
        return NONE_SHOWN
    return when.astimezone(dt.UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def format_duration(value: dt.timedelta | None) -> str:
    """How long something took: ``230 ms`` under a second, else as `format_age`; NONE_SHOWN for None."""
    if value is None:
        return NONE_SHOWN
    seconds = value.total_seconds()
    return f"{seconds * 1000:.0f} ms" if seconds < 1 else format_age(seconds)


def format_window(seconds: float) -> str:
    """A rate limit's window: ``second``, ``minute``, ``hour``, ``day``, else ``90 s``."""
    named = {1.0: "second", 60.0: "minute", 3600.0: "hour", 86400.0: "day"}
    return named.get(float(seconds)) or f"{seconds:g} s"


def pretty_json(value: Any) -> str:
    """A JSON value indented for reading (not escaped: the template escapes it); a value that could
    not be decoded (pgq.bounds.Undecodable) or is nested too deeply to indent, said so instead."""
    if isinstance(value, Undecodable):
        return f"(not shown: {value.size} bytes of JSON {value.reason})"
    try:
        return json.dumps(value, indent=2, ensure_ascii=False, sort_keys=False)
    except RecursionError:
        return "(not shown: nested too deeply to indent)"


def _first_line(text: str | None) -> str:
    return "" if not text else text.strip().splitlines()[0] if text.strip() else ""


def _query(params: Mapping[str, Any]) -> str:
    return urlencode({k: v for k, v in params.items() if v not in (None, "")})


_PLAIN_NAME = re.compile(r"[A-Za-z0-9_~@:-][A-Za-z0-9_~@:.-]*")


def queue_path(name: str) -> str:
    """The path of queue `name`'s page below the dashboard's base: ``/queues/<name>`` for a plain name
    (letters, digits, ``_~@:-.``, not starting with a dot), else ``/queue?name=<name>``: a name with
    a slash, a dot segment or a percent sign could be rewritten by a browser or a proxy on the way."""
    if _PLAIN_NAME.fullmatch(name):
        return "/queues/" + name
    return "/queue?" + urlencode({"name": name})


TIME_FACTS = ("run_at", "until", "paused_at", "lease_expires_at", "started_at", "finished_at")
"""The facts of pgq.explain that are timestamps (ISO 8601 text in its JSON)."""


def fact_time(value: Any) -> dt.datetime | None:
    """A timestamp fact of pgq.explain (ISO 8601 text) as a datetime; None for anything else."""
    if not isinstance(value, str):
        return None
    try:
        when = dt.datetime.fromisoformat(value)
    except ValueError:
        return None
    return when if when.tzinfo is not None else when.replace(tzinfo=dt.UTC)


_DETAIL_TIME = re.compile(r"\d{4}-\d{2}-\d{2}[ T]\d{2}:\d{2}:\d{2}(?:\.\d+)?(?:Z|[+-]\d{2}(?::?\d{2})?)?")


@dataclasses.dataclass(frozen=True, slots=True)
class DetailTime:
    """A timestamp in the sentence of a reason (see `reason_parts`): `at`, the fact it is (`fact`, one
    of TIME_FACTS, or None), and whether it stands inside parentheses (`nested`: its relative time
    then follows a comma, not parentheses of its own)."""

    at: dt.datetime
    fact: str | None
    nested: bool


def reason_parts(code: str, detail: str, facts: Mapping[str, Any]) -> list[str | DetailTime]:
    """The sentence pgq.explain wrote for a reason (`detail`), in parts for the job page: text, and each
    timestamp in it (PostgreSQL's text of a timestamptz, to the microsecond) as a DetailTime, so that
    the page shows it readably with its relative time. Its leading words that repeat the reason's
    `code` ("finished: ", "running ", "scheduled ") are left out: the page names the code beside it.
    A detail without timestamps (or in a DateStyle other than ISO) is one text part."""
    label = code.replace("_", " ")
    for lead in (label + ": ", label + " "):
        if detail.startswith(lead):
            detail = detail[len(lead):]
            break
    times = {key: when for key in TIME_FACTS if (when := fact_time(facts.get(key))) is not None}
    parts: list[str | DetailTime] = []
    end = 0
    for match in _DETAIL_TIME.finditer(detail):
        try:
            when = dt.datetime.fromisoformat(match.group(0))
        except ValueError:
            continue
        when = when if when.tzinfo is not None else when.replace(tzinfo=dt.UTC)
        before = detail[:match.start()]
        parts.append(detail[end:match.start()])
        fact = next((key for key, at in times.items() if at == when), None)
        parts.append(DetailTime(when, fact, before.count("(") > before.count(")")))
        end = match.end()
    parts.append(detail[end:])
    return [p for p in parts if p != ""]


def format_clock(when: dt.datetime, now: dt.datetime) -> str:
    """A time readably and short, in UTC: ``14:05:09 UTC`` on the day of `now` (UTC), else
    ``2026-11-28 14:05 UTC``."""
    at = when.astimezone(dt.UTC)
    if at.date() == now.astimezone(dt.UTC).date():
        return at.strftime("%H:%M:%S UTC")
    return at.strftime("%Y-%m-%d %H:%M UTC")


def progress_fraction(progress: Any) -> float | None:
    """The fraction done (0..1) a job's progress reports, for a bar: a number field `pct` or
    `percent` (0..100), `fraction` (0..1), or `done` / `current` out of `total`; None otherwise."""
    if not isinstance(progress, Mapping):
        return None

    def number(key: str) -> float | None:
        value = progress.get(key)
        return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None

    pct = number("pct") if number("pct") is not None else number("percent")
    fraction = pct / 100 if pct is not None else number("fraction")
    if fraction is None:
        done, total = number("done") if number("done") is not None else number("current"), number("total")
        fraction = done / total if done is not None and total else None
    if fraction is None or fraction != fraction:
        return None
    return min(max(fraction, 0.0), 1.0)


def environment() -> jinja2.Environment:
    """The templates' environment: pgq/web/templates, HTML autoescaped, undefined names raising."""
    env = jinja2.Environment(
        loader=jinja2.PackageLoader("pgq.web", "templates"),
        autoescape=jinja2.select_autoescape(["html"], default_for_string=True),
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.filters.update(age=format_age, relative=format_relative, time=format_time, pretty=pretty_json,
                       first_line=_first_line, query=_query, duration=format_duration,
                       window=format_window, queue_path=queue_path,
                       fact_time=fact_time, fraction=progress_fraction, clock=format_clock)
    env.globals.update(reason_parts=reason_parts)
    env.policies["json.dumps_function"] = _tojson
    return env


def _tojson(value: Any, **options: Any) -> str:
    """`tojson` of the templates: json.dumps, but a value that cannot be decoded or is nested too
    deeply to encode (stored before revision 0019) is shown as a string saying so."""
    if isinstance(value, Undecodable):
        value = f"(not shown: {value.size} bytes of JSON {value.reason})"
    try:
        return json.dumps(value, **options)
    except RecursionError:
        return json.dumps("(not shown: nested too deeply)", **options)


def job_row_json(row: Mapping[str, Any]) -> dict[str, Any]:
    """A row of the job search (sql/dashboard_jobs.sql, status as text) for the API, labelled as
    job_json labels a job: `last_error` only for a failed or cancelled job, the error of an earlier
    attempt otherwise as `previous_attempt_error`."""
    data = dict(row)
    finished_badly = data.get("status") in (JobStatus.FAILED.value, JobStatus.CANCELLED.value)
    error = data.get("last_error")
    data["last_error"] = error if finished_badly else None
    data["previous_attempt_error"] = None if finished_badly else error
    return data


def job_json(job: Job) -> dict[str, Any]:
    """A job for the API: every column but the lease token (which fences the running attempt and has
    no business leaving the database), timestamps in ISO 8601. `last_error` is only the error the
    job finished with (`Job.error`: a failed or cancelled job's); the error of an earlier attempt
    that is no longer the outcome (the job succeeded, or runs again) is `previous_attempt_error`.
    A payload, result or progress that cannot be decoded (pgq.bounds.Undecodable), or is nested too
    deeply to encode again, is null, and `undecodable` lists those fields."""
    data: dict[str, Any] = {}
    bad = undecodable_fields(job)
    for f in dataclasses.fields(job):
        if f.name == "lease_token" or f.name in bad:
            data[f.name] = None
            continue
        try:
            data[f.name] = jsonable(getattr(job, f.name))
        except RecursionError:  # decodable, but nested too deeply to encode again (written before 0019)
            data[f.name] = None
            bad.append(f.name)
    del data["lease_token"]
    if bad:
        data["undecodable"] = bad  # stored JSON that cannot be shown (pgq.bounds), shown as null
    # A running job holds a lease (jobs_lease_iff_running); reads never carry the token (revision 0020).
    data["lease_held"] = job.status is JobStatus.RUNNING
    data["last_error"] = job.error
    data["previous_attempt_error"] = job.previous_attempt_error
    return data
