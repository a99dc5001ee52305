"""The cursor pgq's statements run on through a Django connection: psycopg's, driven through Django's
cursor wrapper so that Django sees them (`connection.queries`, `assertNumQueries`,
`CaptureQueriesContext`, `connection.execute_wrapper` hooks, the `django.db.backends` logger)."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any, cast

import psycopg
from django.db import Error as DjangoDatabaseError

from ..._ops.driver import install_loaders

__all__ = ["django_cursor"]


class _RawCursor(psycopg.Cursor[Any]):
    """psycopg's server-side binding cursor (Django's own bind client-side, which cannot fetch pgq's
    binary results), taking `binary` from `next_binary` when Django's wrapper calls `execute` without it."""

    next_binary: bool | None = None

    def execute(self, query: Any, params: Any = None, *, prepare: bool | None = None,
                binary: bool | None = None) -> _RawCursor:
        """psycopg's execute, with `binary` defaulting to `next_binary`."""
        super().execute(query, params, prepare=prepare, binary=self.next_binary if binary is None else binary)
        return self


class _Captured:
    """What `pgq._ops.run_sync` uses of a cursor, each `execute` going through Django's CursorWrapper
    (a CursorDebugWrapper while Django logs queries); everything else is the raw cursor's. Django
    turns database errors into its own: the psycopg error is raised again, for pgq to translate."""

    def __init__(self, raw: _RawCursor, wrapper: Any) -> None:
        object.__setattr__(self, "_raw", raw)
        object.__setattr__(self, "_wrapper", wrapper)

    def execute(self, query: Any, params: Any = None, *, binary: bool | None = None, **_: Any) -> _Captured:
        """Run `query` through Django's wrapper (psycopg's own error raised on failure)."""
        self._raw.next_binary = binary
        try:
            self._wrapper.execute(query, params)
        except DjangoDatabaseError as exc:
            if isinstance(exc.__cause__, psycopg.Error):
                raise exc.__cause__ from None
            raise
        finally:
            self._raw.next_binary = None
        return self

    def __getattr__(self, name: str) -> Any:
        return getattr(self._raw, name)

    def __setattr__(self, name: str, value: Any) -> None:
        setattr(self._raw, name, value)  # row_factory: the driver sets it per statement


@contextlib.contextmanager
def django_cursor(wrapper: Any) -> Iterator[psycopg.Cursor[Any]]:
    """A cursor on the psycopg connection of Django's connection `wrapper` (connected already), fit
    for pgq's statements (server-side binding, jsonb decoded as pgq does, where Django loads it as
    text for its JSONField), whose statements Django records and hooks as its own; closed on exit."""
    raw = _RawCursor(wrapper.connection)
    install_loaders(raw)  # pgq's: a value too deep for Python decodes as pgq.bounds.Undecodable
    try:
        yield cast(psycopg.Cursor[Any], _Captured(raw, wrapper._prepare_cursor(raw)))
    finally:
        raw.close()
