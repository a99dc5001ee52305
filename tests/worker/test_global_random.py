"""A running worker never draws from the `random` module's global generator: its poll intervals,
retry backoffs and maintenance schedules come from pgq's own (pgq._jitter). The global one is the
application's: a test may seed it, and Hypothesis warns when its state changes while a strategy draws,
as it would with a worker running in a thread beside a property test."""

from __future__ import annotations

import asyncio
import random
import traceback
from collections.abc import Callable, Iterator
from typing import Any

import pytest

import pgq

from .conftest import DB, run_worker_until


@pytest.fixture
def global_draws(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[str]]:
    """Every function of the `random` module that draws from its global generator (random, uniform,
    choice, shuffle...), wrapped to record where each call came from (the stack, as text)."""
    calls: list[str] = []

    def spy(name: str, draw: Callable[..., Any]) -> Callable[..., Any]:
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            calls.append(f"random.{name} called from:\n" + "".join(traceback.format_stack(limit=8)[:-1]))
            return draw(*args, **kwargs)
        return wrapper

    global_generator = random._inst  # type: ignore[attr-defined]  # the instance behind the module's functions
    for name in dir(random):
        draw = getattr(random, name)
        if getattr(draw, "__self__", None) is global_generator and name not in ("seed", "getstate", "setstate"):
            monkeypatch.setattr(random, name, spy(name, draw))
    yield calls


def test_a_worker_polls_retries_and_maintains_without_the_global_random(
    pgq_dsn: str, db: DB, global_draws: list[str]
) -> None:
    app = pgq.App(pgq_dsn)

    # A backoff with jitter: the retry delay is drawn at random.
    @app.task(retry=pgq.Backoff(initial=0.05, factor=1, jitter=0.5, min_delay=0), max_attempts=3)
    def flaky() -> str:
        if pgq.current_job().attempts < 2:
            raise ConnectionError("upstream down")
        return "done"

    async def finished(queue: pgq.AsyncQueue) -> bool:
        job = (await queue.list(limit=1))[0]
        return job.status is pgq.JobStatus.SUCCEEDED

    # Jittered polls every ~0.05 s while the job waits out its backoff; maintenance (which spreads its
    # first runs at random) on, with rescues every 0.1 s.
    asyncio.run(run_worker_until(app, finished, before=lambda q: flaky.defer_async(), poll_interval=0.05,
                                 rescue_interval=0.1))
    job = db.rows("SELECT status::text, attempts FROM pgq.jobs")[0]
    assert (job["status"], job["attempts"]) == ("succeeded", 2)
    assert not global_draws, "\n".join(global_draws[:3])
