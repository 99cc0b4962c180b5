#!/usr/bin/env bash
# Issue 16, "crash recovery rate". For PostgreSQL 18 and walnut, one after the other, each on a
# new data directory with synchronous_commit = off and no checkpoint during the run
# (PostgreSQL: postgres18.sh's settings, shared_buffers=3GB, max_wal_size=100GB,
# checkpoint_timeout=15min; walnut: the same three, given with -c):
#   1. pgbench -i -s SCALE, then CHECKPOINT;
#   2. pgbench -n -b tpcb-like -M prepared -c CLIENTS -j 2 -T SECONDS;
#   3. kill -9 of the server (PostgreSQL: the postmaster), then sync and drop the page cache
#      (echo 3 > /proc/sys/vm/drop_caches; --keep-cache skips it);
#   4. start the server again and time it until `select 1` answers (polled every 20 ms):
#      "start to ready", what a user waits for;
#   5. check the TPC-B invariant sum(abalance) = sum(delta) of pgbench_history, then stop.
# walnut recovers the same crashed directory once per value of --recovery-workers (default
# "1 -1": the serial redo, then the default, one worker per core), each from a fresh copy
# made before the first start and with the page cache dropped again. --walnut-settings
# "SPEC ..." replaces that list: each SPEC is one recovery with those settings, given as
# name=value[,name=value...] (e.g. "recovery_prefetch=off recovery_prefetch=try"), and
# --pg-settings "SPEC ..." does the same for PostgreSQL (default: one recovery, as set up;
# e.g. "recovery_prefetch=off recovery_prefetch=try" for the cold-cache comparison).
# Reports, per server: transactions, WAL from the checkpoint to the kill (MB), start to ready
# (s), and transactions and MB of WAL per second of it, with PostgreSQL's own redo-loop time
# from its log ("redo done at ... elapsed: N s") and walnut's ("redo done ... elapsed_s=N"),
# and transactions per second of the redo loop.
#
#   bench/replication/recovery.sh --walnut BIN [--seconds 60] [--scale 100] [--clients 10]
#                                 [--only both|pg|walnut] [--keep-cache yes] [--out DIR]
#                                 [--recovery-workers "1 -1"] [--walnut-settings "SPEC ..."]
#                                 [--pg-settings "SPEC ..."]
#
# Port 5468 for both, data under /var/tmp. Writes OUT (default
# bench/replication/results/recovery-DATE-TIME): table.md, summary.tsv, SERVER.pgbench.txt,
# SERVER.init.txt, SERVER.log (walnut's, or PostgreSQL's server.log) and settings.txt. Needs
# root (the page cache drop; postgres18.sh runs PostgreSQL as pgref).
set -euo pipefail
source "$(dirname "$0")/lib.sh"
walnut=""; seconds=60; scale=100; clients=10; only=both; keep_cache=no; out=""
recovery_workers="1 -1"; walnut_settings=""; pg_settings=""
# --keep-cache, --recovery-workers, --walnut-settings and --pg-settings are this script's own;
# the rest are the lag scripts'.
args=()
while [ $# -gt 0 ]; do
  case "$1" in
    --keep-cache) keep_cache=${2:-}; shift 2 ;;
    --recovery-workers) recovery_workers=${2:-}; shift 2 ;;
    --walnut-settings) walnut_settings=${2:-}; shift 2 ;;
    --pg-settings) pg_settings=${2:-}; shift 2 ;;
    *) args+=("$1"); shift ;;
  esac
done
parse_lag_options "${args[@]}"

pg_tools
out=${out:-$here/results/recovery-$(date +%Y%m%d-%H%M%S)}
mkdir -p "$out"; out=$(cd "$out" && pwd)
work=$(mktemp -d /var/tmp/walnut-recovery.XXXXXX); chmod 755 "$work"
port=5468; wpid=""; pg_up=""; pgstart=""; wdir="$work/walnut"; wextra=()
cleanup() {
  if [ -n "$wpid" ]; then kill -TERM "$wpid" 2>/dev/null || true; wait "$wpid" 2>/dev/null || true; fi
  if [ -n "$pg_up" ]; then "$shared/bench/postgres18.sh" stop "$work/pg" >/dev/null 2>&1 || true; fi
  rm -rf "$work"
}
trap cleanup EXIT
trap 'exit 130' INT TERM
printf 'server\ttransactions\twal_mb\tready_s\tredo_s\ttx_per_s\twal_mb_per_s\n' >"$out/summary.tsv"
echo "seconds $seconds, scale $scale, clients $clients, page cache dropped: $([ "$keep_cache" = yes ] && echo no || echo yes)" >"$out/settings.txt"

start() { # SERVER
  if [ "$1" = pg18 ]; then
    PG_EXTRA_CONF="synchronous_commit=off ${pgextra:-}" "$shared/bench/postgres18.sh" start "$work/pg" "$port" >>"$out/pg18.start.txt" 2>&1 &
    pgstart=$!; pg_up=1
  else
    [ -d "$wdir" ] || "$walnut" initdb -D "$wdir" >>"$out/walnut.log" 2>&1
    "$walnut" serve -D "$wdir" -p "$port" -c synchronous_commit=off -c shared_buffers=3GB \
      -c max_wal_size=100GB -c checkpoint_timeout=15min "${wextra[@]}" >>"$out/walnut.log" 2>&1 &
    wpid=$!
  fi
}
ready() { # waits up to 30 min for `select 1`
  for _ in $(seq 90000); do
    psql_ "$port" -Atqc 'select 1' >/dev/null 2>&1 && return 0
    if [ -n "$wpid" ] && ! kill -0 "$wpid" 2>/dev/null; then
      echo "error: walnut exited (walnut.log)" >&2; exit 1
    fi
    if [ -n "$pgstart" ] && ! kill -0 "$pgstart" 2>/dev/null; then
      wait "$pgstart" || { echo "error: postgres18.sh start failed (pg18.start.txt)" >&2; exit 1; }
      pgstart=""
    fi
    sleep 0.02
  done
  echo "error: the server did not come up" >&2; exit 1
}
kill9() { # SERVER
  if [ "$1" = pg18 ]; then
    kill -9 "$(head -1 "$work/pg/postmaster.pid")"
    for _ in $(seq 500); do pgrep -u pgref -f "postgres -D $work/pg" >/dev/null || break; sleep 0.02; done
    pkill -9 -u pgref -f "$work/pg" 2>/dev/null || true
    # A killed postmaster whose parent does not reap it (a container's init) stays a zombie,
    # and its socket lock file would then refuse the restart.
    rm -f "$work/pg/postmaster.pid" "$work/pg"/.s.PGSQL.*
  else
    kill -9 "$wpid"; wait "$wpid" 2>/dev/null || true; wpid=""
  fi
}

run() { # SERVER
  local s=$1 lsn0 lsn1 tx wal_mb w
  start "$s"; ready
  "$PGBENCH" -h 127.0.0.1 -p "$port" -U postgres -i -q -s "$scale" postgres >"$out/$s.init.txt" 2>&1
  psql_ "$port" -Atqc checkpoint >/dev/null
  lsn0=$(psql_ "$port" -Atqc 'select pg_current_wal_lsn()')
  "$PGBENCH" -h 127.0.0.1 -p "$port" -U postgres -n -b tpcb-like -M prepared -c "$clients" -j 2 \
    -T "$seconds" postgres >"$out/$s.pgbench.txt" 2>&1
  lsn1=$(psql_ "$port" -Atqc 'select pg_current_wal_insert_lsn()')
  wal_mb=$(awk -v b="$(psql_ "$port" -Atqc "select pg_wal_lsn_diff('$lsn1', '$lsn0')")" 'BEGIN { printf "%.1f", b / 1e6 }')
  tx=$(awk '/number of transactions actually processed/ {print $NF}' "$out/$s.pgbench.txt" | cut -d/ -f1)
  echo "$s: load average before the kill $(cut -d' ' -f1-3 /proc/loadavg)" >>"$out/settings.txt"
  kill9 "$s"
  sync
  if [ "$s" = pg18 ]; then
    if [ -z "$pg_settings" ]; then
      recover pg18 "$tx" "$wal_mb"
    else
      mv "$work/pg" "$work/pg-crashed"
      for spec in $pg_settings; do
        rm -rf "$work/pg"; cp -a "$work/pg-crashed" "$work/pg"; sync
        pgextra=${spec//,/ }
        recover "pg18 $spec" "$tx" "$wal_mb"
      done
      pgextra=""
    fi
  else
    # Each recovery from a copy of the crashed directory, so that all replay the same WAL.
    mv "$work/walnut" "$work/walnut-crashed"
    local specs=$walnut_settings
    [ -n "$specs" ] || for w in $recovery_workers; do specs="$specs recovery_workers=$w"; done
    for spec in $specs; do
      rm -rf "$work/walnut"; cp -a "$work/walnut-crashed" "$work/walnut"; sync
      wextra=(); for kv in ${spec//,/ }; do wextra+=(-c "$kv"); done
      recover "walnut $spec" "$tx" "$wal_mb"
    done
    wextra=()
  fi
}

recover() { # LABEL TRANSACTIONS WAL_MB: starts the crashed server, times it, checks, stops
  local label=$1 tx=$2 wal_mb=$3 s=walnut t0 t1 ready_s redo_s inv workers
  case $label in pg18*) s=pg18;; esac
  [ "$keep_cache" = yes ] || echo 3 >/proc/sys/vm/drop_caches
  t0=$(now); start "$s"; ready; t1=$(now)
  ready_s=$(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.2f", b - a }')
  if [ "$s" = pg18 ]; then
    cp "$work/pg/server.log" "$out/pg18.log" 2>/dev/null || true
    redo_s=$(grep -o 'redo done at .*elapsed: [0-9.]* s' "$out/pg18.log" | tail -1 | sed 's/.*elapsed: \([0-9.]*\) s/\1/')
  else
    redo_s=$(grep 'redo done' "$out/walnut.log" | tail -1 | sed -n 's/.*elapsed_s=\([0-9.]*\).*/\1/p')
    workers=$(grep 'redo done' "$out/walnut.log" | tail -1 | sed -n 's/.*workers=\([0-9]*\).*/\1/p')
    label="$label (${workers:-?} applying)"
  fi
  inv="$(psql_ "$port" -Atqc "select sum(abalance) from pgbench_accounts") $(psql_ "$port" -Atqc "select sum(delta) from pgbench_history")"
  echo "$label: after recovery sum(abalance), sum(delta) of pgbench_history: $inv" >>"$out/settings.txt"
  [ "${inv% *}" = "${inv#* }" ] || echo "error: $label: sum(abalance) differs from sum(delta) after recovery" | tee -a "$out/settings.txt" >&2
  printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$label" "$tx" "$wal_mb" "$ready_s" "${redo_s:-}" \
    "$(awk -v t="$tx" -v r="$ready_s" 'BEGIN { printf "%.0f", t / r }')" \
    "$(awk -v m="$wal_mb" -v r="$ready_s" 'BEGIN { printf "%.0f", m / r }')" >>"$out/summary.tsv"
  if [ "$s" = pg18 ]; then "$shared/bench/postgres18.sh" stop "$work/pg" >/dev/null; pg_up=""
  else kill -TERM "$wpid"; wait "$wpid" 2>/dev/null || true; wpid=""; fi
}

if [ "$only" != walnut ]; then run pg18; fi
if [ "$only" != pg ]; then run walnut; fi
{
  echo "| server | transactions | WAL (MB) | redo loop (s) | redo tx/s | start to ready (s) | tx/s of it | MB/s of it |"
  echo "|---|---:|---:|---:|---:|---:|---:|---:|"
  tail -n +2 "$out/summary.tsv" | awk -F'\t' '{ printf "| %s | %s | %s | %s | %s | %s | %s | %s |\n", $1, $2, $3, ($5 == "" ? "-" : $5), ($5 == "" || $5 == 0 ? "-" : sprintf("%.0f", $2 / $5)), $4, $6, $7 }'
} >"$out/table.md"
cat "$out/table.md"
