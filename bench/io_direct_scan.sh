#!/usr/bin/env bash
# Sequential scans with and without O_DIRECT and read-ahead, for walnut and PostgreSQL 18.
#
#   bench/io_direct_scan.sh WALNUT_BIN [SCALE] [REPEAT]     (as root: postgres18.sh needs it)
#
# Loads pgbench at SCALE (default 20: 300 MB of pgbench_accounts) once per server, then for
# each setting restarts the server with shared_buffers=32MB (the table does not fit) and times
# `select count(*) from pgbench_accounts` REPEAT times (default 5) after one unmeasured run;
# prints the median in ms. Settings: buffered / io_direct=data,wal,wal_init, each with
# io_method=worker and sync (PostgreSQL: debug_io_direct), each twice, in the order worker,
# sync, sync, worker (the machine drifts); after loading, `sync` waits for the kernel to write
# the load back. Ports 5454-5455; data directories are removed at the end.
set -euo pipefail
BIN=$(realpath "$1"); SCALE=${2:-20}; REPEAT=${3:-5}
HERE=$(cd "$(dirname "$0")" && pwd)
PG=${PG18:-$HERE/../../shared/bench/postgres18.sh}
ROOT=${BENCH_DIR:-/var/tmp/walnut-io-direct-scan}
rm -rf "$ROOT"; mkdir -p "$ROOT"

q() { psql -h 127.0.0.1 -p "$1" -U postgres -Atqc "$2" postgres; }

median_ms() { # port
  q "$1" 'select count(*) from pgbench_accounts' >/dev/null
  for _ in $(seq "$REPEAT"); do
    local t0 t1; t0=$(date +%s%N)
    q "$1" 'select count(*) from pgbench_accounts' >/dev/null
    t1=$(date +%s%N); echo $(( (t1 - t0) / 1000000 ))
  done | sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'
}

W=$ROOT/walnut; PORT=5454; PID=
wstart() { "$BIN" serve -D "$W" -p $PORT -c shared_buffers=32MB "$@" >>"$ROOT/walnut.log" 2>&1 & PID=$!
  until q $PORT 'select 1' >/dev/null 2>&1; do sleep 0.2; done; }
wstop() { kill -INT "$PID"; wait "$PID" || true; }
"$BIN" initdb -D "$W" >/dev/null
wstart
pgbench -h 127.0.0.1 -p $PORT -U postgres -i -s "$SCALE" -q postgres >/dev/null 2>&1
wstop; sync
for direct in "" "data,wal,wal_init"; do
  for method in worker sync sync worker; do
    wstart -c "io_direct=$direct" -c "io_method=$method"
    echo "walnut io_direct='$direct' io_method=$method: count(*) median $(median_ms $PORT) ms"
    wstop
  done
done
rm -rf "$W"

P=$ROOT/pg; PORT=5455
PG_EXTRA_CONF="shared_buffers=32MB" "$PG" start "$P" $PORT >/dev/null
pgbench -h 127.0.0.1 -p $PORT -U postgres -i -s "$SCALE" -q postgres >/dev/null 2>&1
"$PG" stop "$P"; sync
for direct in "" "data,wal,wal_init"; do
  for method in worker sync sync worker; do
    sed -i '/^debug_io_direct\|^io_method/d' "$P/postgresql.conf"
    echo "debug_io_direct = '$direct'" >> "$P/postgresql.conf"
    echo "io_method = $method" >> "$P/postgresql.conf"
    "$PG" start "$P" $PORT >/dev/null
    echo "postgres debug_io_direct='$direct' io_method=$method: count(*) median $(median_ms $PORT) ms"
    "$PG" stop "$P"
  done
done
rm -rf "$ROOT"
