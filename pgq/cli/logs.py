"""Log output of `pgq worker`: one line per event, as readable text or JSON."""

from __future__ import annotations

import asyncio
import datetime as dt
import json
import logging
import re
import sys
import time
from typing import Any, TextIO

__all__ = ["JsonLogFormatter", "TextLogFormatter", "setup_logging"]


# Attributes every LogRecord has; anything else on a record came from `extra=` and is logged as a field.
_RECORD_ATTRS = frozenset(vars(logging.LogRecord("", 0, "", 0, "", None, None))) | {"message", "asctime"}


def _extra_fields(record: logging.LogRecord) -> dict[str, Any]:
    return {k: v for k, v in vars(record).items() if k not in _RECORD_ATTRS and not k.startswith("_")}


_second: tuple[int, str] = (-1, "")
_milli: tuple[int, str] = (-1, "")


def _timestamp(record: logging.LogRecord) -> str:
    """The record's time in UTC, ISO 8601 to the millisecond with a Z."""
    return _timestamp_of(record.created)


def _timestamp_of(created: float) -> str:
    """`created` (seconds since the epoch) in UTC, ISO 8601 to the millisecond with a Z. A busy worker
    logs a line per finished job, many of them in the same millisecond: the last text made is kept
    per millisecond, and the text up to the second per second (formatting the date of each line
    from scratch was a third of that line's cost)."""
    global _second, _milli
    whole = int(created)
    frac = int((created - whole) * 1000)  # as the logging module reckons a record's msecs
    milli = whole * 1000 + frac
    if _milli[0] == milli:
        return _milli[1]
    if _second[0] != whole:
        _second = (whole, dt.datetime.fromtimestamp(whole, dt.UTC).strftime("%Y-%m-%dT%H:%M:%S"))
    text = f"{_second[1]}.{frac:03d}Z"
    _milli = (milli, text)
    return text


class JsonLogFormatter(logging.Formatter):
    """One JSON object per line: ts (UTC, ISO 8601), level, logger, message, the record's `extra`
    fields, and `exception` (the formatted traceback) when there is one."""

    def format(self, record: logging.LogRecord) -> str:
        """Return the record as one line of JSON (values json cannot encode are given as str)."""
        out: dict[str, Any] = {
            "ts": _timestamp(record),
            "level": record.levelname.lower(),
            "logger": record.name,
            "message": record.getMessage(),
        }
        out.update(_extra_fields(record))
        if record.exc_info:
            out["exception"] = self.formatException(record.exc_info)
        elif record.exc_text:
            out["exception"] = record.exc_text
        return json.dumps(out, default=str, ensure_ascii=False)


class TextLogFormatter(logging.Formatter):
    """One readable line per event: ``TS LEVEL logger: message key=value ...``; values with spaces or
    quotes are JSON-quoted, and a traceback becomes an escaped ``exception="..."`` field, so an event
    never spans several lines."""

    def format(self, record: logging.LogRecord) -> str:
        """Return the record as one line of text."""
        message = record.getMessage().replace("\n", "\\n")
        parts = [f"{_timestamp(record)} {record.levelname:<7} {record.name}: {message}"]
        fields = _extra_fields(record)
        if record.exc_info:
            fields["exception"] = self.formatException(record.exc_info)
        parts.extend(f"{k}={_logfmt(v)}" for k, v in fields.items())
        return " ".join(parts)


_QUOTED = re.compile(r'[\s"=\\]')
"""A character that makes a logfmt value need quotes (white space, quote, equals, backslash)."""


def _logfmt(value: Any) -> str:
    if type(value) is int or type(value) is float:  # the common fields (ids, attempts, durations)
        return repr(value)
    text = value if isinstance(value, str) else json.dumps(value, default=str, ensure_ascii=False)
    if text and text.isprintable() and _QUOTED.search(text) is None:
        return text
    return json.dumps(text, ensure_ascii=False)


class _StderrHandler(logging.StreamHandler):  # type: ignore[type-arg]
    """A StreamHandler on whatever `sys.stderr` is when a record is emitted: a command run in-process
    (tests, pytest's capture) leaves no handler on a stream closed since, which printed "--- Logging
    error --- I/O operation on closed file" when a later record came."""

    def __init__(self) -> None:
        super().__init__(sys.stderr)

    @property
    def stream(self) -> TextIO:
        return sys.stderr

    @stream.setter
    def stream(self, _value: TextIO) -> None:
        pass  # always the current sys.stderr


def setup_logging(level: str, fmt: str, stream: TextIO | None = None, *, quiet: bool = False) -> None:
    """Send every log record at `level` or above to `stream` (default: stderr) as one line each, in
    `fmt` "text" or "json". Replaces the root logger's handlers. `quiet`: leave out the worker's
    per-job lines below WARNING (a job's start, success, snooze, cancel and hand-back)."""
    handler = logging.StreamHandler(stream) if stream is not None else _StderrHandler()
    if quiet:
        handler.addFilter(_quiet_filter)
    handler.setFormatter(JsonLogFormatter() if fmt == "json" else TextLogFormatter())
    root = logging.getLogger()
    for old in root.handlers[:]:
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(level)
    from ..worker.outcome import set_finish_sink

    set_finish_sink(_FinishLines(handler, text=fmt != "json", quiet=quiet) if fmt != "json" or quiet else None)


def _quiet_filter(record: logging.LogRecord) -> bool:
    """`--quiet`: keep a record at WARNING or above, or one that is not a per-job line."""
    from ..worker.outcome import QUIET_EVENTS

    return record.levelno >= logging.WARNING or getattr(record, "event", None) not in QUIET_EVENTS


_PARTS_KEPT = 1024
"""The most (level, kind, queue, outcome, attempt, most attempts) keys whose constant parts a finish
line sink keeps."""


class _FinishLines:
    """The worker's finish line of a job that ended without an error, written straight to `handler`'s
    stream exactly as TextLogFormatter writes that record, while `handler` is the only one a record of
    pgq.worker reaches and nothing filters it (else the logging module writes it): a line per job
    through a LogRecord cost 10-20 us, most of a no-op job's own cost in the worker. On an event loop
    the lines of one turn of the loop are written together at its end (one system call, not one per
    job): a line may then follow a record the logging module wrote later in the same turn.

    `text` False (JSON logs): write nothing, leave every line to the logging module. `quiet` (`--quiet`,
    whose filter on `handler` drops the finish lines below WARNING): drop such a line here, before a
    LogRecord is made for the filter to drop, which cost a quiet worker more than the line it
    left out."""

    def __init__(self, handler: logging.StreamHandler, *, text: bool = True,  # type: ignore[type-arg]
                 quiet: bool = False) -> None:
        self.handler = handler
        self.text = text
        self.quiet = quiet
        self._filters = [_quiet_filter] if quiet else []
        self._only = [handler]  # the root logger's handlers while this sink writes the lines
        self.root = logging.getLogger()
        self.worker = logging.getLogger("pgq.worker")
        self._pending: list[str] = []
        self._parts: dict[tuple[int, str, str, str, int, int], tuple[str, str, str]] = {}
        # (first, last, text): every time from `first` to `last` has the stamp `text` (see _stamp_at).
        self._stamp: tuple[float, float, str] = (1.0, 0.0, "")

    def __call__(self, level: int, job: Any, outcome: str, seconds: float) -> bool:
        # Once per finished job (a no-op job's largest single cost in the worker, issue #47): the
        # checks and the duration's text are written out inline.
        handler, root, worker = self.handler, self.root, self.worker
        if (root.handlers != self._only or handler.filters != self._filters or root.filters or worker.handlers
                or worker.filters or not worker.propagate or level < handler.level):
            return False
        if self.quiet and level < logging.WARNING:
            return True  # what _quiet_filter drops: a finish line is a job_finish event
        if not self.text:
            return False
        key = (level, job.kind, job.queue, outcome, job.attempts, job.max_attempts)
        parts = self._parts.get(key)
        if parts is None:
            parts = self._learn(key)
        now = time.time()
        first, last, stamp = self._stamp
        if not first <= now <= last:
            stamp = self._stamp_at(now)
        ms = seconds * 1000
        if type(ms) is float and 0.0 <= ms < 1e12:
            # repr(round(ms, 3)), at half the cost: below 1e12 a value of 3 decimals has at most 15
            # significant digits, so its shortest repr is its %.3f text without trailing zeros (8
            # million values compared when this was written; tests/cli/test_helpers.py keeps a sample).
            duration = f"{ms:.3f}".rstrip("0")
            if duration[-1] == ".":
                duration += "0"
        else:
            duration = repr(round(ms, 3))
        job_id = str(job.id)
        line = (f"{stamp}{parts[0]}{job_id} {parts[1]}({ms:.1f} ms) event=job_finish job_id={job_id} {parts[2]}"
                f"duration_ms={duration}\n")
        try:
            loop: asyncio.AbstractEventLoop | None = asyncio.get_running_loop()
        except RuntimeError:
            loop = None
        if loop is None:  # not on an event loop's thread: now
            self._write(line)
        else:  # the lines of one turn of the event loop go out in one write, at the end of that turn
            pending = self._pending
            if not pending:
                loop.call_soon(self._flush)
            pending.append(line)
        return True

    def _stamp_at(self, now: float) -> str:
        """The time stamp of a line written at `now` (as _timestamp_of makes it), remembered with the
        times that share it: from `now` to a time checked to lie in the same millisecond. The
        millisecond _timestamp_of takes a time for never decreases as the time grows, so every time
        between two of the same millisecond is in it too: the lines that follow within it reuse the
        text after two comparisons, without _timestamp_of's call and arithmetic (a tenth of the
        line's cost)."""
        text = _timestamp_of(now)
        whole = int(now)
        frac = int((now - whole) * 1000)
        last = whole + (frac + 0.999) / 1000
        if not (last >= now and int(last) == whole and int((last - whole) * 1000) == frac):
            last = now
        self._stamp = (now, last, text)
        return text

    def _learn(self, key: tuple[int, str, str, str, int, int]) -> tuple[str, str, str]:
        """The parts of a finish line that depend only on its level, kind, queue, outcome, attempt and
        most attempts (`key`), made once for each such six (at most _PARTS_KEPT are kept): the level,
        and kind, outcome and attempt as the message and as logfmt fields write them."""
        if len(self._parts) >= _PARTS_KEPT:
            self._parts.clear()
        level, kind, queue, outcome, attempts, max_attempts = key
        parts = (f" {logging.getLevelName(level):<7} pgq.worker: job ",
                 f"{kind.replace(chr(10), chr(92) + 'n')} attempt {attempts}/{max_attempts}: "
                 f"{outcome.replace(chr(10), chr(92) + 'n')} ",
                 f"kind={_logfmt(kind)} queue={_logfmt(queue)} attempt={attempts} outcome={_logfmt(outcome)} ")
        self._parts[key] = parts
        return parts

    def _flush(self) -> None:
        lines, self._pending = self._pending, []
        self._write("".join(lines))

    def _write(self, text: str) -> None:
        handler = self.handler
        handler.acquire()
        try:
            handler.stream.write(text)
            handler.flush()
        finally:
            handler.release()

