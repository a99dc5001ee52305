"""The adaptive prefetch's decision (pgq.worker.prefetch.Prefetch), driven with a made-up clock and
made-up counts of started jobs: when it looks at the rate, and what buffer it picks. The drains that
show it working end to end are in tests/worker/test_worker.py (test_adaptive_prefetch_*)."""

from __future__ import annotations

from pgq.worker.prefetch import PREFETCH_FIRST_LOOK, PREFETCH_HORIZON, PREFETCH_MAX, PREFETCH_MAX_BYTES, Prefetch

CONCURRENCY = 16


def _prefetch(fixed: int | None = None) -> Prefetch:
    return Prefetch(CONCURRENCY, fixed)


def _land_claim(prefetch: Prefetch, now: float, started: int, mean_run: float, mean_bytes: float = 0.0) -> None:
    """What a claim does once its jobs are started: the worker has started `started` jobs in all, which
    took `mean_run` seconds in their slots and brought `mean_bytes` of payload each (moving means)."""
    prefetch.mean_run = mean_run
    prefetch.mean_bytes = mean_bytes
    prefetch.adapt(now, started)


def test_the_first_look_comes_after_a_few_refills_of_the_slots_not_after_50_ms() -> None:
    worker = _prefetch()
    t0 = 1000.0
    _land_claim(worker, t0, CONCURRENCY, 0.0)  # the first claim fills the slots: the window opens
    assert worker.size == CONCURRENCY
    refills = PREFETCH_FIRST_LOOK * CONCURRENCY
    _land_claim(worker, t0 + 0.004, CONCURRENCY + refills - 1, 0.0002)  # one start short
    assert worker.size == CONCURRENCY
    _land_claim(worker, t0 + 0.005, CONCURRENCY + refills, 0.0002)  # 10 ms in all, far from 50
    # The rate of the refills alone (the first claim's starts are left out): 64 in 5 ms.
    assert worker.size == min(int(refills / 0.005 * PREFETCH_HORIZON), PREFETCH_MAX)
    first = worker.size
    # Later looks: every 50 ms at most, whatever the number of starts.
    _land_claim(worker, t0 + 0.04, CONCURRENCY + refills + 5000, 0.0002)
    assert worker.size == first


def test_the_start_up_time_is_not_part_of_the_first_window() -> None:
    worker = _prefetch()
    # Claims that get no job (an empty queue for a while) open no window.
    _land_claim(worker, 1000.0, 0, 0.0)
    assert not worker.window_open
    # The first jobs arrive 10 s later: 64 refills 20 ms after that is 3,200 jobs a second, not 6.
    _land_claim(worker, 1010.0, CONCURRENCY, 0.0)
    _land_claim(worker, 1010.02, CONCURRENCY + 64, 0.0002)
    assert worker.size == int(64 / 0.02 * PREFETCH_HORIZON)


def test_no_growth_before_a_job_has_left_its_slot() -> None:
    worker = _prefetch()
    _land_claim(worker, 1000.0, CONCURRENCY, 0.0)
    # Many starts counted but no job has ended yet (slow jobs: the starts only filled slots).
    _land_claim(worker, 1000.2, CONCURRENCY * 10, 0.0)
    assert worker.size == CONCURRENCY


def test_slow_jobs_keep_the_buffer_at_the_floor() -> None:
    worker = _prefetch()
    _land_claim(worker, 1000.0, CONCURRENCY, 0.0)
    # A burst of refills in a short window, but each job holds its slot for 0.5 s: at most 32 jobs
    # a second can start, 8 in the horizon, less than the floor.
    _land_claim(worker, 1000.06, CONCURRENCY + PREFETCH_FIRST_LOOK * CONCURRENCY, 0.5)
    assert worker.size == CONCURRENCY


def test_a_fixed_prefetch_is_left_alone() -> None:
    worker = _prefetch(3)
    _land_claim(worker, 1000.0, CONCURRENCY, 0.0)
    _land_claim(worker, 1000.1, CONCURRENCY + 10_000, 0.0001)
    assert worker.size == 3


def test_big_payloads_cap_the_buffer_by_bytes() -> None:
    worker = _prefetch()
    refills = CONCURRENCY + PREFETCH_FIRST_LOOK * CONCURRENCY
    _land_claim(worker, 1000.0, CONCURRENCY, 0.0, 200_000.0)
    # Fast jobs (a rate that asks for PREFETCH_MAX) of 200 kB payloads: only PREFETCH_MAX_BYTES of them.
    _land_claim(worker, 1000.005, refills, 0.0002, 200_000.0)
    assert worker.size == int(PREFETCH_MAX_BYTES / 200_000) < PREFETCH_MAX
    # Small payloads again (the moving mean fell): the rate decides at the next look.
    _land_claim(worker, 1000.06, refills + 5000, 0.0002, 100.0)
    assert worker.size == PREFETCH_MAX


def test_a_switch_to_big_payloads_shrinks_the_buffer_at_the_next_claim() -> None:
    worker = _prefetch()
    refills = CONCURRENCY + PREFETCH_FIRST_LOOK * CONCURRENCY
    _land_claim(worker, 1000.0, CONCURRENCY, 0.0, 50.0)
    _land_claim(worker, 1000.005, refills, 0.0002, 50.0)
    assert worker.size == PREFETCH_MAX
    # 10 ms later, no look due for 40 ms more, but a claim brought 1 MB payloads: at most the
    # concurrency from now on (1 MB each is far more than PREFETCH_MAX_BYTES / CONCURRENCY).
    _land_claim(worker, 1000.015, refills + 100, 0.0002, 1_000_000.0)
    assert worker.size == max(CONCURRENCY, int(PREFETCH_MAX_BYTES / 1_000_000))


def test_a_fixed_prefetch_is_not_capped_by_bytes() -> None:
    worker = _prefetch(500)
    _land_claim(worker, 1000.0, CONCURRENCY, 0.0, 1_000_000.0)
    _land_claim(worker, 1000.1, CONCURRENCY + 10_000, 0.0001, 1_000_000.0)
    assert worker.size == 500
