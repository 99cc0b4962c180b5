#!/usr/bin/env bash
# Issue 15, the primary's side of "lag at the primary's peak": how far behind its WAL a
# streaming receiver stays while the primary writes as fast as it can. walnut and PostgreSQL 18,
# one after the other, each at its default settings plus synchronous_commit=off (the peak write
# rate), each streaming to PostgreSQL 18's pg_receivewal on a physical slot with --synchronous
# (it flushes every write and reports at once), while
#   pgbench -n -b tpcb-like -M prepared -c CLIENTS -j 2 -T SECONDS
# runs at scale SCALE, once the receiver has caught up with the slot's start (the load's WAL).
# Every 100 ms (plus psql's start-up) the primary is asked, from pg_stat_replication:
#   unsent  = pg_current_wal_lsn() - sent_lsn    bytes the walsender has not sent yet
#   unflush = pg_current_wal_lsn() - flush_lsn   bytes not yet durable on the receiver
# and the summary gives p50, p99 and max of both, with the primary's tps. (walnut's standby does
# not exist yet, so replay lag is not measured here; this is what a standby would be fed.)
#
#   bench/replication/receiver_lag.sh --walnut BIN [--seconds 120] [--scale 100] [--clients 10]
#                                     [--only both|pg|walnut] [--out DIR]
#
# Ports 5462 (PostgreSQL) and 5463 (walnut); data under /var/tmp. Writes OUT (default
# bench/replication/results/DATE-TIME): summary.tsv, table.md, SERVER.samples.tsv (time, unsent,
# unflush), SERVER.pgbench.txt, settings.txt. Needs root (postgres18.sh runs PostgreSQL as
# pgref).
set -euo pipefail
source "$(dirname "$0")/lib.sh"
walnut=""; seconds=120; scale=100; clients=10; only=both; out=""
parse_lag_options "$@"

pg_tools

out=${out:-$here/results/$(date +%Y%m%d-%H%M%S)}
mkdir -p "$out"; out=$(cd "$out" && pwd)
work=$(mktemp -d /var/tmp/walnut-repl.XXXXXX); chmod 755 "$work"   # pgref must reach pg/
pport=5462; wport=5463
pg_up=""; wpid=""; rpid=""; spid=""
cleanup() {
  for p in $spid $rpid; do kill "$p" 2>/dev/null || true; done
  if [ -n "$wpid" ]; then kill -TERM "$wpid" 2>/dev/null || true; wait "$wpid" 2>/dev/null || true; fi
  if [ -n "$pg_up" ]; then "$shared/bench/postgres18.sh" stop "$work/pg" >/dev/null 2>&1 || true; fi
  rm -rf "$work"
}
trap cleanup EXIT
trap 'exit 130' INT TERM


# p50 p99 max of column COL of FILE (nearest rank).
stats() {
  awk -v c="$2" '$c ~ /^-?[0-9]+$/ {print $c}' "$1" | sort -n | awk '
    {a[NR] = $1}
    function rank(p,  i) { i = int(p * NR); if (i < p * NR) i++; if (i < 1) i = 1; return a[i] }
    END { if (NR == 0) print "nan nan nan"; else print rank(0.50), rank(0.99), a[NR] }'
}

run() { # SERVER PORT
  local server=$1 port=$2 q
  {
    echo "== $server"
    for g in server_version shared_buffers max_wal_size checkpoint_timeout synchronous_commit \
             wal_compression max_wal_senders; do
      printf '%s = %s\n' "$g" "$(psql_ "$port" -Atqc "show $g" 2>&1 | head -1)"
    done
  } >>"$out/settings.txt"
  "$PGBENCH" -h 127.0.0.1 -p "$port" -U postgres -i -q -s "$scale" postgres >"$out/$server.init.txt" 2>&1
  "$PSQL" -h 127.0.0.1 -p "$port" -U postgres -X -Atq \
    -d "dbname=postgres replication=database" -c "CREATE_REPLICATION_SLOT lag PHYSICAL RESERVE_WAL" >/dev/null
  mkdir -p "$work/recv-$server"
  "$RECEIVEWAL" -h 127.0.0.1 -p "$port" -U postgres -S lag --synchronous -n \
    -D "$work/recv-$server" 2>"$out/$server.receivewal.txt" &
  rpid=$!
  psql_ "$port" -Atqc checkpoint >/dev/null
  q="select pg_wal_lsn_diff(pg_current_wal_lsn(), sent_lsn), pg_wal_lsn_diff(pg_current_wal_lsn(), flush_lsn)
     from pg_stat_replication where application_name = 'pg_receivewal'"
  # The slot starts at the last redo point, before the load: sample only once the receiver
  # has caught up with it (flushed all but 1 MB), so that the figures are the run's.
  local i caught=""
  for i in $(seq 600); do
    local d; d=$(psql_ "$port" -AtqF ' ' -c "$q" 2>/dev/null | awk '{print $2}')
    if [ -n "$d" ] && [ "$d" -lt 1048576 ] 2>/dev/null; then caught=1; break; fi
    sleep 0.1
  done
  [ -n "$caught" ] || echo "warning: $server: the receiver did not catch up before the run" | tee -a "$out/settings.txt" >&2
  ( while :; do
      printf '%s\t%s\n' "$(date +%s.%N)" "$(psql_ "$port" -AtqF $'\t' -c "$q" 2>/dev/null | head -1)"
      sleep 0.1
    done ) >"$out/$server.samples.tsv" &
  spid=$!
  "$PGBENCH" -h 127.0.0.1 -p "$port" -U postgres -n -b tpcb-like -M prepared -c "$clients" -j 2 \
    -T "$seconds" postgres >"$out/$server.pgbench.txt" 2>&1 || echo "warning: $server pgbench failed" >&2
  kill "$spid" 2>/dev/null || true; wait "$spid" 2>/dev/null || true; spid=""
  kill -INT "$rpid" 2>/dev/null || true; wait "$rpid" 2>/dev/null || true; rpid=""
  local tps unsent unflush
  tps=$(awk '/^tps/{print $3; exit}' "$out/$server.pgbench.txt")
  unsent=$(stats "$out/$server.samples.tsv" 2); unflush=$(stats "$out/$server.samples.tsv" 3)
  printf '%s\t%.0f\t%s\t%s\t%s\n' "$server" "${tps:-0}" "$(tr ' ' '\t' <<<"$unsent")" \
    "$(tr ' ' '\t' <<<"$unflush")" "$(awk 'NF >= 3' "$out/$server.samples.tsv" | wc -l)" >>"$out/summary.tsv"
}

printf 'server\ttps\tunsent_p50\tunsent_p99\tunsent_max\tunflushed_p50\tunflushed_p99\tunflushed_max\tsamples\n' >"$out/summary.tsv"
if [ "$only" != walnut ]; then
  PG_EXTRA_CONF="shared_buffers=128MB max_wal_size=1GB checkpoint_timeout=5min max_connections=100 synchronous_commit=off shared_preload_libraries=" \
    "$shared/bench/postgres18.sh" start "$work/pg" "$pport" >/dev/null
  pg_up=1
  run pg18 "$pport"
  "$shared/bench/postgres18.sh" stop "$work/pg" >/dev/null; pg_up=""
fi
if [ "$only" != pg ]; then
  "$walnut" initdb -D "$work/walnut" >/dev/null
  "$walnut" serve -D "$work/walnut" -p "$wport" -c synchronous_commit=off >"$out/walnut.server.log" 2>&1 &
  wpid=$!
  for _ in $(seq 300); do psql_ "$wport" -Atqc 'select 1' >/dev/null 2>&1 && break; sleep 0.2; done
  run walnut "$wport"
fi

{
  echo "| server | tps | unsent p50 / p99 / max (bytes) | not flushed on the receiver p50 / p99 / max (bytes) | samples |"
  echo "|---|---:|---:|---:|---:|"
  awk -F'\t' 'NR > 1 { printf "| %s | %s | %s / %s / %s | %s / %s / %s | %s |\n", $1, $2, $3, $4, $5, $6, $7, $8, $9 }' "$out/summary.tsv"
} >"$out/table.md"
cat "$out/table.md"
