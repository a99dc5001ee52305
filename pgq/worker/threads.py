"""`Threads`: the daemon threads that run a worker's plain `def` handlers."""

from __future__ import annotations

import asyncio
import collections
import contextlib
import functools
import logging
import queue as queue_module
import threading
from collections.abc import Callable
from typing import Any

__all__ = ["Outcome", "Threads", "retrieve"]

logger = logging.getLogger("pgq.worker")

Outcome = Callable[[Any, BaseException | None], None]  # (result, error) of one item, on the loop


class Threads:
    """Runs sync handlers in daemon threads, at most `size` of them, started on demand.

    Daemon threads, unlike concurrent.futures', never hold up interpreter exit: a handler abandoned
    after its timeout, or still running when the worker aborts, cannot keep the process alive.

    Few wake-ups for many short handlers. A thread is "looking" while it is awake and not running a
    handler. `submit` wakes a sleeping thread (or starts one) only when no thread is looking, and a
    thread that takes work while more waits and no other thread is looking wakes the next one. So a
    burst of short handlers is run by one or two awake threads in turn, while blocking handlers still
    each get a thread of their own within microseconds (a chain of wake-ups). Outcomes go back to
    `loop` in batches: a thread appends to a deque and wakes the loop only when no wake-up is already
    on its way (one write to the loop's self-pipe per burst). Once the loop is closed they are
    dropped (nobody waits for them any more).

    Two ways in: `submit` returns a future (for callers that await, e.g. with a timeout); `call`
    takes a callback run on the loop with the outcome, which spares a future and a task per item
    (the worker's path for sync handlers without a timeout).
    """

    def __init__(self, loop: asyncio.AbstractEventLoop, size: int, name: str) -> None:
        self._loop = loop
        self._size = size
        self._name = name
        self._items: collections.deque[tuple[Outcome, Callable[[], Any]]] = collections.deque()
        self._tokens: queue_module.SimpleQueue[bool] = queue_module.SimpleQueue()  # a sleeper wakes per token
        self._lock = threading.Lock()  # guards the counts below
        self._threads = 0
        self._looking = 0  # awake, not running a handler: will take the next item
        self._sleeping = 0  # waiting for a token
        self._closing = False
        self._done: collections.deque[tuple[Outcome, Any, BaseException | None]] = collections.deque()
        self._wake_sent = False  # a _deliver is scheduled on the loop and has not started yet

    def submit(self, fn: Callable[[], Any]) -> asyncio.Future[Any]:
        """Run `fn()` in a thread; return a future of the loop that gets its result or exception.
        Call from the loop's thread."""
        future: asyncio.Future[Any] = self._loop.create_future()
        self.call(fn, functools.partial(_settle_future, future))
        return future

    def call(self, fn: Callable[[], Any], done: Outcome) -> None:
        """Run `fn()` in a thread, then `done(result, None)` or `done(None, exception)` on the loop
        (never once the loop is closed). Call from the loop's thread. An exception from `done` is
        logged, and does not keep other outcomes from being delivered."""
        self._items.append((done, fn))
        with self._lock:
            if self._looking == 0:
                self._wake_one()

    def shutdown(self) -> None:
        """Let idle threads exit; busy ones exit when their handler returns."""
        with self._lock:
            self._closing = True
            sleepers, self._sleeping = self._sleeping, 0
            self._looking += sleepers
        for _ in range(sleepers):
            self._tokens.put(True)

    def _wake_one(self) -> None:
        # Under _lock: one more thread looking for work, a sleeper if there is one, else a new thread
        # while below `size` (at most `size` items are ever waiting or running: the worker's slots).
        if self._sleeping:
            self._sleeping -= 1
            self._looking += 1
            self._tokens.put(True)
        elif self._threads < self._size:
            self._threads += 1
            self._looking += 1
            threading.Thread(target=self._serve, name=f"{self._name}-{self._threads}", daemon=True).start()

    def _deliver(self) -> None:
        # Clear the flag before draining: an outcome appended after this line schedules another
        # _deliver, and one appended before it is drained below, so none is left behind.
        self._wake_sent = False
        done = self._done
        while done:
            callback, result, error = done.popleft()
            try:
                callback(result, error)
            except Exception:
                logger.exception("delivering a sync handler's outcome failed", extra={"event": "worker_bug"})

    def _serve(self) -> None:
        items, lock = self._items, self._lock
        while True:
            try:
                callback, fn = items.popleft()
            except IndexError:
                with lock:
                    if items:  # appended meanwhile, by a submit that counted on this thread
                        continue
                    self._looking -= 1
                    if self._closing:
                        self._threads -= 1
                        return
                    self._sleeping += 1
                self._tokens.get()  # whoever hands the token has counted this thread as looking
                continue
            with lock:
                self._looking -= 1
                if items and not self._looking:  # more work and nobody else awake for it
                    self._wake_one()
            try:
                result, error = fn(), None
            except BaseException as exc:
                result, error = None, exc
            with lock:
                self._looking += 1
            self._done.append((callback, result, error))
            if not self._wake_sent:
                self._wake_sent = True
                with contextlib.suppress(RuntimeError):  # the loop is closed: the worker is gone
                    self._loop.call_soon_threadsafe(self._deliver)
            del callback, fn, result, error


def _settle_future(future: asyncio.Future[Any], result: Any, error: BaseException | None) -> None:
    if future.cancelled():
        return
    if error is None:
        future.set_result(result)
    else:
        future.set_exception(error)


def retrieve(future: asyncio.Future[Any]) -> None:
    if not future.cancelled():
        future.exception()

