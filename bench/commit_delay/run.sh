#!/usr/bin/env bash
# The anchors' commit_delay table (../shared/anchors.md), for walnut and PostgreSQL 18 side by side:
# pgbench simple-update on a write-IOPS-limited disk, once per commit_delay, plus walnut with no
# commit_delay at all (its default group_commit=adaptive).
#
#   bench/commit_delay/run.sh [--wiops 1000|0|none] [--scale 100] [--seconds 30] [--clients 10]
#                             [--delays "0 10 100 200 500 750 1000 1250 1500 2000"]
#                             [--out DIR] [--only walnut|pg|both] [--walnut BIN] [--keep-logs]
#
# Servers run one after the other (they would share the throttle's cgroup), each under
# ../shared/bench/throttle.sh with its data on the same disk (/var/tmp), with the anchors'
# settings: shared_buffers=3GB, max_wal_size=100GB, checkpoint_timeout=15min, synchronous_commit=on.
#   pg18            postgres18.sh start; pgbench -i -s SCALE; pg_prewarm; one run per delay
#   walnut fixed    serve -c group_commit=fixed; pgbench -i -s SCALE; count(*); one run per delay
#   walnut adaptive restart without group_commit; count(*); one run with no commit_delay option
# Each run follows Cybertec's "commit_delay for better performance" (Laurenz Albe, 2024) as
# ../shared/bench/commit_delay_sweep.sh does it (checkpoint first; commit_delay via
# PGOPTIONS; write IOPS from the cgroup's counter, or from the whole disk when unthrottled), with
# pgbench's per-transaction log added for p50 and p99 latency.
#
# Writes to OUT (default bench/commit_delay/results/DATE-TIME): results.tsv (server mode
# commit_delay_us clients tps lat_avg_ms lat_p50_ms lat_p99_ms write_iops), chart.svg, table.md,
# test-fsync.txt (and test-fsync-paced.txt, flushes 2 ms apart), walnut-*.stats-{before,after}.txt,
# settings.txt, server logs, pgbench/ output.
# PGBENCH and PSQL override PostgreSQL 18's pgbench and psql. Needs root (cgroups, su pgref).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd); root=$(cd "$here/../.." && pwd)
shared=${WALNUT_SHARED:-$root/../shared}
wiops=1000; scale=100; seconds=30; clients=10; only=both; walnut=""; out=""; keep_logs=""
delays="0 10 100 200 500 750 1000 1250 1500 2000"
usage() { awk 'NR > 1 && /^#/ {sub(/^# ?/, ""); print; next} NR > 1 {exit}' "$0" >&2; exit 2; }
while [ $# -gt 0 ]; do
  case $1 in
    --wiops) wiops=$2;; --scale) scale=$2;; --seconds) seconds=$2;; --clients) clients=$2;;
    --delays) delays=$2;; --out) out=$2;; --only) only=$2;; --walnut) walnut=$2;;
    --keep-logs) keep_logs=1; shift; continue;;
    -h|--help) usage;;
    *) echo "unknown option $1" >&2; usage;;
  esac; shift 2
done
case $only in walnut|pg|both) ;; *) echo "--only must be walnut, pg or both" >&2; exit 2;; esac
case $wiops in 0|none) wiops="";; esac
threads=$(( clients < 2 ? clients : 2 ))

"$shared/bench/postgres18.sh" install >/dev/null
PGBIN=$("$shared/bench/postgres18.sh" bin)
PGBENCH=${PGBENCH:-$PGBIN/pgbench}; PSQL=${PSQL:-$PGBIN/psql}
if [ "$only" != pg ] && [ -z "$walnut" ]; then
  (cd "$root" && cargo build --release -q)
  target=${CARGO_TARGET_DIR:-$root/target}; case $target in /*) ;; *) target=$root/$target;; esac
  walnut=$target/release/walnut
fi
[ "$only" = pg ] || [ -x "$walnut" ] || { echo "no walnut binary at $walnut" >&2; exit 1; }

out=${out:-$here/results/$(date +%Y%m%d-%H%M%S)}
mkdir -p "$out/pgbench"; out=$(cd "$out" && pwd)
work=$(mktemp -d /var/tmp/walnut-commit-delay.XXXXXX); chmod 755 "$work"   # pgref must reach pg/
pport=55432; wport=55433
pg_up=""; wpid=""
thr=(); [ -n "$wiops" ] && thr=("$shared/bench/throttle.sh" "$wiops" --dir "$work" --)

cleanup() {
  if [ -n "$wpid" ]; then kill -TERM "$wpid" 2>/dev/null || true; wait "$wpid" 2>/dev/null || true; fi
  if [ -n "$pg_up" ]; then "$shared/bench/postgres18.sh" stop "$work/pg" >/dev/null 2>&1 || true; fi
  [ -f "$work/pg/server.log" ] && cp "$work/pg/server.log" "$out/pg18.server.log"
  rm -rf "$work"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

psql_() { local port=$1; shift; "$PSQL" -h 127.0.0.1 -p "$port" -U postgres -X "$@" postgres; }
warn() { echo "warning: $*" | tee -a "$out/warnings.txt" >&2; }

# Write requests so far: the throttle cgroup's counter, or the disk's when unthrottled.
disk_stat=/sys/class/block/$(basename "$(findmnt -no SOURCE --target "$work" | head -1)")/stat
ios() {
  if [ -n "$wiops" ]; then "$shared/bench/throttle.sh" --ios "$wiops"
  else awk '{print $5}' "$disk_stat" 2>/dev/null || echo 0; fi
}

# p50 and p99 (ms, nearest rank) of column 3 (latency, µs) of pgbench's per-transaction logs.
percentiles() {
  cat "$@" 2>/dev/null | awk '$3 ~ /^[0-9]+$/ {print $3}' | sort -n | awk '
    {a[NR] = $1}
    function rank(p,  i) { i = int(p * NR); if (i < p * NR) i++; if (i < 1) i = 1; return a[i] / 1000 }
    END { if (NR == 0) print "nan nan"; else printf "%.3f %.3f\n", rank(0.50), rank(0.99) }'
}

# sweep SERVER MODE PORT DELAYS: one pgbench run per delay ("adaptive": no commit_delay option).
sweep() {
  local server=$1 mode=$2 port=$3 d
  for d in $4; do
    psql_ "$port" -Atqc checkpoint >/dev/null 2>&1 || true
    local opts="" name="$server-$mode-$d"
    [ "$d" != adaptive ] && opts="-c commit_delay=$d"
    local got; got=$(PGOPTIONS="$opts" psql_ "$port" -Atqc 'show commit_delay' 2>&1 || true)
    [ "$d" = adaptive ] || [ "$got" = "$d" ] || warn "$name: show commit_delay said '$got'"
    mkdir -p "$out/pgbench/$name"
    local a b s e rc=0 txt
    a=$(ios); s=$(date +%s.%N)
    PGOPTIONS="$opts" "$PGBENCH" -h 127.0.0.1 -p "$port" -U postgres -n -b simple-update \
      -c "$clients" -j "$threads" -T "$seconds" -l --log-prefix="$out/pgbench/$name/tx" postgres \
      >"$out/pgbench/$name.txt" 2>&1 || rc=$?
    b=$(ios); e=$(date +%s.%N)
    txt=$(cat "$out/pgbench/$name.txt")
    [ "$rc" = 0 ] || warn "$name: pgbench exited $rc: $(tail -2 <<<"$txt" | tr '\n' ' ')"
    local tps lat pct
    tps=$(awk '/^tps/{print $3; exit}' <<<"$txt"); lat=$(awk '/^latency average/{print $4}' <<<"$txt")
    pct=$(percentiles "$out/pgbench/$name"/tx.*)
    printf '%s\t%s\t%s\t%s\t%.1f\t%s\t%s\t%s\t%.0f\n' "$server" "$mode" "$d" "$clients" "${tps:-0}" \
      "${lat:-nan}" ${pct} "$(echo "($b-$a)/($e-$s)" | bc -l)" | tee -a "$out/results.tsv"
    [ -n "$keep_logs" ] || rm -rf "${out:?}/pgbench/$name"
  done
}

run_pg() {
  PG_EXTRA_CONF="synchronous_commit=on" "${thr[@]}" "$shared/bench/postgres18.sh" start "$work/pg" "$pport" \
    >"$out/pg18.start.log"
  pg_up=1
  "$PGBENCH" -h 127.0.0.1 -p "$pport" -U postgres -i -s "$scale" -q postgres >"$out/pg18.init.log" 2>&1
  psql_ "$pport" -Atqc "select sum(pg_prewarm(c.oid::regclass)) from pg_class c where relname like 'pgbench%'" >/dev/null
  psql_ "$pport" -Atqc 'select version()' >>"$out/settings.txt"
  sweep pg18 fixed "$pport" "$delays"
  "$shared/bench/postgres18.sh" stop "$work/pg"; pg_up=""
  cp "$work/pg/server.log" "$out/pg18.server.log"; rm -rf "$work/pg"
}

# walnut_start LOGNAME [-c name=value ...]: serve under the throttle, wait until it answers.
walnut_start() {
  local log=$out/$1.server.log; shift
  "${thr[@]}" "$walnut" serve -D "$work/walnut" -p "$wport" -c shared_buffers=3GB -c max_wal_size=100GB \
    -c checkpoint_timeout=15min -c synchronous_commit=on -c max_connections=300 "$@" >"$log" 2>&1 &
  wpid=$!
  local i
  for i in $(seq 300); do
    psql_ "$wport" -Atqc 'select 1' >/dev/null 2>&1 && return 0
    kill -0 "$wpid" 2>/dev/null || break
    sleep 0.2
  done
  echo "walnut did not start; $log says:" >&2; tail -20 "$log" >&2; exit 1
}
walnut_stop() { kill -TERM "$wpid"; wait "$wpid" || true; wpid=""; }

walnut_stats() { # FILE
  { for v in walnut_stat_group_commit pg_stat_wal; do
      echo "== SELECT * FROM $v"; psql_ "$wport" -c "SELECT * FROM $v" 2>&1 || true
    done; } >"$1"
}

walnut_settings() { # MODE
  { echo "== walnut $1"; for g in group_commit synchronous_commit commit_delay shared_buffers max_wal_size checkpoint_timeout; do
      printf '%s = %s\n' "$g" "$(psql_ "$wport" -Atqc "show $g" 2>&1 | head -1)"
    done; } >>"$out/settings.txt"
}

run_walnut() {
  "$walnut" initdb -D "$work/walnut" >"$out/walnut.initdb.log" 2>&1
  # The disk's own flush rate under the same throttle, for the ceiling clients x flushes/s.
  { "${thr[@]}" "$walnut" test-fsync -D "$work/walnut" --seconds 3 2>&1 || echo "(walnut test-fsync exited $?)"; } \
    >"$out/test-fsync.txt"
  # The same, with flushes 2 ms apart as under group commit: shows the write requests per flush
  # that back-to-back flushes hide (the inode write of fdatasync on ext4 without a journal).
  { "${thr[@]}" "$walnut" test-fsync -D "$work/walnut" --seconds 3 --interval-us 2000 2>&1 || echo "(walnut test-fsync exited $?)"; } \
    >"$out/test-fsync-paced.txt"
  walnut_start walnut-fixed -c group_commit=fixed
  walnut_settings fixed
  "$PGBENCH" -h 127.0.0.1 -p "$wport" -U postgres -i -s "$scale" -q postgres >"$out/walnut.init.log" 2>&1
  psql_ "$wport" -Atqc 'SELECT count(*) FROM pgbench_accounts' >/dev/null
  walnut_stats "$out/walnut-fixed.stats-before.txt"
  sweep walnut fixed "$wport" "$delays"
  walnut_stats "$out/walnut-fixed.stats-after.txt"
  walnut_stop

  walnut_start walnut-adaptive
  walnut_settings adaptive
  psql_ "$wport" -Atqc 'SELECT count(*) FROM pgbench_accounts' >/dev/null
  walnut_stats "$out/walnut-adaptive.stats-before.txt"
  sweep walnut adaptive "$wport" adaptive
  walnut_stats "$out/walnut-adaptive.stats-after.txt"
  walnut_stop
}

{ echo "date: $(date -Is)"; echo "host: $(nproc) cpus, $(awk '/MemTotal/{print $2" kB"}' /proc/meminfo)"
  echo "wiops=${wiops:-none} scale=$scale seconds=$seconds clients=$clients threads=$threads delays=\"$delays\""
  echo "pgbench: $("$PGBENCH" --version)"
  [ "$only" = pg ] || echo "walnut: $walnut ($(git -C "$root" rev-parse --short HEAD 2>/dev/null || echo '?')$(git -C "$root" diff --quiet 2>/dev/null || echo ', dirty tree'))"
} >"$out/settings.txt"
printf 'server\tmode\tcommit_delay_us\tclients\ttps\tlat_avg_ms\tlat_p50_ms\tlat_p99_ms\twrite_iops\n' \
  | tee "$out/results.tsv"
[ "$only" = walnut ] || run_pg
[ "$only" = pg ] || run_walnut
cargo run --release -q --manifest-path "$here/chart/Cargo.toml" -- "$out"
echo "results in $out"
