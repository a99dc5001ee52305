"""Reading what a request asks for: job ids, queue names, the job search's filters, its cursor and its
limit. Each function returns a checked value or raises HttpError(400) saying what is accepted, so a
malformed request never reaches the database (where it could only fail as a 500)."""

from __future__ import annotations

import json
from collections.abc import Mapping

from .. import _ops
from ..bounds import has_lone_surrogate
from ..models import JobStatus
from .errors import HttpError
from .queries import RANGES, JobFilter

__all__ = ["BIGINT_MAX", "MAX_LIMIT", "MAX_TEXT", "cursor", "error_line", "job_filter", "job_id", "limit", "payload",
           "queue_name", "tab"]

BIGINT_MAX = 2**63 - 1
MAX_LIMIT = 500
"""Most jobs one page of the search returns."""
MAX_TEXT = 2000
"""Longest queue name, kind or search text accepted (btree entries, which hold queue names and dedupe
keys, cannot be much longer anyway)."""


def _shown(text: str) -> str:
    # Echo a bad value back, but not a megabyte of it.
    return repr(text if len(text) <= 40 else text[:40] + "...")


def _positive_int(what: str, text: str) -> int:
    if not text.isascii() or not text.isdigit():
        raise HttpError(400, f"{what} must be a positive integer, got {_shown(text)}")
    # Never hand int() more digits than a bigint has: past 4,300 it raises ValueError (a 500), and long
    # before that the conversion costs time quadratic in the length.
    digits = text.lstrip("0")
    value = int(digits) if 0 < len(digits) <= len(str(BIGINT_MAX)) else (0 if not digits else BIGINT_MAX + 1)
    if not 1 <= value <= BIGINT_MAX:
        raise HttpError(400, f"{what} must be a positive integer up to {BIGINT_MAX}, got {_shown(text)}")
    return value


def job_id(text: str) -> int:
    """A job id from a URL: decimal digits, 1..BIGINT_MAX."""
    return _positive_int("a job id", text)


def _text(what: str, text: str) -> str:
    if "\x00" in text:
        raise HttpError(400, f"{what} must not contain NUL characters")
    if has_lone_surrogate(text):
        raise HttpError(400, f"{what} must be UTF-8 text (it holds a lone surrogate)")
    if len(text) > MAX_TEXT:
        raise HttpError(400, f"{what} is longer than {MAX_TEXT} characters")
    return text


def queue_name(text: str) -> str:
    """A queue name from a URL: any non-empty text without NUL, up to MAX_TEXT characters."""
    if not text:
        raise HttpError(400, "the queue name must not be empty")
    return _text("the queue name", text)


def _optional(params: Mapping[str, str], key: str, what: str) -> str | None:
    value = params.get(key, "")
    return _text(what, value) if value != "" else None


def job_filter(params: Mapping[str, str]) -> JobFilter:
    """The search's filters from query parameters `status`, `queue`, `kind`, `q` (text in the kind,
    the dedupe key or the error), `payload` (JSON the payload contains) and `error_line` (a dead-letter group's
    first line of error, as a JSON string); an absent or empty parameter filters nothing. The status
    must be one of pgq's (any case)."""
    status_text = _optional(params, "status", "status")
    status = None
    if status_text is not None:
        try:
            status = JobStatus(status_text.lower())
        except ValueError:
            valid = ", ".join(s.value for s in JobStatus)
            raise HttpError(400, f"unknown status {_shown(status_text)} (expected one of: {valid})") from None
    text = _optional(params, "q", "the search text")
    return JobFilter(status=status, queue=_optional(params, "queue", "the queue"),
                     kind=_optional(params, "kind", "the kind"),
                     text=None if text is None or not text.strip() else text.strip(),
                     payload=payload(params), error_line=error_line(params))


def error_line(params: Mapping[str, str]) -> str | None:
    """Query parameter `error_line`: a JSON string, the first line of the error of a dead-letter group
    (JSON so that the group without error text, "", is a value too); None when absent. 400 for
    anything else, or a string that is not one line of at most ERROR_LINE_CHARS characters."""
    text = _optional(params, "error_line", "the error line")
    if text is None:
        return None
    try:
        value = json.loads(text)
    except (ValueError, RecursionError):
        value = None
    if not _ops.is_error_line(value):
        raise HttpError(400, f"error_line must be a JSON string of one line, at most {_ops.ERROR_LINE_CHARS} "
                             f"characters; got {_shown(text)}")
    return value


def payload(params: Mapping[str, str]) -> str | None:
    """Query parameter `payload`: JSON text (the payload must contain it, jsonb `@>`), re-encoded;
    None when absent or blank. 400 for text that is not JSON, or holds NUL characters."""
    text = _optional(params, "payload", "the payload filter")
    if text is None or not text.strip():
        return None
    try:
        value = json.loads(text)
        encoded = json.dumps(value, ensure_ascii=False, allow_nan=False)
    except (ValueError, RecursionError):
        raise HttpError(400, f"the payload filter must be JSON, e.g. {{\"tenant\": 7}}; got {_shown(text)}") from None
    if "\\u0000" in encoded or "\x00" in encoded:
        raise HttpError(400, "the payload filter must not contain NUL characters")
    if has_lone_surrogate(encoded):
        raise HttpError(400, "the payload filter must be UTF-8 text (it holds a lone surrogate)")
    return encoded


def limit(params: Mapping[str, str], default: int) -> int:
    """Query parameter `limit`: 1..MAX_LIMIT, `default` when absent or empty."""
    text = params.get("limit", "")
    if text == "":
        return default
    value = _positive_int("limit", text) if text.isascii() and text.isdigit() else None
    if value is None or value > MAX_LIMIT:
        raise HttpError(400, f"limit must be an integer in 1..{MAX_LIMIT}, got {_shown(text)}")
    return value


def cursor(params: Mapping[str, str]) -> int | None:
    """Query parameter `cursor`: the `next_cursor` of the previous page (a job id), or None when absent
    or empty (the first page)."""
    text = params.get("cursor", "")
    return None if text == "" else _positive_int("cursor (the next_cursor of a previous page)", text)


def tab(params: Mapping[str, str], tabs: tuple[str, ...]) -> str:
    """Query parameter `tab`: one of `tabs` (the first when absent or empty); 400 otherwise."""
    text = params.get("tab", "")
    if text == "":
        return tabs[0]
    if text not in tabs:
        raise HttpError(400, f"unknown tab {_shown(text)} (expected one of: {', '.join(tabs)})")
    return text


def chart_range(params: Mapping[str, str]) -> str:
    """Query parameter `range`: a chart's window, one of queries.RANGES ("1h" when absent or empty); 400 otherwise."""
    text = params.get("range", "")
    if text == "":
        return "1h"
    if text not in RANGES:
        raise HttpError(400, f"unknown range {_shown(text)} (expected one of: {', '.join(RANGES)})")
    return text
