"""Argument types of the `pgq` commands: each parses one option's text or raises
argparse.ArgumentTypeError, which argparse reports as a usage error (exit 2, nothing done)."""

from __future__ import annotations

import argparse
import datetime as dt
import math
import re
from collections.abc import Callable

from ..errors import InvalidJob
from ..models import JobStatus

__all__ = [
    "BIGINT_MAX",
    "UNIT_SECONDS",
    "duration_arg",
    "int_range",
    "job_id",
    "non_empty",
    "parse_duration",
    "seconds_arg",
    "status_arg",
]

BIGINT_MAX = 2**63 - 1


def non_empty(what: str) -> Callable[[str], str]:
    """A type accepting any text but the empty string."""
    def parse(text: str) -> str:
        if not text:
            raise argparse.ArgumentTypeError(f"{what} must not be empty")
        return text

    return parse


def int_range(what: str, low: int, high: int) -> Callable[[str], int]:
    """A type accepting an integer in low..high."""
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{what} must be an integer, got {text!r}") from None
        if not low <= value <= high:
            raise argparse.ArgumentTypeError(f"{what} must be in {low}..{high}, got {value}")
        return value

    return parse


def seconds_arg(what: str, *, positive: bool) -> Callable[[str], float]:
    """A type accepting a finite number of seconds, > 0 when `positive`, else >= 0."""
    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{what} must be a number of seconds, got {text!r}") from None
        if not math.isfinite(value) or value < 0 or (positive and value == 0):
            bound = "> 0" if positive else ">= 0"
            raise argparse.ArgumentTypeError(f"{what} must be a finite number of seconds {bound}, got {text!r}")
        return value

    return parse


def job_id(text: str) -> int:
    """Parse a job id: an integer in 1..BIGINT_MAX."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"a job id is a positive integer, got {text!r}") from None
    if not 1 <= value <= BIGINT_MAX:
        raise argparse.ArgumentTypeError(f"a job id is a positive integer, got {text!r}")
    return value


def status_arg(text: str) -> JobStatus:
    """Parse a job status name, any case."""
    try:
        return JobStatus.parse(text.lower())
    except InvalidJob as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def duration_arg(text: str) -> dt.timedelta:
    """Parse a duration (see `parse_duration`)."""
    try:
        return parse_duration(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


DURATION_PART_RE = re.compile(r"(\d+(?:\.\d+)?)([dhms])")
UNIT_SECONDS = {"d": 86_400, "h": 3_600, "m": 60, "s": 1}


def parse_duration(text: str) -> dt.timedelta:
    """Parse a duration: ``7d``, ``12h``, ``30m``, ``45s``, combinations such as ``1h30m`` (largest unit
    first is not required), or a plain number of seconds (``90``, ``2.5``).

    Returns a non-negative timedelta. Raises ValueError with a message saying what is accepted.
    """
    cleaned = text.strip().lower()
    error = ValueError(f"invalid duration {text!r}: use e.g. 7d, 12h, 30m, 45s, 1h30m or plain seconds")
    if not cleaned:
        raise error
    try:
        seconds = float(cleaned)
    except ValueError:
        pos, total = 0, 0.0
        for match in DURATION_PART_RE.finditer(cleaned):
            if match.start() != pos:
                raise error from None
            total += float(match.group(1)) * UNIT_SECONDS[match.group(2)]
            pos = match.end()
        if pos != len(cleaned) or pos == 0:
            raise error from None
        seconds = total
    if not math.isfinite(seconds) or seconds < 0 or seconds > 1e12:
        raise error
    return dt.timedelta(seconds=seconds)

