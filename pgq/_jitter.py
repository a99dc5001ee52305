"""pgq's own source of randomness: the jitter of poll intervals, backoffs and maintenance schedules.

`JITTER` is a `random.Random` of pgq's, seeded from the system's entropy, so that pgq never draws from
the global generator of the `random` module. That one belongs to the application and its tests: a
test may seed it to replay a run, and Hypothesis warns (HypothesisDeprecationWarning, an error under
`-W error`) when its state changes while a strategy draws, as it would under a worker running in a
thread beside the test. `exponential_wait` is tenacity's `wait_random_exponential` drawn from it.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import tenacity

__all__ = ["JITTER", "exponential_wait"]

JITTER = random.Random()
"""The generator behind every random delay pgq chooses (never the `random` module's global one)."""


def exponential_wait(multiplier: float, *, maximum: float,
                     minimum: float = 0.0) -> Callable[[tenacity.RetryCallState], float]:
    """A tenacity `wait` with full jitter: after the n-th failed attempt, a delay drawn uniformly from
    [`minimum`, `multiplier * 2 ** (n - 1)`], that upper end capped at `maximum` (never under
    `minimum`), drawn from `JITTER`. What `tenacity.wait_random_exponential(multiplier, min=, max=)`
    waits, without the global generator (and without importing tenacity)."""

    def wait(retry_state: tenacity.RetryCallState) -> float:
        exponent = min(max(retry_state.attempt_number - 1, 0), 64)  # 2 ** 64 is past any maximum already
        return JITTER.uniform(minimum, max(minimum, min(multiplier * 2.0**exponent, maximum)))

    return wait
