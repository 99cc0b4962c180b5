#!/usr/bin/env bash
# Issue 16, "catch-up rate": how fast a paused standby replays what its primary wrote at its
# peak. For PostgreSQL 18 and walnut, one after the other, each at its default settings plus
# synchronous_commit=off on the primary:
#   1. the primary starts, pgbench -i -s SCALE loads it, and the server's own tool makes a
#      streaming hot standby on a physical slot (PostgreSQL: postgres18.sh standby; walnut:
#      walnut basebackup -R -C -S standby, then walnut serve on the copy), which replays
#      everything the primary has flushed;
#   2. replay is paused on the standby (pg_wal_replay_pause());
#   3. pgbench -n -b tpcb-like -M prepared -c CLIENTS -j 2 -T SECONDS on the primary;
#   4. once the standby has received everything the primary flushed (its walreceiver goes on
#      while replay is paused), replay resumes (pg_wal_replay_resume()) and the script times it
#      until pg_last_wal_replay_lsn() reaches that position (polled every 100 ms);
#   5. sum(abalance) must be the same on both.
# walnut's standby does this once per value of --recovery-workers (default "1 -1": serial
# replay, then the default of one redo worker per core), restarted with it each time, on the
# same primary (each round loads it again for SECONDS). --walnut-settings "SPEC ..." replaces
# that list: each SPEC is one round with the standby restarted with those settings, given as
# name=value[,name=value...] (e.g. "recovery_prefetch=off recovery_prefetch=try").
# --pg-settings "SPEC ..." does the same for PostgreSQL's standby (default: one round as set
# up), setting each SPEC with ALTER SYSTEM and pg_reload_conf() (recovery_prefetch and
# maintenance_io_concurrency are reloadable there).
# --cold: "cold cache": before replay resumes, sync and drop the operating system's page
# cache (echo 3 > /proc/sys/vm/drop_caches), so that the pages replay reads come from the
# disk, not from memory. At the default shared_buffers (128 MB) scale 100's 1.5 GB of data is
# 12 times the buffer pool, which the issue's cold-cache case asks to be at least 3 times.
# Reports per server (and walnut's value): transactions, WAL replayed (MB), catch-up (s), and
# transactions and MB of WAL applied per second of it.
#
#   bench/replication/catchup.sh --walnut BIN [--seconds 60] [--scale 100] [--clients 10]
#                                [--only both|pg|walnut] [--out DIR]
#                                [--recovery-workers "1 -1"] [--walnut-settings "SPEC ..."]
#                                [--pg-settings "SPEC ..."] [--cold]
#
# Ports 5476/5477 (PostgreSQL primary/standby) and 5478/5479 (walnut); data under /var/tmp.
# Writes OUT (default bench/replication/results/catchup-DATE-TIME): table.md, summary.tsv,
# SERVER.ROUND.pgbench.txt, SERVER.init.txt, the servers' logs and settings.txt (load average
# before each round: the machine must be otherwise idle). Needs root (postgres18.sh runs
# PostgreSQL as pgref).
set -euo pipefail
source "$(dirname "$0")/lib.sh"
walnut=""; seconds=60; scale=100; clients=10; only=both; out=""; recovery_workers="1 -1"
walnut_settings=""; pg_settings=""; cold=0
args=()
while [ $# -gt 0 ]; do
  case $1 in
    --recovery-workers) recovery_workers=${2:-}; shift 2 ;;
    --walnut-settings) walnut_settings=${2:-}; shift 2 ;;
    --pg-settings) pg_settings=${2:-}; shift 2 ;;
    --cold) cold=1; shift ;;
    *) args+=("$1"); shift ;;
  esac
done
parse_lag_options "${args[@]}"

pg_tools
out=${out:-$here/results/catchup-$(date +%Y%m%d-%H%M%S)}
mkdir -p "$out"; out=$(cd "$out" && pwd)
work=$(mktemp -d /var/tmp/walnut-catchup.XXXXXX); chmod 755 "$work"   # pgref must reach pg*/
pg_pport=5476; pg_sport=5477; w_pport=5478; w_sport=5479
pg_primary=""; pg_standby=""; wpid=""; wspid=""
trap cleanup_pairs EXIT
trap 'exit 130' INT TERM
printf 'server\ttransactions\twal_mb\tcatchup_s\ttx_per_s\twal_mb_per_s\n' >"$out/summary.tsv"
echo "seconds $seconds, scale $scale, clients $clients, cold $cold" >"$out/settings.txt"

# Steps 2 to 5 on a caught-up pair; LABEL names the row.
round() { # LABEL PPORT SPORT
  local label=$1 pport=$2 sport=$3 tx lsn lsn0 t0 s file
  file="$out/$(tr ' =' '._' <<<"$label").pgbench.txt"
  echo "$label: load average $(cut -d' ' -f1-3 /proc/loadavg)" >>"$out/settings.txt"
  psql_ "$sport" -Atqc "select pg_wal_replay_pause()" >/dev/null
  echo "$label: replay paused; pgbench $seconds s" >&2
  "$PGBENCH" -h 127.0.0.1 -p "$pport" -U postgres -n -b tpcb-like -M prepared -c "$clients" -j 2 \
    -T "$seconds" postgres >"$file" 2>&1 || echo "warning: $label: pgbench failed" >&2
  tx=$(awk '/number of transactions actually processed/ {print $NF}' "$file" | cut -d/ -f1)
  lsn=$(psql_ "$pport" -Atqc "select pg_current_wal_flush_lsn()")
  # Everything received first, so that the time is replay's alone.
  for _ in $(seq 6000); do
    s=$(psql_ "$sport" -Atqc "select pg_wal_lsn_diff(pg_last_wal_receive_lsn(), '$lsn') >= 0" 2>/dev/null || true)
    [ "$s" = t ] && break; sleep 0.1
  done
  lsn0=$(psql_ "$sport" -Atqc "select pg_last_wal_replay_lsn()")
  if [ "$cold" = 1 ]; then
    sync; echo 3 >/proc/sys/vm/drop_caches
    echo "$label: page cache dropped; $(awk '/^Cached:/ {print $2 " kB cached"}' /proc/meminfo)" >>"$out/settings.txt"
  fi
  t0=$(now)
  # Replay resumes at once, and PostgreSQL's may cancel this very session for a recovery
  # conflict before it answers (its WAL waited longer than max_standby_streaming_delay): a
  # cancelled call is checked and, if replay is still paused, made again.
  for _ in 1 2 3 4 5; do
    psql_ "$sport" -Atqc "select pg_wal_replay_resume()" >/dev/null 2>&1 && break
    [ "$(psql_ "$sport" -Atqc "select pg_is_wal_replay_paused()" 2>/dev/null)" = f ] && break
    sleep 0.1
  done
  s=$(wait_replayed "$sport" "$lsn" 1800) || { echo "error: $label: no catch-up within 1800 s" >&2; exit 1; }
  s=$(awk -v a="$t0" -v b="$(now)" 'BEGIN { printf "%.2f", b - a }')
  local mb sum_p sum_s
  mb=$(psql_ "$pport" -Atqc "select pg_wal_lsn_diff('$lsn', '$lsn0')" | awk '{ printf "%.1f", $1 / 1e6 }')
  sum_p=$(sum_abalance "$pport"); sum_s=$(sum_abalance "$sport")
  echo "$label: sum(abalance) primary $sum_p, standby $sum_s" >>"$out/settings.txt"
  [ "$sum_p" = "$sum_s" ] || echo "error: $label: primary and standby differ" | tee -a "$out/settings.txt" >&2
  printf '%s\t%s\t%s\t%s\t%s\t%s\n' "$label" "$tx" "$mb" "$s" \
    "$(awk -v t="$tx" -v r="$s" 'BEGIN { printf "%.0f", t / r }')" \
    "$(awk -v m="$mb" -v r="$s" 'BEGIN { printf "%.1f", m / r }')" >>"$out/summary.tsv"
}

# sum(abalance) on PORT; tried again after a recovery conflict cancels it (PostgreSQL's
# standby, when the primary's vacuum removes what the query reads).
sum_abalance() { # PORT
  local s
  for _ in 1 2 3 4 5; do
    s=$(psql_ "$1" -Atqc "select sum(abalance) from pgbench_accounts" 2>/dev/null) && { echo "$s"; return; }
    sleep 1
  done
  echo "error"
}

caught_up() { # PPORT SPORT
  wait_replayed "$2" "$(psql_ "$1" -Atqc "select pg_current_wal_flush_lsn()")" 900 >/dev/null ||
    { echo "error: the standby did not catch up" >&2; exit 1; }
}

if [ "$only" != walnut ]; then
  echo "pg18: primary, pgbench -i -s $scale, standby" >&2
  pg18_primary "$pg_pport"
  pg18_standby "$pg_sport" "$pg_pport"
  caught_up "$pg_pport" "$pg_sport"
  if [ -z "$pg_settings" ]; then
    round pg18 "$pg_pport" "$pg_sport"
  fi
  for spec in $pg_settings; do
    for kv in ${spec//,/ }; do
      psql_ "$pg_sport" -Atqc "alter system set ${kv%%=*} = '${kv#*=}'" >/dev/null
    done
    psql_ "$pg_sport" -Atqc "select pg_reload_conf()" >/dev/null
    sleep 1
    echo "pg18 $spec: $(psql_ "$pg_sport" -Atqc "select string_agg(name || '=' || setting, ',') from pg_settings where name in ($(for kv in ${spec//,/ }; do printf "'%s'," "${kv%%=*}"; done | sed 's/,$//'))")" >>"$out/settings.txt"
    caught_up "$pg_pport" "$pg_sport"
    round "pg18 $spec" "$pg_pport" "$pg_sport"
  done
  pg18_drop_pair
fi
if [ "$only" != pg ]; then
  echo "walnut: primary, pgbench -i -s $scale, standby" >&2
  walnut_primary "$w_pport"
  walnut_backup "$w_pport"
  specs=$walnut_settings
  [ -n "$specs" ] || for w in $recovery_workers; do specs="$specs recovery_workers=$w"; done
  for spec in $specs; do
    sopts=(); for kv in ${spec//,/ }; do sopts+=(-c "$kv"); done
    walnut_standby "$w_sport" "${sopts[@]}"
    caught_up "$w_pport" "$w_sport"
    round "walnut $spec" "$w_pport" "$w_sport"
    kill -TERM "$wspid"; wait "$wspid" 2>/dev/null || true; wspid=""
  done
fi

{
  echo "| server | transactions | WAL replayed (MB) | catch-up (s) | tx/s applied | MB/s applied |"
  echo "|---|---:|---:|---:|---:|---:|"
  tail -n +2 "$out/summary.tsv" | awk -F'\t' '{ printf "| %s | %s | %s | %s | %s | %s |\n", $1, $2, $3, $4, $5, $6 }'
} >"$out/table.md"
cat "$out/table.md"
