"""Editing limits from the dashboard (`POST /limits`, admin only): a kind's concurrency limit, rate
limit or per-group limits, set or removed through pgq's client (Queue.set_concurrency_limit,
set_rate_limit, set_group_limits), so the dashboard changes them exactly as Python and the CLI do."""

from __future__ import annotations

from collections.abc import Mapping

from . import actions, queries
from .dashboard import Dashboard
from .errors import HttpError
from .params import MAX_TEXT

__all__ = ["apply_form"]


def _count(fields: Mapping[str, str], key: str) -> int | None:
    text = fields.get(key, "").strip()
    if text == "":
        return None
    if not text.isascii() or not text.isdigit() or len(text) > 9 or int(text) < 1:
        raise HttpError(400, f"{key} must be a whole number >= 1 (empty: no limit), got {text[:40]!r}")
    return int(text)


def _rate(fields: Mapping[str, str], key: str) -> str | None:
    text = fields.get(key, "").strip()
    return text[:100] or None


async def apply_form(dash: Dashboard, fields: Mapping[str, str], *, actor: str | None = None) -> None:
    """Apply one limits form: `limit` is ``concurrency`` (field `max_running`), ``rate`` (field `rate`,
    e.g. ``100/s``) or ``group`` (fields `max_running` and `rate`, per group key) for kind `kind`; an
    empty value removes that limit. Raises HttpError 403 (read-only, or a role that is not pgq's
    admin: limits are the admin's), 400 for a bad form (nothing changed), and pgq's InvalidJob (400)
    for a rate it cannot read. A change is recorded in pgq.control_audit with `actor` (default: the
    request's) and the database role."""
    if dash.settings.read_only:
        raise HttpError(403, actions.READ_ONLY)
    refusal = (await dash.read(queries.rights())).refusal("limits")
    if refusal is not None:
        raise HttpError(403, refusal)
    kind = fields.get("kind", "").strip()
    if not kind or len(kind) > MAX_TEXT or "\x00" in kind:
        raise HttpError(400, "kind must be a non-empty text without NUL characters")
    which = fields.get("limit", "")
    queue = await dash.queue()
    actor = actor or dash.current.actor
    if which == "concurrency":
        await queue.set_concurrency_limit(kind, _count(fields, "max_running"), actor=actor)
    elif which == "rate":
        await queue.set_rate_limit(kind, _rate(fields, "rate"), actor=actor)
    elif which == "group":
        await queue.set_group_limits(kind, concurrency=_count(fields, "max_running"), rate=_rate(fields, "rate"),
                                     actor=actor)
    else:
        raise HttpError(400, "limit must be concurrency, rate or group")
