#!/usr/bin/env bash
# Issue 15, "the cost of synchronous replication", with what exists today: the synchronous
# standby is PostgreSQL 18's pg_receivewal --synchronous on a slot (it writes, flushes and
# reports each message at once; it replays nothing, so remote_apply cannot be measured until
# walnut has a standby). For walnut and PostgreSQL 18, one after the other, at their defaults
# plus synchronous_standby_names = 'pg_receivewal':
#   pgbench -n -b tpcb-like -M prepared -c C -j 2 -T SECONDS   for C in CLIENTS,
# with synchronous_commit = local, remote_write and on (set per run with PGOPTIONS).
#
#   bench/replication/sync_cost.sh --walnut BIN [--seconds 30] [--scale 10] [--clients "10 64"]
#                                  [--out DIR]
#
# Ports 5464 (PostgreSQL) and 5465 (walnut); data under /var/tmp. Writes OUT (default
# bench/replication/results/sync-DATE-TIME): summary.tsv (server, clients, level, tps),
# table.md (tps, and each level's tps as a fraction of local), SERVER.*.pgbench.txt. Needs
# root (postgres18.sh runs PostgreSQL as pgref).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd); root=$(cd "$here/../.." && pwd)
shared=${WALNUT_SHARED:-$root/../shared}
walnut=""; seconds=30; scale=10; clients="10 64"; out=""
usage() { awk 'NR > 1 && /^#/ {sub(/^# ?/, ""); print; next} NR > 1 {exit}' "$0" >&2; exit 2; }
while [ $# -gt 0 ]; do
  case $1 in
    --walnut) walnut=$2;; --seconds) seconds=$2;; --scale) scale=$2;; --clients) clients=$2;;
    --out) out=$2;;
    -h|--help) usage;;
    *) echo "unknown option $1" >&2; usage;;
  esac; shift 2
done
[ -x "$walnut" ] || { echo "--walnut BIN is required (an executable walnut)" >&2; exit 2; }
walnut=$(cd "$(dirname "$walnut")" && pwd)/$(basename "$walnut")

"$shared/bench/postgres18.sh" install >/dev/null
PGBIN=$("$shared/bench/postgres18.sh" bin)
PGBENCH=$PGBIN/pgbench; PSQL=$PGBIN/psql; RECEIVEWAL=$PGBIN/pg_receivewal

out=${out:-$here/results/sync-$(date +%Y%m%d-%H%M%S)}
mkdir -p "$out"; out=$(cd "$out" && pwd)
work=$(mktemp -d /var/tmp/walnut-sync.XXXXXX); chmod 755 "$work"   # pgref must reach pg/
pport=5464; wport=5465
pg_up=""; wpid=""; rpid=""
cleanup() {
  if [ -n "$rpid" ]; then kill "$rpid" 2>/dev/null || true; fi
  if [ -n "$wpid" ]; then kill -TERM "$wpid" 2>/dev/null || true; wait "$wpid" 2>/dev/null || true; fi
  if [ -n "$pg_up" ]; then "$shared/bench/postgres18.sh" stop "$work/pg" >/dev/null 2>&1 || true; fi
  rm -rf "$work"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

psql_() { local port=$1; shift; "$PSQL" -h 127.0.0.1 -p "$port" -U postgres -X "$@" postgres; }

run() { # SERVER PORT
  local server=$1 port=$2 c level tps
  "$PGBENCH" -h 127.0.0.1 -p "$port" -U postgres -i -q -s "$scale" postgres >"$out/$server.init.txt" 2>&1
  "$PSQL" -h 127.0.0.1 -p "$port" -U postgres -X -Atq \
    -d "dbname=postgres replication=database" -c "CREATE_REPLICATION_SLOT sync PHYSICAL RESERVE_WAL" >/dev/null
  mkdir -p "$work/recv-$server"
  "$RECEIVEWAL" -h 127.0.0.1 -p "$port" -U postgres -S sync --synchronous -n \
    -D "$work/recv-$server" 2>"$out/$server.receivewal.txt" &
  rpid=$!
  psql_ "$port" -Atqc "alter system set synchronous_standby_names = 'pg_receivewal'" >/dev/null
  psql_ "$port" -Atqc "select pg_reload_conf()" >/dev/null
  for _ in $(seq 300); do
    [ "$(psql_ "$port" -Atqc "select sync_state from pg_stat_replication" 2>/dev/null)" = sync ] && break
    sleep 0.2
  done
  echo "$server: $(psql_ "$port" -Atqc "select application_name, state, sync_state from pg_stat_replication")" >>"$out/settings.txt"
  for c in $clients; do
    for level in local remote_write on; do
      PGOPTIONS="-c synchronous_commit=$level" "$PGBENCH" -h 127.0.0.1 -p "$port" -U postgres -n \
        -b tpcb-like -M prepared -c "$c" -j 2 -T "$seconds" postgres \
        >"$out/$server.c$c.$level.pgbench.txt" 2>&1 || echo "warning: $server c$c $level failed" >&2
      tps=$(awk '/^tps/{print $3; exit}' "$out/$server.c$c.$level.pgbench.txt")
      printf '%s\t%s\t%s\t%.0f\n' "$server" "$c" "$level" "${tps:-0}" >>"$out/summary.tsv"
    done
  done
  psql_ "$port" -Atqc "alter system set synchronous_standby_names = ''" >/dev/null
  psql_ "$port" -Atqc "select pg_reload_conf()" >/dev/null
  kill -INT "$rpid" 2>/dev/null || true; wait "$rpid" 2>/dev/null || true; rpid=""
}

printf 'server\tclients\tlevel\ttps\n' >"$out/summary.tsv"
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
  awk -F'\t' 'NR > 1 { t[$1 "," $2 "," $3] = $4; k[$2 "," $3] = 1; if (!($2 in seen)) { seen[$2] = 1; cl[++n] = $2 } }
    END {
      split("local remote_write on", lv, " ")
      for (i = 1; i <= n; i++) for (j = 1; j <= 3; j++) {
        c = cl[i]; l = lv[j]; p = t["pg18," c "," l]; w = t["walnut," c "," l]
        pl = t["pg18," c ",local"]; wl = t["walnut," c ",local"]
        printf "| %s | %s | %s | %s | %.2f | %.2f | %.2f |\n", c, l, p, w, (p > 0 ? w / p : 0), (pl > 0 ? p / pl : 0), (wl > 0 ? w / wl : 0)
      }
    }' "$out/summary.tsv"
} >"$out/table.md"
cat "$out/table.md"
