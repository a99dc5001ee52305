"""The bounds of JSON that callers store (revision 0019), and what stands for a stored value that
cannot be decoded.

The database refuses a payload, result or progress nested more than `MAX_JSON_DEPTH` levels below
its top (the top value is level 0) or larger than `MAX_JSONB_BYTES` as jsonb, and a trace context
other than ``{"traceparent": ..., "tracestate": ...}`` with strings of at most
`MAX_TRACEPARENT_CHARS` and `MAX_TRACESTATE_CHARS` characters. The client checks the depth before
sending (`check_depth`), so a value too deep is an InvalidJob that sent nothing.

Rows written before revision 0019 (or by a superuser with the triggers disabled) may still hold a
value Python's json module cannot decode (nested past its recursion limit): pgq's jsonb loader
decodes it as an `Undecodable`, so that one such row never fails a whole claim or listing.
"""

from __future__ import annotations

from typing import Any

from .errors import InvalidJob, PgqError

__all__ = ["MAX_JSONB_BYTES", "MAX_JSON_DEPTH", "MAX_TRACEPARENT_CHARS", "MAX_TRACESTATE_CHARS", "Undecodable",
           "UndecodableJob", "check_depth", "checked", "undecodable_fields"]

MAX_JSON_DEPTH = 64
"""Levels a stored JSON value may nest below its top (`strict $.**{65}` finds nothing)."""

MAX_JSONB_BYTES = 8 * 1024 * 1024
"""The largest stored JSON value, in bytes of jsonb (uncompressed). The client's own limit, 1,000,000
bytes of JSON text (models.MAX_PAYLOAD_BYTES), always fits: jsonb takes at most about six bytes per
byte of compact JSON text (an array of one-digit numbers)."""

MAX_TRACEPARENT_CHARS = 256
"""The longest traceparent a stored trace context may hold (version 00's is 55 characters)."""

MAX_TRACESTATE_CHARS = 512
"""The longest tracestate a stored trace context may hold (W3C: what every vendor must propagate)."""


class Undecodable:
    """A stored JSON value that could not be decoded (`reason`), in place of the value: in the job
    a claim or a read returned. Falsy; compares equal to nothing but itself."""

    __slots__ = ("reason", "size")

    def __init__(self, reason: str, size: int) -> None:
        self.reason = reason
        self.size = size

    def __repr__(self) -> str:
        return f"<undecodable JSON of {self.size} bytes: {self.reason}>"

    def __bool__(self) -> bool:
        return False


class UndecodableJob(PgqError):
    """A stored job holds JSON pgq cannot decode (written before revision 0019's bounds, or past them
    by a superuser): its payload, result or progress nests too deeply for Python."""


def undecodable_fields(job: Any) -> list[str]:
    """The names of `job`'s fields (payload, result, progress) that hold an Undecodable."""
    return [name for name in ("payload", "result", "progress") if isinstance(getattr(job, name, None), Undecodable)]


def checked(job: Any) -> Any:
    """Return `job` (a Job) unchanged; raise UndecodableJob naming it and its undecodable fields if
    it has any. For reads: a job returned to a caller either decodes whole or is an error."""
    bad = undecodable_fields(job)
    if bad:
        value: Undecodable = getattr(job, bad[0])
        raise UndecodableJob(f"job {job.id} ({job.kind}): its stored {' and '.join(bad)} cannot be decoded "
                             f"({value.reason}); cancel or delete it")
    return job


# Outside its strings, JSON text holds only brackets, punctuation and the characters of numbers,
# true, false and null; all brackets become square ones (only their nesting matters).
_SQUARE = bytes.maketrans(b"{}", b"[]")
_DROP = b"0123456789+-.eEtrufalsn,: \t\r\n"


def check_depth(what: str, text: str) -> None:
    """Raise InvalidJob unless the JSON `text` nests at most MAX_JSON_DEPTH levels below its top,
    the database's bound. Reads nothing but the text: one with at most MAX_JSON_DEPTH opening
    brackets is within the bound and costs two counts; others a few passes of C string methods."""
    if text.count("[") + text.count("{") <= MAX_JSON_DEPTH:
        return
    data = text.encode()  # ASCII from pgq's encoder: bytes methods are the fastest
    if b"\\" in data:  # escaped backslashes, then escaped quotes: every quote left delimits a string
        data = data.replace(b"\\\\", b"").replace(b'\\"', b"")
    # Each string becomes the scalar 0; then empty containers go (no value nests below them), then
    # the scalars: every container left held at least one value, so the rounds that remove the
    # innermost pairs until nothing is left count the deepest level holding a value.
    shape = b"0".join(data.split(b'"')[::2]).translate(_SQUARE).replace(b"[]", b"").translate(None, _DROP)
    for _ in range(MAX_JSON_DEPTH):
        shape = shape.replace(b"[]", b"")
        if not shape:
            return
    raise InvalidJob(f"{what} nests deeper than {MAX_JSON_DEPTH} levels")
