#!/usr/bin/env bash
# io_direct = 'data,wal,wal_init' against buffered I/O, for walnut and PostgreSQL 18, in one
# sitting (issue 14: "direct I/O costs nothing against buffered I/O").
#
#   bench/io_direct.sh WALNUT_BIN [SCALE] [SECONDS]     (as root: postgres18.sh needs it)
#
# For each of walnut buffered, walnut direct, PostgreSQL buffered and PostgreSQL direct
# (debug_io_direct), on ports 5450-5453 with shared_buffers=256MB: a fresh data directory, the
# time of `pgbench -i -s SCALE` (default 100, 1.5 GB: more than the pool), then SECONDS
# (default 60) of select-only, -M prepared -c 10 -j 2. Data directories are removed after each.
# Prints one line per run and the direct/buffered ratios.
set -euo pipefail
BIN=$(realpath "$1"); SCALE=${2:-100}; T=${3:-60}
HERE=$(cd "$(dirname "$0")" && pwd)
PG=${PG18:-$HERE/../../shared/bench/postgres18.sh}
ROOT=${BENCH_DIR:-/var/tmp/walnut-io-direct}
mkdir -p "$ROOT"
declare -A INIT TPS

pgb() { pgbench -h 127.0.0.1 -p "$1" -U postgres "${@:2}" postgres; }

run() { # name port
  local name=$1 port=$2 t0 t1 tps
  t0=$(date +%s.%N)
  pgb "$port" -i -s "$SCALE" -q >/dev/null 2>&1
  t1=$(date +%s.%N)
  INIT[$name]=$(echo "$t1 - $t0" | bc)
  tps=$(pgb "$port" -n -S -M prepared -c 10 -j 2 -T "$T" 2>/dev/null | awk '/^tps/ {print $3}')
  TPS[$name]=$tps
  echo "$name: pgbench -i -s $SCALE ${INIT[$name]} s; select-only ${T}s: $tps tps"
}

walnut() { # name port io_direct
  local dir=$ROOT/$1
  rm -rf "$dir"
  "$BIN" initdb -D "$dir" >/dev/null
  "$BIN" serve -D "$dir" -p "$2" -c shared_buffers=256MB -c "io_direct=$3" >"$ROOT/$1.log" 2>&1 &
  local pid=$!
  until psql -h 127.0.0.1 -p "$2" -U postgres -Atc 'select 1' postgres >/dev/null 2>&1; do sleep 0.2; done
  run "$1" "$2"
  kill -INT "$pid"; wait "$pid" || true
  rm -rf "$dir"
}

postgres() { # name port extra
  local dir=$ROOT/$1
  rm -rf "$dir"
  PG_EXTRA_CONF="shared_buffers=256MB $3" "$PG" start "$dir" "$2" >/dev/null
  run "$1" "$2"
  "$PG" stop "$dir"
  rm -rf "$dir"
}

walnut walnut-buffered 5450 ""
walnut walnut-direct 5451 "data,wal,wal_init"
postgres pg-buffered 5452 ""
postgres pg-direct 5453 "debug_io_direct=data,wal,wal_init"
for s in walnut pg; do
  echo "$s direct/buffered: init time $(echo "scale=2; ${INIT[$s-direct]} / ${INIT[$s-buffered]}" | bc)x," \
    "select-only tps $(echo "scale=2; ${TPS[$s-direct]} / ${TPS[$s-buffered]}" | bc)x"
done
