"""Split the CPU of the scale runs (../scale-16core-*/**/scale.jsonl) into worker and server parts.

For each W3 record: machine CPU-seconds = CPUS x seconds x sys_cpu_util_pct / 100; the worker
processes' own CPU (`worker_cpu_s`, read from /proc for the spawned processes, start included); the
rest is the server's (plus the harness's 20 Hz count query and the wait sampler, both small).
Then, per peer, a least-squares fit worker_cpu_s = fixed x P + per_job x N over the runs given:
`fixed` is what each worker process costs whatever it runs (interpreter start, imports, connecting),
`per_job` the worker's CPU per job. Usage: python3 budget.py FILE... (CPUS=16 by default).
"""

import collections
import json
import os
import sys

CPUS = int(os.environ.get("CPUS", "16"))

rows = collections.defaultdict(list)
for path in sys.argv[1:]:
    with open(path) as fh:
        records = [json.loads(line) for line in fh]
    for r in records:
        if r.get("workload") != "w3_drain" or r.get("worker_cpu_s") is None:
            continue
        rows[r["peer"]].append(r)

print(f"{'peer':9} {'P':>3} {'jobs/s':>8} {'steady':>8} {'cpu%':>5} {'machine s':>9} {'worker s':>8} {'server s':>8}"
      f" {'us/job':>7}")
for peer, rs in rows.items():
    by_p = collections.defaultdict(list)
    for r in rs:
        by_p[r["params"]["procs"]].append(r)
    for p in sorted(by_p):
        for r in by_p[p]:
            machine = CPUS * r["seconds"] * r["sys_cpu_util_pct"] / 100
            server = machine - r["worker_cpu_s"]
            print(f"{peer:9} {p:3} {r['jobs_per_s']:8.0f} {r['steady_jobs_per_s']:8.0f} {r['sys_cpu_util_pct']:5.1f}"
                  f" {machine:9.1f} {r['worker_cpu_s']:8.1f} {server:8.1f} {1e6 * machine / r['jobs']:7.0f}")
    # least squares for worker_cpu = fixed * P + per_job * N (two unknowns, no intercept)
    sxx = sum(r["params"]["procs"] ** 2 for r in rs)
    syy = sum(r["jobs"] ** 2 for r in rs)
    sxy = sum(r["params"]["procs"] * r["jobs"] for r in rs)
    sxz = sum(r["params"]["procs"] * r["worker_cpu_s"] for r in rs)
    syz = sum(r["jobs"] * r["worker_cpu_s"] for r in rs)
    det = sxx * syy - sxy * sxy
    fixed = (sxz * syy - syz * sxy) / det
    per_job = (sxx * syz - sxy * sxz) / det
    print(f"{peer}: worker CPU ~ {fixed:.2f} s per process + {per_job * 1e6:.0f} us per job ({len(rs)} runs)")
