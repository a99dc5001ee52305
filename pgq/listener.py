"""The LISTEN connection of a worker: wakes it the moment jobs are enqueued.

A `Listener` owns one autocommit connection, outside any pool (a pooled connection would be handed to
other users, and LISTEN is session state). It subscribes to channel `pgq` and calls `on_notify(payload)`
for every notification (payload: a queue name, or `*` for everyone). When notifications stay quiet
for `idle_check` seconds it pings the server, so a dead connection is noticed even without traffic.
When the connection fails (server restart, network) it reconnects with jittered exponential backoff
(tenacity) for as long as it runs, and calls `on_connect()` after every (re)connection: notifications
sent while it was away are lost, so the worker should look for jobs then. Meanwhile the worker keeps
polling on its own timer, so a missing listener only costs latency.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Any

import psycopg
import tenacity

from . import _sql
from .errors import one_line

__all__ = ["Listener"]

logger = logging.getLogger("pgq.listener")


class Listener:
    """Keeps a LISTEN connection to `conninfo` (with psycopg `connect_kwargs`) alive and forwards
    notifications on channel `pgq` to `on_notify`.

    `run()` runs until cancelled or `stop()`; it never raises for connection problems (they are logged
    and retried). `on_notify` and `on_connect` run on the event loop and must not block. The listener
    owns its connection and closes it on exit.
    """

    def __init__(
        self,
        conninfo: str,
        *,
        on_notify: Callable[[str], None],
        on_connect: Callable[[], None] | None = None,
        connect_kwargs: dict[str, Any] | None = None,
        idle_check: float = 30.0,
        max_backoff: float = 5.0,
    ) -> None:
        if not idle_check > 0 or not max_backoff > 0:
            raise ValueError("idle_check and max_backoff must be positive")
        self._conninfo = conninfo
        self._kwargs = {k: v for k, v in (connect_kwargs or {}).items() if k != "autocommit"}
        self._on_notify = on_notify
        self._on_connect = on_connect
        self._idle_check = idle_check
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
                    self._on_notify(notify.payload)
                    # Let what the notification started (a claim) take its first step before this
                    # generator goes back to waiting: that is on the wake-up's critical path.
                    await asyncio.sleep(0)
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
            wait=tenacity.wait_random_exponential(multiplier=0.05, max=self._max_backoff),
            before_sleep=_log_retry,
            reraise=True,
        )
        async for attempt in retrying:
            with attempt:
                conn = await psycopg.AsyncConnection.connect(self._conninfo, autocommit=True, **self._kwargs)
                try:
                    await conn.execute(_sql.query("listen"))
                except BaseException:
                    await conn.close()
                    raise
                logger.debug("listening on channel pgq", extra={"event": "listener_connected"})
                return conn
        raise AssertionError("unreachable")  # pragma: no cover


def _log_retry(state: tenacity.RetryCallState) -> None:
    exc = state.outcome.exception() if state.outcome is not None else None
    wait = state.next_action.sleep if state.next_action is not None else 0.0
    logger.warning("cannot open the LISTEN connection (%s); retrying in %.2f s",
                   one_line(exc) if exc else "?", wait, extra={"event": "listener_retry"})

