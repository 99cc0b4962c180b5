#!/usr/bin/env bash
# Issue 15, "the cost of synchronous replication". For walnut and PostgreSQL 18, one after the
# other, each at its defaults plus synchronous_standby_names naming one synchronous standby:
#   pgbench -n -b tpcb-like -M prepared -c C -j 2 -T SECONDS   for C in CLIENTS,
# with synchronous_commit set per run (PGOPTIONS). The synchronous standby is, with
#   --standby real        (the default) each server's own streaming hot standby on a physical
#                         slot "sync", made after pgbench -i (PostgreSQL: postgres18.sh standby;
#                         walnut: walnut basebackup -R -C -S sync, then walnut serve on the copy),
#                         synchronous_standby_names = '*'; levels local, remote_write, on and
#                         remote_apply. After the runs the standby replays the primary's flush
#                         LSN and sum(abalance) of pgbench_accounts must match on both.
#   --standby receivewal  PostgreSQL 18's pg_receivewal --synchronous on a slot "sync"
#                         (synchronous_standby_names = 'pg_receivewal'); it writes, flushes and
#                         reports each message at once and replays nothing, so remote_apply is
#                         not measured: levels local, remote_write and on.
#
#   bench/replication/sync_cost.sh --walnut BIN [--standby real|receivewal] [--seconds 30]
#                                  [--scale 10] [--clients "10 64"] [--out DIR]
#
# Ports 5464/5466 (PostgreSQL primary/standby) and 5465/5467 (walnut); data under /var/tmp.
# Writes OUT (default bench/replication/results/sync-DATE-TIME): summary.tsv (server, clients,
# level, tps), table.md (tps, walnut ÷ PostgreSQL, and each level's tps as a fraction of
# local), SERVER.cC.LEVEL.pgbench.txt, SERVER.init.txt, walnut.server.log (the primary's),
# settings.txt (the standby as the primary sees it, load average), and with a real standby
# SERVER.backup.txt and SERVER.standby.log; with pg_receivewal SERVER.receivewal.txt. Needs root
# (postgres18.sh runs PostgreSQL as pgref).
set -euo pipefail
source "$(dirname "$0")/lib.sh"
walnut=""; standby=real; seconds=30; scale=10; clients="10 64"; out=""
while [ $# -gt 0 ]; do
  case $1 in
    --walnut) walnut=$2;; --standby) standby=$2;; --seconds) seconds=$2;; --scale) scale=$2;;
    --clients) clients=$2;; --out) out=$2;;
    -h|--help) usage;;
    *) echo "unknown option $1" >&2; usage;;
  esac; shift 2
done
case $standby in
  real) levels="local remote_write on remote_apply"; names='*';;
  receivewal) levels="local remote_write on"; names=pg_receivewal;;
  *) echo "--standby must be real or receivewal" >&2; exit 2;;
esac
[ -x "$walnut" ] || { echo "--walnut BIN is required (an executable walnut)" >&2; exit 2; }
walnut=$(cd "$(dirname "$walnut")" && pwd)/$(basename "$walnut")

pg_tools

out=${out:-$here/results/sync-$(date +%Y%m%d-%H%M%S)}
mkdir -p "$out"; out=$(cd "$out" && pwd)
work=$(mktemp -d /var/tmp/walnut-sync.XXXXXX); chmod 755 "$work"   # pgref must reach pg*/
pport=5464; wport=5465; pg_sport=5466; w_sport=5467
pg_up=""; pg_standby=""; wpid=""; wspid=""; rpid=""; failed=""
cleanup() {
  if [ -n "$rpid" ]; then kill "$rpid" 2>/dev/null || true; fi
  for p in $wspid $wpid; do kill -TERM "$p" 2>/dev/null || true; wait "$p" 2>/dev/null || true; done
  if [ -n "$pg_standby" ]; then "$shared/bench/postgres18.sh" stop "$work/pg-standby" >/dev/null 2>&1 || true; fi
  if [ -n "$pg_up" ]; then "$shared/bench/postgres18.sh" stop "$work/pg" >/dev/null 2>&1 || true; fi
  rm -rf "$work"
}
trap cleanup EXIT
trap 'exit 130' INT TERM



# Starts SERVER's own standby of the primary on PORT, on slot "sync"; sets sport.
start_standby() { # SERVER PORT
  local t0; t0=$(now)
  if [ "$1" = pg18 ]; then
    sport=$pg_sport
    "$shared/bench/postgres18.sh" standby "$work/pg-standby" "$sport" "$2" sync >"$out/pg18.backup.txt" 2>&1 ||
      { echo "error: pg18: the standby did not start (pg18.backup.txt)" >&2; exit 1; }
    pg_standby=1
  else
    sport=$w_sport
    "$walnut" basebackup -h 127.0.0.1 -p "$2" -U postgres -D "$work/walnut-standby" -R -C -S sync \
      >"$out/walnut.backup.txt" 2>&1 || { echo "error: walnut basebackup failed (walnut.backup.txt)" >&2; exit 1; }
    "$walnut" serve -D "$work/walnut-standby" -p "$sport" >"$out/walnut.standby.log" 2>&1 &
    wspid=$!
    for _ in $(seq 600); do [ "$(psql_ "$sport" -Atqc 'select pg_is_in_recovery()' 2>/dev/null)" = t ] && break; sleep 0.2; done
    [ "$(psql_ "$sport" -Atqc 'select pg_is_in_recovery()' 2>/dev/null)" = t ] ||
      { echo "error: walnut: the standby is not up in recovery after 120 s (walnut.standby.log)" >&2; exit 1; }
  fi
  echo "$1: backup and standby start $(awk -v a="$t0" -v b="$(now)" 'BEGIN { printf "%.1f", b - a }') s" >>"$out/settings.txt"
}

stop_standby() { # SERVER
  if [ "$1" = pg18 ]; then
    cp "$work/pg-standby/server.log" "$out/pg18.standby.log" 2>/dev/null || true
    "$shared/bench/postgres18.sh" stop "$work/pg-standby" >/dev/null; pg_standby=""
  else
    kill -TERM "$wspid" 2>/dev/null || true; wait "$wspid" 2>/dev/null || true; wspid=""
  fi
}

# The standby replays everything the primary flushed; sum(abalance) must be the same on both.
check_standby() { # SERVER PORT SPORT
  local lsn w sum_p sum_s
  psql_ "$2" -Atqc checkpoint >/dev/null
  lsn=$(psql_ "$2" -Atqc "select pg_current_wal_flush_lsn()")
  w=$(wait_replayed "$3" "$lsn" 600) || echo "error: $1: the standby did not replay $lsn within 600 s" | tee -a "$out/settings.txt" >&2
  sum_p=$(psql_ "$2" -Atqc "select sum(abalance) from pgbench_accounts" 2>&1 | head -1)
  sum_s=$(psql_ "$3" -Atqc "select sum(abalance) from pgbench_accounts" 2>&1 | head -1)
  echo "$1: sum(abalance) primary $sum_p, standby $sum_s (standby replayed $lsn after $w s)" >>"$out/settings.txt"
  [[ $sum_p =~ ^-?[0-9]+$ ]] && [ "$sum_p" = "$sum_s" ] ||
    { echo "error: $1: primary and standby differ" | tee -a "$out/settings.txt" >&2; failed=1; }
}

run() { # SERVER PORT
  local server=$1 port=$2 c level tps sport="" w
  "$PGBENCH" -h 127.0.0.1 -p "$port" -U postgres -i -q -s "$scale" postgres >"$out/$server.init.txt" 2>&1
  if [ "$standby" = real ]; then
    start_standby "$server" "$port"
  else
    "$PSQL" -h 127.0.0.1 -p "$port" -U postgres -X -Atq \
      -d "dbname=postgres replication=database" -c "CREATE_REPLICATION_SLOT sync PHYSICAL RESERVE_WAL" >/dev/null
    mkdir -p "$work/recv-$server"
    "$RECEIVEWAL" -h 127.0.0.1 -p "$port" -U postgres -S sync --synchronous -n \
      -D "$work/recv-$server" 2>"$out/$server.receivewal.txt" &
    rpid=$!
  fi
  psql_ "$port" -Atqc "alter system set synchronous_standby_names = '$names'" >/dev/null
  psql_ "$port" -Atqc "select pg_reload_conf()" >/dev/null
  for _ in $(seq 300); do
    [ "$(psql_ "$port" -Atqc "select state, sync_state from pg_stat_replication" 2>/dev/null)" = "streaming|sync" ] && break
    sleep 0.2
  done
  [ "$(psql_ "$port" -Atqc "select state, sync_state from pg_stat_replication" 2>/dev/null)" = "streaming|sync" ] || {
    echo "error: $server: no synchronous standby streaming after 60 s: $(psql_ "$port" -Atqc "select application_name, state, sync_state from pg_stat_replication" 2>&1)" |
      tee -a "$out/settings.txt" >&2; exit 1; }
  if [ -n "$sport" ]; then
    w=$(wait_replayed "$sport" "$(psql_ "$port" -Atqc "select pg_current_wal_flush_lsn()")" 600) ||
      echo "warning: $server: the standby did not catch up before the runs" | tee -a "$out/settings.txt" >&2
    echo "$server: initial catch-up $w s" >>"$out/settings.txt"
  fi
  echo "$server: $(psql_ "$port" -Atqc "select application_name, state, sync_state from pg_stat_replication"); synchronous_standby_names = '$(psql_ "$port" -Atqc "show synchronous_standby_names")'; load average $(cut -d' ' -f1-3 /proc/loadavg)" >>"$out/settings.txt"
  for c in $clients; do
    for level in $levels; do
      PGOPTIONS="-c synchronous_commit=$level" "$PGBENCH" -h 127.0.0.1 -p "$port" -U postgres -n \
        -b tpcb-like -M prepared -c "$c" -j 2 -T "$seconds" postgres \
        >"$out/$server.c$c.$level.pgbench.txt" 2>&1 || echo "warning: $server c$c $level failed" >&2
      tps=$(awk '/^tps/{print $3; exit}' "$out/$server.c$c.$level.pgbench.txt")
      printf '%s\t%s\t%s\t%.0f\n' "$server" "$c" "$level" "${tps:-0}" >>"$out/summary.tsv"
    done
  done
  echo "$server: after the runs, load average $(cut -d' ' -f1-3 /proc/loadavg)" >>"$out/settings.txt"
  if [ -n "$sport" ]; then check_standby "$server" "$port" "$sport"; fi
  psql_ "$port" -Atqc "alter system set synchronous_standby_names = ''" >/dev/null
  psql_ "$port" -Atqc "select pg_reload_conf()" >/dev/null
  if [ -n "$sport" ]; then
    stop_standby "$server"
  else
    kill -INT "$rpid" 2>/dev/null || true; wait "$rpid" 2>/dev/null || true; rpid=""
  fi
}

printf 'server\tclients\tlevel\ttps\n' >"$out/summary.tsv"
echo "standby: $standby; levels: $levels; seconds $seconds, scale $scale, clients $clients" >"$out/settings.txt"
PG_EXTRA_CONF="shared_buffers=128MB max_wal_size=1GB checkpoint_timeout=5min max_connections=100 shared_preload_libraries=" \
  "$shared/bench/postgres18.sh" start "$work/pg" "$pport" >/dev/null
pg_up=1
run pg18 "$pport"
"$shared/bench/postgres18.sh" stop "$work/pg" >/dev/null; pg_up=""
"$walnut" initdb -D "$work/walnut" >/dev/null
"$walnut" serve -D "$work/walnut" -p "$wport" >"$out/walnut.server.log" 2>&1 &
wpid=$!
for _ in $(seq 300); do psql_ "$wport" -Atqc 'select 1' >/dev/null 2>&1 && break; sleep 0.2; done
run walnut "$wport"

{
  echo "| clients | level | PostgreSQL 18 tps | walnut tps | walnut ÷ PG | PG level ÷ local | walnut level ÷ local |"
  echo "|---:|---|---:|---:|---:|---:|---:|"
  awk -F'\t' -v levels="$levels" 'NR > 1 { t[$1 "," $2 "," $3] = $4; if (!($2 in seen)) { seen[$2] = 1; cl[++n] = $2 } }
    END {
      m = split(levels, lv, " ")
      for (i = 1; i <= n; i++) for (j = 1; j <= m; j++) {
        c = cl[i]; l = lv[j]; p = t["pg18," c "," l]; w = t["walnut," c "," l]
        pl = t["pg18," c ",local"]; wl = t["walnut," c ",local"]
        printf "| %s | %s | %s | %s | %.2f | %.2f | %.2f |\n", c, l, p, w, (p > 0 ? w / p : 0), (pl > 0 ? p / pl : 0), (wl > 0 ? w / wl : 0)
      }
    }' "$out/summary.tsv"
} >"$out/table.md"
cat "$out/table.md"
if [ -n "$failed" ]; then echo "error: sum(abalance) differs between a primary and its standby" >&2; exit 1; fi
