"""A busy worker's steady rate and CPU per job: `pgq worker` with a sampler thread in its process.

    python bench/steady_cpu.py worker MODULE:APP --queue Q --concurrency 16 --dsn DSN [--window 1.5]

Prefill the queue with far more jobs than the window drains (100,000 no-op jobs for the figures in
bench/results/ack-delay-ab-*.txt), start this instead of `pgq worker`, and stop it with SIGTERM once
it has printed. The sampler waits for the first claimed job, lets 0.2 s of ramp-up pass, then reads
/proc for `--window` seconds and prints to stderr one line: jobs finished per second, and the CPU
time (user + system) per job of the worker's main thread (the event loop, which claims, starts,
collects and acknowledges) and of its other threads (sync handlers, the metrics server). The start-up
and the end of a drain, which bench.py's W3 includes, are left out: this is for comparing changes to
the steady path, alternated (ABBA), on a machine whose speed drifts.
"""

from __future__ import annotations

import os
import sys
import threading
import time

import pgq.worker
from pgq.cli import main

_TICKS = os.sysconf("SC_CLK_TCK")
_workers: list[pgq.worker.Worker] = []


def _cpu_by_thread() -> dict[int, float]:
    """CPU seconds (user + system) of each thread of this process, by thread id."""
    seconds = {}
    for tid in os.listdir("/proc/self/task"):
        try:
            with open(f"/proc/self/task/{tid}/stat") as stat:
                fields = stat.read().rsplit(")", 1)[1].split()
        except OSError:  # the thread ended meanwhile
            continue
        seconds[int(tid)] = (int(fields[11]) + int(fields[12])) / _TICKS
    return seconds


def _sample(window: float) -> None:
    while not _workers or _workers[0].stats["claimed"] == 0:
        time.sleep(0.005)
    time.sleep(0.2)
    worker = _workers[0]
    before, done_before, started = _cpu_by_thread(), worker.stats["succeeded"], time.monotonic()
    time.sleep(window)
    after, done, elapsed = _cpu_by_thread(), worker.stats["succeeded"] - done_before, time.monotonic() - started
    if not done:
        print("steady_cpu: no job finished in the window", file=sys.stderr)
        return
    main_thread = os.getpid()
    loop_cpu = after[main_thread] - before[main_thread]
    other_cpu = sum(cpu - before[tid] for tid, cpu in after.items() if tid in before and tid != main_thread)
    print(f"steady_cpu: {elapsed:.2f} s, {done} jobs ({done / elapsed:.0f}/s): main thread "
          f"{loop_cpu / done * 1e6:.1f} us/job ({loop_cpu / elapsed * 100:.0f}% busy), other threads "
          f"{other_cpu / done * 1e6:.1f} us/job", file=sys.stderr, flush=True)


def _run() -> int:
    window = 1.5
    args = sys.argv[1:]
    if "--window" in args:
        at = args.index("--window")
        window = float(args[at + 1])
        del args[at:at + 2]
    original_init = pgq.worker.Worker.__init__

    def remembering_init(self: pgq.worker.Worker, *a: object, **k: object) -> None:
        original_init(self, *a, **k)  # type: ignore[arg-type]
        _workers.append(self)

    pgq.worker.Worker.__init__ = remembering_init  # type: ignore[method-assign]
    threading.Thread(target=_sample, args=(window,), daemon=True).start()
    return main(args)


if __name__ == "__main__":
    sys.exit(_run())
