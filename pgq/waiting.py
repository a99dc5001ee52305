"""`Waiters`: what `Queue.wait` and `AsyncQueue.wait` share — one LISTEN connection on channel
pgq_finished per client, opened on the first wait, over which the database names each awaited job
as it finishes; the waits of those jobs are woken.

The connection lives in a daemon thread of its own (an asyncio loop running a `Listener`), so one
source serves sync and async callers alike: a wait registers a `wake` callable (`Event.set`, or a
`call_soon_threadsafe` into the caller's loop) and re-reads its job when woken. Every (re)connect
wakes every wait too, since notifications sent while no LISTEN was in place are lost.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import Callable, Mapping
from typing import Any

from .listener import Listener

__all__ = ["Waiters"]

CHANNEL = "pgq_finished"


class Waiters:
    """The waits in progress of one client, keyed by job id, and the LISTEN connection that wakes
    them. Thread-safe. `start()` opens the connection (idempotent), `close()` ends it."""

    def __init__(self, conninfo: str, connect_kwargs: Mapping[str, Any] | None = None) -> None:
        self._conninfo = conninfo
        self._kwargs = dict(connect_kwargs or {})
        self._lock = threading.Lock()
        self._wakers: dict[int, list[Callable[[], None]]] = {}
        self._listener: Listener | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._closed = False

    @property
    def listening(self) -> bool:
        """Whether the LISTEN is in place right now: a job read after this was True and found
        unfinished is sure to be woken when it finishes."""
        listener = self._listener
        return listener is not None and listener.connected

    def start(self) -> None:
        """Open the LISTEN connection in a daemon thread, unless it is open already."""
        with self._lock:
            if self._closed:
                raise RuntimeError("this client is closed")
            if self._thread is not None:
                return
            self._listener = Listener(self._conninfo, channels={CHANNEL: self._finished},
                                      on_connect=self._wake_all, connect_kwargs=self._kwargs)
            ready = threading.Event()
            self._thread = threading.Thread(target=self._serve, args=(self._listener, ready),
                                            name="pgq-waiters", daemon=True)
            self._thread.start()
        ready.wait(5)

    def add(self, job_id: int, wake: Callable[[], None]) -> None:
        """Call `wake()` (from the listening thread) when job `job_id` finishes or the connection
        is re-established; until `remove`."""
        with self._lock:
            self._wakers.setdefault(job_id, []).append(wake)

    def remove(self, job_id: int, wake: Callable[[], None]) -> None:
        """Stop calling `wake` for `job_id`."""
        with self._lock:
            wakers = self._wakers.get(job_id)
            if wakers is not None:
                wakers.remove(wake)
                if not wakers:
                    del self._wakers[job_id]

    def close(self) -> None:
        """End the LISTEN connection and its thread (idempotent)."""
        with self._lock:
            self._closed = True
            loop, listener, thread = self._loop, self._listener, self._thread
        if loop is not None and listener is not None:
            with contextlib.suppress(RuntimeError):  # the loop ended already
                loop.call_soon_threadsafe(listener.stop)
        if thread is not None:
            thread.join(10)

    def _serve(self, listener: Listener, ready: threading.Event) -> None:
        async def main() -> None:
            self._loop = asyncio.get_running_loop()
            ready.set()
            await listener.run()

        asyncio.run(main())

    def _finished(self, payload: str) -> None:
        if not payload.isdigit():
            return
        with self._lock:
            wakers = list(self._wakers.get(int(payload), ()))
        for wake in wakers:
            wake()

    def _wake_all(self) -> None:
        with self._lock:
            wakers = [w for ws in self._wakers.values() for w in ws]
        for wake in wakers:
            wake()
