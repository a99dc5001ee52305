"""A LISTEN connection: a worker's wakes it the moment jobs are enqueued or one of its jobs is cancelled.

A `Listener` owns one autocommit connection, outside any pool (a pooled connection would be handed to
other users, and LISTEN is session state). It subscribes to the channels it is given and calls each
channel's callback with the payload of every notification on it (a worker listens on `pgq`, whose
payload is a queue name or `*` for everyone, and on `pgq_cancel`, whose payload names a cancelled
attempt). When notifications stay quiet
for `idle_check` seconds it pings the server, so a dead connection is noticed even without traffic;
a ping unanswered after `ping_timeout` seconds (a half-open network) severs the connection.
When the connection fails (server restart, network) it reconnects with jittered exponential backoff
(tenacity) for as long as it runs, and calls `on_connect()` after every (re)connection: notifications
sent while it was away are lost, so the worker should look for jobs then. Meanwhile the worker keeps
polling on its own timer, so a missing listener only costs latency.
"""

from __future__ import annotations

import asyncio
import logging
import re
from collections.abc import Callable, Mapping
from typing import Any

import psycopg
import tenacity
from psycopg import sql

from . import _ops, _sql
from ._jitter import exponential_wait
from .errors import one_line

__all__ = ["Listener"]

_CHANNEL = re.compile(r"[a-z_][a-z0-9_]*")

logger = logging.getLogger("pgq.listener")


class Listener:
    """Keeps a LISTEN connection to `conninfo` (with psycopg `connect_kwargs`) alive and forwards the
    payload of each notification on a channel of `channels` to that channel's callback.

    `run()` runs until cancelled or `stop()`; it never raises for connection problems (they are logged
    and retried). The callbacks and `on_connect` run on the event loop and must not block. The
    listener owns its connection and closes it on exit.
    """

    def __init__(
        self,
        conninfo: str,
        *,
        channels: Mapping[str, Callable[[str], None]],
        on_connect: Callable[[], None] | None = None,
        connect_kwargs: dict[str, Any] | None = None,
        idle_check: float = 30.0,
        max_backoff: float = 5.0,
        ping_timeout: float = 10.0,
    ) -> None:
        if not idle_check > 0 or not max_backoff > 0 or not ping_timeout > 0:
            raise ValueError("idle_check, max_backoff and ping_timeout must be positive")
        if not channels:
            raise ValueError("a Listener needs at least one channel")
        self._conninfo = conninfo
        self._kwargs = {k: v for k, v in (connect_kwargs or {}).items() if k != "autocommit"}
        self._channels = dict(channels)
        # LISTEN takes no parameters; plain lower-case names need no quoting, and unquoted they read
        # in pg_stat_activity as a DBA would type them ("LISTEN pgq; LISTEN pgq_cancel").
        bad = [name for name in self._channels if not _CHANNEL.fullmatch(name)]
        if bad:
            raise ValueError(f"channel names must match {_CHANNEL.pattern}: {bad}")
        self._listen = sql.SQL("; ".join(f"LISTEN {name}" for name in self._channels))
        self._on_connect = on_connect
        self._idle_check = idle_check
        self._ping_timeout = ping_timeout
        self._max_backoff = max_backoff
        self._stopped = asyncio.Event()
        self._connected = False
        self.reconnects = 0
        """How many times the connection was re-established after a failure."""

    @property
    def connected(self) -> bool:
        """Whether the LISTEN is in place right now."""
        return self._connected

    def stop(self) -> None:
        """Ask `run()` to return (from the event loop's thread)."""
        self._stopped.set()

    async def run(self) -> None:
        """Listen until stopped or cancelled, reconnecting whenever the connection fails."""
        stop_wait = asyncio.ensure_future(self._stopped.wait())
        try:
            while not self._stopped.is_set():
                session = asyncio.ensure_future(self._session())
                done, _ = await asyncio.wait({session, stop_wait}, return_when=asyncio.FIRST_COMPLETED)
                if session not in done:
                    session.cancel()
                    await asyncio.gather(session, return_exceptions=True)
                    return
                exc = session.exception()
                if exc is not None:  # not a connection problem: a bug, or a callback that raised
                    logger.error("listener failed; restarting it", exc_info=exc,
                                 extra={"event": "listener_error"})
                    await asyncio.sleep(self._max_backoff)
        finally:
            stop_wait.cancel()
            self._connected = False

    async def _session(self) -> None:
        # One connection's life: connect (retrying), LISTEN, pump notifications until it fails.
        conn = await self._connect()
        try:
            self._connected = True
            if self._on_connect is not None:
                self._on_connect()
            while True:
                async for notify in conn.notifies(timeout=self._idle_check):
                    callback = self._channels.get(notify.channel)
                    if callback is not None:
                        callback(notify.payload)
                    # Let what the notification started (a claim) take its first step before this
                    # generator goes back to waiting: that is on the wake-up's critical path.
                    await asyncio.sleep(0)
                with _ops.AsyncWatchdog(conn, self._ping_timeout):  # no answer: a half-open network
                    await conn.execute(_sql.query("ping"))  # quiet for idle_check: is anyone there?
        except psycopg.OperationalError as exc:
            self.reconnects += 1
            logger.warning("LISTEN connection lost (%s); reconnecting", one_line(exc),
                           extra={"event": "listener_lost"})
        finally:
            self._connected = False
            await conn.close()

    async def _connect(self) -> psycopg.AsyncConnection[Any]:
        retrying = tenacity.AsyncRetrying(
            retry=tenacity.retry_if_exception_type(psycopg.OperationalError),
            wait=exponential_wait(0.05, maximum=self._max_backoff),
            before_sleep=_log_retry,
            reraise=True,
        )
        async for attempt in retrying:
            with attempt:
                conn = await psycopg.AsyncConnection.connect(self._conninfo, autocommit=True, **self._kwargs)
                try:
                    await conn.execute(self._listen)
                except BaseException:
                    await conn.close()
                    raise
                logger.debug("listening on channels %s", ", ".join(self._channels),
                             extra={"event": "listener_connected"})
                return conn
        raise AssertionError("unreachable")  # pragma: no cover


def _log_retry(state: tenacity.RetryCallState) -> None:
    exc = state.outcome.exception() if state.outcome is not None else None
    wait = state.next_action.sleep if state.next_action is not None else 0.0
    logger.warning("cannot open the LISTEN connection (%s); retrying in %.2f s",
                   one_line(exc) if exc else "?", wait, extra={"event": "listener_retry"})

