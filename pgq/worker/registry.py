"""`Registry`: the worker's row in the worker registry (pgq.workers, revision 0013).

Written at start (`register`), marked draining when the worker stops claiming (`drain`), deleted on a
clean stop (`unregister`). In between, the row is refreshed by the rescue run of the maintenance loop,
which every worker does every rescue interval anyway: the statement that takes the rescue lock also
refreshes the row (sql/maintenance_lock_seen.sql), so the registry costs no round trip of its own,
and none per job. `run()` covers a worker whose rescue does not run (maintenance off, or refused to
its role): it wakes every interval and refreshes the row only when no rescue did for 1.5 intervals.
A row found pruned (the worker was cut off for three leases) is registered again. The row records
`refresh_s` (the interval plus its jitter): readers call a worker live while it refreshed within three
of them (pgq.worker_live).

Failures never stop the worker: a registration or refresh that fails is logged and tried again at
the next interval.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket
import time
from collections.abc import Iterable, Sequence

import psycopg

from .. import _ops
from ..bounds import MAX_LEASE_S
from ..client import AsyncQueue
from ..errors import PgqError, one_line
from ..metrics import _version

__all__ = ["Registry"]

logger = logging.getLogger("pgq.worker")


def _raise_if_cancelling() -> None:
    """Raise CancelledError when this task was asked to stop. A cancellation that arrives during a
    query can come back from psycopg as QueryCanceled (a psycopg.Error, which the registry logs and
    goes on after): the request would be lost, and the worker's shutdown would wait for this task
    for ever (seen in CI: a worker asked to stop before it ran hung at its exit)."""
    task = asyncio.current_task()
    if task is not None and task.cancelling():
        raise asyncio.CancelledError


class Registry:
    """The registry row of one run of a worker named `claimed_by`, serving `queues` (None: all) with
    handlers for `kinds`, `slots` at once, `lease_s` leases, refreshed every `interval` seconds."""

    def __init__(self, queue: AsyncQueue, *, claimed_by: str, queues: Sequence[str] | None, kinds: Iterable[str],
                 slots: int, lease_s: float, interval: float) -> None:
        self._queue = queue
        self._interval = interval
        self._register = _ops.worker_register(
            claimed_by=claimed_by, host=socket.gethostname(), pid=os.getpid(), queues=queues, kinds=sorted(kinds),
            slots=slots, lease_s=lease_s, refresh_s=min(interval * 1.1, MAX_LEASE_S), version=_version())
        self.row: _ops.WorkerRow | None = None
        """The registered row (None: not registered, or its registration failed)."""
        self.enabled = True
        """False once the database refused the registry to the worker's role (said once): the worker
        then runs without a row, and its rescue without refreshing or pruning."""
        self._refreshed = -float("inf")  # monotonic time of the last refresh that found the row

    async def register(self) -> bool:
        """Write this worker's row; True when it is written (a failure is logged)."""
        if not self.enabled:
            return False
        try:
            self.row = await self._queue._run(self._register)
        except psycopg.errors.InsufficientPrivilege as exc:
            self.refused(exc)
            return False
        except (psycopg.Error, PgqError) as exc:
            logger.warning("worker registry: cannot register (%s); trying again in %.0f s", one_line(exc),
                           self._interval, extra={"event": "worker_register_error"})
            return False
        self._refreshed = time.monotonic()
        logger.debug("worker registry: registered as %s", self.row.id, extra={"event": "worker_register"})
        return True

    def for_refresh(self) -> _ops.WorkerRow | None:
        """The row for a maintenance statement to refresh (None: not registered)."""
        return self.row if self.enabled else None

    def refused(self, exc: psycopg.Error) -> None:
        """The database refused the registry to this worker's role (a role without pgq's grants of
        revision 0013): say so once and go on without it."""
        if self.enabled:
            logger.warning("worker registry disabled in this worker: %s; it is not listed by `pgq workers` "
                           "(run `pgq roles --apply`, or grant EXECUTE on pgq.worker_* to its role)", one_line(exc),
                           extra={"event": "worker_register_refused"})
        self.enabled, self.row = False, None

    async def refreshed(self, row: _ops.WorkerRow | None) -> None:
        """After a statement refreshed `row` (from `for_refresh`): note it, or register again when
        the row was gone (pruned) or never written."""
        if row is not None and row.found:
            self._refreshed = time.monotonic()
        elif self.enabled:
            await self.register()

    async def run(self) -> None:
        """Register (unless done), then every interval refresh the row when nothing else did for 1.5
        intervals; until cancelled."""
        if self.row is None:
            await self.register()
        while self.enabled:
            _raise_if_cancelling()
            await asyncio.sleep(self._interval)
            if time.monotonic() - self._refreshed < 1.5 * self._interval:
                continue
            row = self.row
            if row is None:
                await self.register()
                continue
            try:
                await self._queue._run(_ops.worker_seen(row))
            except psycopg.errors.InsufficientPrivilege as exc:
                self.refused(exc)
                return
            except (psycopg.Error, PgqError) as exc:
                logger.warning("worker registry: refresh failed (%s)", one_line(exc),
                               extra={"event": "worker_seen_error"})
                continue
            await self.refreshed(row)

    async def drain(self) -> None:
        """Mark the row draining (the worker claims no more); a failure is logged."""
        row = self.row
        if row is None:
            return
        row.state = "draining"
        with contextlib.suppress(psycopg.Error, PgqError):
            await self._queue._run(_ops.worker_seen(row))

    async def unregister(self) -> None:
        """Delete the row (a clean stop); a failure is logged (the rescue prunes it later)."""
        row, self.row = self.row, None
        if row is None:
            return
        try:
            await self._queue._run(_ops.worker_unregister(row))
        except (psycopg.Error, PgqError) as exc:
            logger.warning("worker registry: cannot remove this worker's row (%s); it is pruned after three "
                           "leases", one_line(exc), extra={"event": "worker_unregister_error"})
