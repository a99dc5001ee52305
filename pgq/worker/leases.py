"""`Heartbeat`: renews the leases of every job a worker holds, in one statement every lease/3.

Jobs running, held in the prefetch buffer, or finished and awaiting their acknowledgement are all
leased; the renewal is fenced by each attempt's lease token, so a job missing from the answer has
lost its lease (rescued after expiry, cancelled, or finished elsewhere).
"""

from __future__ import annotations

import asyncio
import logging

import psycopg

from .. import _ops
from ..client import AsyncQueue
from ..errors import one_line
from .acks import Acknowledger
from .outcome import job_extra
from .state import WorkerState

__all__ = ["Heartbeat"]

logger = logging.getLogger("pgq.worker")


class Heartbeat:
    """The heartbeat of one run of a worker; `run()` as a task, until cancelled."""

    def __init__(self, state: WorkerState, queue: AsyncQueue, acks: Acknowledger) -> None:
        self._state = state
        self._queue = queue
        self._acks = acks
        self._lease = state.config.lease

    async def run(self) -> None:
        """Renew every lease/3 (every second at most while the database fails)."""
        interval = self._lease / 3
        while True:
            await asyncio.sleep(interval)
            interval = await self.beat()

    async def beat(self) -> float:
        """One renewal of every lease held (none: nothing sent); returns the seconds until the next."""
        lease = self._lease
        acking = self._acks.acking
        claims = [c for i, c in self._state.inflight.items() if i not in acking]
        if not claims:
            return lease / 3
        try:
            renewed = await self._queue._run(_ops.heartbeat([(c, lease) for c in claims], raise_lost=False))
        except (psycopg.OperationalError, psycopg.errors.QueryCanceled) as exc:
            logger.warning("heartbeat of %d jobs failed (%s); retrying", len(claims), one_line(exc),
                           extra={"event": "heartbeat_error"})
            return min(lease / 3, 1.0)
        except Exception:
            logger.exception("heartbeat failed", extra={"event": "heartbeat_error"})
            return lease / 3
        inflight, running = self._state.inflight, self._state.running
        for claim in claims:
            # Lost only if still ours and not acknowledged meanwhile (an ack racing the heartbeat
            # also makes the row "not running under this token").
            if (claim.id not in renewed and inflight.get(claim.id) is claim
                    and claim.id not in acking and claim.id in running):
                job = claim.job
                logger.warning("job %d %s: lease lost while running (rescued, cancelled or finished "
                               "elsewhere); its result will be refused", job.id, job.kind,
                               extra=job_extra(job, "lease_lost"))
        return lease / 3
