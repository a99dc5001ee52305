"""Watchdogs for statements whose answer may never come: past a deadline they sever the connection
(shut its socket down), so the statement fails at once instead of waiting on a half-open network."""

from __future__ import annotations

import asyncio
import contextlib
import socket
import threading
from types import TracebackType
from typing import Any

import psycopg

__all__ = ["AsyncWatchdog", "Watchdog", "sever"]


def sever(conn: psycopg.Connection[Any] | psycopg.AsyncConnection[Any]) -> None:
    """Shut `conn`'s socket down in both directions, from any thread: a statement waiting on it fails
    at once with OperationalError ("server closed the connection unexpectedly") and the connection is
    broken, so a pool discards it. Cancelling the statement instead would send a cancel request and wait
    for the server's answer, which a half-open network never delivers (psycopg waits 10 s more)."""
    with contextlib.suppress(OSError, psycopg.Error):
        fd = conn.pgconn.socket
        sock = socket.socket(fileno=fd)  # borrowed: detached below, so the fd stays libpq's
        try:
            sock.shutdown(socket.SHUT_RDWR)
        finally:
            sock.detach()


class Watchdog:
    """`with Watchdog(conn, seconds):` severs `conn` (see `sever`) when the block is still running
    after `seconds` (None: never). The blocking twin of `AsyncWatchdog`; a timer thread per use."""

    def __init__(self, conn: psycopg.Connection[Any], seconds: float | None) -> None:
        self._timer = None if seconds is None else threading.Timer(seconds, sever, (conn,))

    def __enter__(self) -> None:
        if self._timer is not None:
            self._timer.daemon = True
            self._timer.start()

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        if self._timer is not None:
            self._timer.cancel()


class AsyncWatchdog:
    """`with AsyncWatchdog(conn, seconds):` severs `conn` (see `sever`) when the block is still running
    after `seconds` (None: never): the statement in flight then raises OperationalError at once. A
    timer on the running event loop; costs a few microseconds per use."""

    def __init__(self, conn: psycopg.AsyncConnection[Any], seconds: float | None) -> None:
        self._conn = conn
        self._seconds = seconds
        self._handle: asyncio.TimerHandle | None = None

    def __enter__(self) -> None:
        if self._seconds is not None:
            self._handle = asyncio.get_running_loop().call_later(self._seconds, sever, self._conn)

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        if self._handle is not None:
            self._handle.cancel()
