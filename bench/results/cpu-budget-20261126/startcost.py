"""CPU of one harness worker process that finds no work: start, imports, connecting, T s idle, stop.

Run from the harness folder (`.scale/harness`), with BENCH_DSN set and the peers installed
(`bench.py --peer P install`): python3 startcost.py PEER... ; REPS=3 and IDLE="2 8" by default.
Reads the children's rusage, so it counts the wrapper `bench.py --peer P worker` and whatever it
execs (pgq's adapter execs `pgq worker`), as the harness's `worker_cpu_s` does.
"""

import os
import resource
import signal
import statistics
import subprocess
import sys
import time

REPS = int(os.environ.get("REPS", "3"))
IDLE = [float(x) for x in os.environ.get("IDLE", "2 8").split()]

for peer in sys.argv[1:]:
    for idle in IDLE:
        cpu = []
        for _ in range(REPS):
            r0 = resource.getrusage(resource.RUSAGE_CHILDREN)
            p = subprocess.Popen([sys.executable, "bench.py", "--peer", peer, "worker", "--concurrency", "16"],
                                 stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
            time.sleep(idle)
            os.killpg(p.pid, signal.SIGTERM)
            p.wait()
            r1 = resource.getrusage(resource.RUSAGE_CHILDREN)
            cpu.append(r1.ru_utime + r1.ru_stime - r0.ru_utime - r0.ru_stime)
        print(f"{peer:9} idle {idle:4.1f} s: CPU {statistics.median(cpu):.3f} s (median of {REPS}: "
              + ", ".join(f"{c:.3f}" for c in cpu) + ")")
