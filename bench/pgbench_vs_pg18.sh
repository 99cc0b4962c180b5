#!/usr/bin/env bash
# walnut against PostgreSQL 18 on the same machine, same pgbench, same workloads, one sitting.
#
#   bench/pgbench_vs_pg18.sh [--seconds 30] [--scale 10] [--clients 10] [--runs 1] [--walnut BIN]
#
# Builds walnut (release; --walnut BIN runs another build instead), starts it and PostgreSQL 18
# (../shared/bench/postgres18.sh, settings of ../shared/anchors.md: shared_buffers=3GB,
# max_wal_size=100GB, checkpoint_timeout=15min, synchronous_commit=on), loads both with pgbench -i -s SCALE, then runs for each workload
# walnut, PostgreSQL, walnut, PostgreSQL ... (interleaved, to spread the machine's noise) and
# prints each server's median tps and the ratio walnut/PostgreSQL:
#   simple-update -M simple; simple-update -M prepared; select-only -M prepared (all -c 10 -j 2).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd); root=$(cd "$here/.." && pwd)
shared=${WALNUT_SHARED:-$root/../shared}
seconds=30; scale=10; clients=10; runs=1; walnut=""
while [ $# -gt 0 ]; do
  case $1 in
    --seconds) seconds=$2;; --scale) scale=$2;; --clients) clients=$2;; --runs) runs=$2;;
    --walnut) walnut=$2;;
    *) echo "unknown option $1" >&2; exit 2;;
  esac; shift 2
done
"$shared/bench/postgres18.sh" install >/dev/null
PGBIN=$("$shared/bench/postgres18.sh" bin)
PGBENCH=${PGBENCH:-$PGBIN/pgbench}; PSQL="$PGBIN/psql"
if [ -n "$walnut" ]; then
  WALNUT=$walnut   # another build, say an older commit's, for a before/after comparison
else
  (cd "$root" && cargo build --release -q)
  WALNUT="${CARGO_TARGET_DIR:-$root/target}/release/walnut"
fi
work=$(mktemp -d /var/tmp/walnut-bench.XXXXXX); chmod 755 "$work"
wport=5433; pport=5432
cleanup() {
  [ -n "${wpid:-}" ] && kill "$wpid" 2>/dev/null && wait "$wpid" 2>/dev/null || true
  "$shared/bench/postgres18.sh" stop "$work/pg" >/dev/null 2>&1 || true
  rm -rf "$work"
}
trap cleanup EXIT

"$WALNUT" initdb -D "$work/walnut" >/dev/null
"$WALNUT" serve -D "$work/walnut" -p $wport -c shared_buffers=3GB -c max_wal_size=100GB \
  -c checkpoint_timeout=15min -c max_connections=300 >"$work/walnut.log" 2>&1 &
wpid=$!
"$shared/bench/postgres18.sh" start "$work/pg" $pport >/dev/null
for i in $(seq 100); do "$PSQL" -h 127.0.0.1 -p $wport -U postgres -Atqc 'select 1' postgres >/dev/null 2>&1 && break; sleep 0.2; done

for p in $wport $pport; do
  "$PGBENCH" -h 127.0.0.1 -p $p -U postgres -i -s "$scale" -q postgres >/dev/null 2>&1
done
"$PSQL" -h 127.0.0.1 -p $pport -U postgres -Atqc "select sum(pg_prewarm(c.oid::regclass)) from pg_class c where relname like 'pgbench%'" postgres >/dev/null

tps() { # port script mode
  "$PGBENCH" -h 127.0.0.1 -p "$1" -U postgres -n -b "$2" -M "$3" -c "$clients" -j 2 -T "$seconds" postgres 2>/dev/null \
    | awk '/^tps/{print $3; exit}'
}
median() { tr ' ' '\n' | grep -v '^$' | sort -g | awk '{a[NR]=$1} END{print (NR%2)?a[(NR+1)/2]:(a[NR/2]+a[NR/2+1])/2}'; }

printf '%-28s %12s %12s %8s\n' workload walnut_tps pg18_tps ratio
for w in "simple-update simple" "simple-update prepared" "select-only prepared"; do
  set -- $w
  wl=""; pl=""
  for r in $(seq "$runs"); do
    "$PSQL" -h 127.0.0.1 -p $wport -U postgres -Atqc checkpoint postgres >/dev/null 2>&1 || true
    wl="$wl $(tps $wport "$1" "$2")"
    "$PSQL" -h 127.0.0.1 -p $pport -U postgres -Atqc checkpoint postgres >/dev/null 2>&1 || true
    pl="$pl $(tps $pport "$1" "$2")"
  done
  wt=$(echo "$wl" | median); pt=$(echo "$pl" | median)
  printf '%-28s %12.0f %12.0f %8.2f\n' "$1 -M $2" "$wt" "$pt" "$(echo "$wt / $pt" | bc -l)"
done
