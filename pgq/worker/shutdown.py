"""`shut_down`: a worker's graceful (or aborted) shutdown, step by step.

Stop claiming; hand prefetched jobs straight back; let running jobs finish for up to `drain_timeout`
(not when aborting); hand the unfinished ones back to the queue at once, without spending an attempt
(a release, not a wait for lease expiry); send the last acknowledgements, within `shutdown_timeout`.
"""

from __future__ import annotations

import asyncio
import logging
import time

from .acks import Acknowledger
from .runner import Runner
from .state import WorkerState

__all__ = ["shut_down"]

logger = logging.getLogger("pgq.worker")


async def shut_down(state: WorkerState, producer: asyncio.Task[None], acks: Acknowledger, runner: Runner) -> None:
    """Run the shutdown once `state.stopping` is set (see the module docstring)."""
    # 1. Stop claiming. A claim in flight may finish (its jobs are handed back); do not wait long.
    done, _ = await asyncio.wait({producer}, timeout=2.0)
    if not done:
        producer.cancel()
    await asyncio.gather(producer, return_exceptions=True)
    # Prefetched jobs never started: straight back to the queue.
    while state.held:
        claim, _ = state.held.popleft()
        state.traces.pop(claim.id, None)
        acks.snooze(claim, 0.0)
    # 2. Let running jobs finish, until the drain timeout or an abort.
    await _drain(state)
    # 3. Hand the unfinished ones back to the queue, at once and without spending an attempt.
    leftover = list(state.running.values())
    if leftover:
        for run in leftover:
            run.released = True
            acks.snooze(run.claim, 0.0)
            if run.task is not None:
                run.task.cancel()
            else:  # a sync handler's thread cannot be stopped: its outcome will be ignored
                runner.end_run(run, "released", None)
        # The documented end of a drain that ran out of time (or of an abort, already warned about).
        logger.info("releasing %d unfinished jobs back to their queues: %s", len(leftover),
                       ", ".join(str(r.claim.id) for r in leftover[:20]) + (" ..." if len(leftover) > 20 else ""),
                       extra={"event": "worker_release", "count": len(leftover)})
        cancelled = {r.task for r in leftover if r.task is not None}
        if cancelled:
            await asyncio.wait(cancelled, timeout=1.0)
    # 4. Send the last acknowledgements and releases.
    acks.flush_all()
    grace = 2.0 if state.aborting.is_set() else state.config.shutdown_timeout
    try:
        async with asyncio.timeout(grace):
            await acks.idle.wait()
    except TimeoutError:
        ids = acks.unsent_ids()
        logger.error("could not acknowledge %d jobs before exiting (database unreachable?); they will "
                     "be rescued after their lease: %s", len(ids), ids[:50],
                     extra={"event": "ack_abandoned", "count": len(ids)})


async def _drain(state: WorkerState) -> None:
    """Wait until no job runs, the drain timeout passed since shutdown began, or an abort."""
    drain_timeout = state.config.drain_timeout
    if state.running and not state.aborting.is_set():
        logger.info("waiting up to %g s for %d running jobs", drain_timeout, len(state.running),
                    extra={"event": "worker_drain", "running": len(state.running)})
    abort_wait = asyncio.ensure_future(state.aborting.wait())
    try:
        while state.running and not state.aborting.is_set():
            remaining = state.stop_at + drain_timeout - time.monotonic()
            if remaining <= 0:
                break
            state.run_ended.clear()
            ended = asyncio.ensure_future(state.run_ended.wait())
            try:
                await asyncio.wait({ended, abort_wait}, timeout=remaining, return_when=asyncio.FIRST_COMPLETED)
            finally:
                ended.cancel()
    finally:
        abort_wait.cancel()
