#!/usr/bin/env bash
# What direct I/O costs a running server: pgbench select-only and tpcb-like (-M prepared) on a
# data set larger than shared_buffers, buffered and with direct I/O, walnut and PostgreSQL 18.
#
#   bench/io/direct.sh --walnut BIN [--scale 300] [--seconds 300] [--clients 10]
#                      [--only both|pg|walnut] [--modes "buffered direct"] [--out DIR]
#
# For each server and mode, in a fresh data directory under /var/tmp, unthrottled, with
# shared_buffers=1GB (lib.sh; otherwise the anchors' settings; at scale 300 the tables and indexes
# take about 4.5 GB):
#   direct: PostgreSQL debug_io_direct='data,wal,wal_init'; walnut -c io_direct=data,wal,wal_init
#           (a walnut that refuses it is reported as "refused", and the run goes on)
#   pgbench -i -s SCALE -q (loaded in the same mode, so a buffered server starts with the page
#   cache holding what it wrote, and a direct one with nothing there), CHECKPOINT, then
#   pgbench -n -b select-only -M prepared -c 10 -j 2 -T SECONDS
#   pgbench -n -b tpcb-like   -M prepared -c 10 -j 2 -T SECONDS
#   and the server's memory and the page cache it holds (as load.sh).
# A full run is 4 loads at scale 300 and 8 runs of SECONDS: about an hour with the defaults.
# Ports 5464 (PostgreSQL) and 5465 (walnut). Needs root (su pgref).
#
# Writes to OUT (default bench/io/results/direct-DATE-TIME): results.tsv, table.md (tps, and the
# ratios direct/buffered and walnut/PostgreSQL), settings.txt, pgbench/*.txt.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd); root=$(cd "$here/../.." && pwd)
shared=${WALNUT_SHARED:-$root/../shared}
walnut=""; scale=300; seconds=300; clients=10; only=both; modes="buffered direct"; out=""
usage() { awk 'NR > 1 && /^#/ {sub(/^# ?/, ""); print; next} NR > 1 {exit}' "$0" >&2; exit 2; }
while [ $# -gt 0 ]; do
  case $1 in
    --walnut) walnut=$2;; --scale) scale=$2;; --seconds) seconds=$2;; --clients) clients=$2;;
    --only) only=$2;; --modes) modes=$2;; --out) out=$2;;
    -h|--help) usage;;
    *) echo "unknown option $1" >&2; usage;;
  esac; shift 2
done
case $only in both|pg|walnut) ;; *) echo "--only must be both, pg or walnut" >&2; exit 2;; esac
[ "$only" = pg ] || [ -x "$walnut" ] || { echo "--walnut BIN is required (an executable walnut)" >&2; exit 2; }
walnut=${walnut:+$(cd "$(dirname "$walnut")" && pwd)/$(basename "$walnut")}
threads=$(( clients < 2 ? clients : 2 ))
workloads="select-only tpcb-like"
# shellcheck source=lib.sh
. "$here/lib.sh"
io_setup
out=${out:-$here/results/direct-$(date +%Y%m%d-%H%M%S)}
mkdir -p "$out/pgbench"; out=$(cd "$out" && pwd)
pport=5464; wport=5465

{ echo "date: $(date -Is)"; echo "host: $(nproc) cpus, $(awk '/MemTotal/{print $2" kB"}' /proc/meminfo), load average $(cut -d' ' -f1-3 /proc/loadavg)"
  echo "scale=$scale seconds=$seconds clients=$clients threads=$threads modes=\"$modes\" only=$only; unthrottled;" \
       "shared_buffers=1GB max_wal_size=100GB checkpoint_timeout=15min synchronous_commit=on"
  echo "pgbench: $("$PGBENCH" --version)"
  [ "$only" = pg ] || echo "walnut: $walnut ($("$walnut" --version 2>&1 | head -1))"
  echo "bench scripts at: $(git -C "$root" rev-parse --short HEAD 2>/dev/null || echo '?')"
} >"$out/settings.txt"
printf 'server\tmode\tworkload\tstatus\ttps\tlat_avg_ms\trss_mb\tpss_mb\tpage_cache_mb\tpage_cache_wal_mb\tdata_mb\n' >"$out/results.tsv"

one() { # SERVER MODE
  local server=$1 mode=$2 dir=$work/$1-$2 port=$pport w
  [ "$server" = pg18 ] || port=$wport
  if [ "$server" = pg18 ]; then pg_start "$dir" "$port" "$mode"
  elif ! walnut_start "$dir" "$port" "$mode"; then
    for w in $workloads; do
      printf '%s\t%s\t%s\trefused: %s\n' "$server" "$mode" "$w" "$refused" | tee -a "$out/results.tsv"
    done
    rm -rf "$dir" "$dir.log"; return 0
  fi
  { echo "== $server $mode"
    for g in shared_buffers max_wal_size checkpoint_timeout io_direct debug_io_direct; do
      printf '%s = %s\n' "$g" "$(psql_ "$port" -Atqc "show $g" 2>&1 | head -1)"
    done; } >>"$out/settings.txt"
  local s; s=$(date +%s.%N)
  "$PGBENCH" -h 127.0.0.1 -p "$port" -U postgres -i -s "$scale" -q postgres >"$out/pgbench/$server-$mode.init.txt" 2>&1
  echo "$server $mode: pgbench -i -s $scale took $(echo "$(date +%s.%N) - $s" | bc -l | xargs printf '%.1f') s" >>"$out/settings.txt"
  psql_ "$port" -Atqc checkpoint >/dev/null
  for w in $workloads; do
    local txt=$out/pgbench/$server-$mode-$w.txt rc=0
    echo "$server $mode $w: start $(date -Is), load average $(cut -d' ' -f1-3 /proc/loadavg)" >>"$out/settings.txt"
    "$PGBENCH" -h 127.0.0.1 -p "$port" -U postgres -n -b "$w" -M prepared -c "$clients" -j "$threads" \
      -T "$seconds" postgres >"$txt" 2>&1 || rc=$?
    if [ "$rc" != 0 ]; then
      printf '%s\t%s\t%s\tfailed: pgbench exited %s\n' "$server" "$mode" "$w" "$rc" | tee -a "$out/results.tsv"
      continue
    fi
    printf '%s\t%s\t%s\tok\t%.1f\t%s\t%s\n' "$server" "$mode" "$w" "$(awk '/^tps/{print $3; exit}' "$txt")" \
      "$(awk '/^latency average/{print $4}' "$txt")" "$(memory "$server" "$dir" | tr ' ' '\t')" | tee -a "$out/results.tsv"
  done
  server_stop "$server" "$dir"
  rm -rf "$dir" "$dir.log"
}

for server in pg18 walnut; do
  case $only in both) ;; pg) [ "$server" = pg18 ] || continue;; walnut) [ "$server" = walnut ] || continue;; esac
  for mode in $modes; do one "$server" "$mode"; done
done

# table.md
get() { awk -F'\t' -v s="$1" -v m="$2" -v w="$3" '$1 == s && $2 == m && $3 == w {print ($4 == "ok") ? $5 : ($4 ~ /^refused/ ? "refused" : "failed")}' "$out/results.tsv"; }
ratio() { # A B: A / B if both are numbers
  if [[ $1 =~ ^[0-9.]+$ ]] && [[ $2 =~ ^[0-9.]+$ ]] && [ "$(echo "$2 > 0" | bc -l)" = 1 ]; then
    printf '%.2f' "$(echo "$1 / $2" | bc -l)"; else echo "–"; fi; }
{ echo "pgbench -M prepared -c $clients -j $threads -T $seconds at scale $scale, shared_buffers=1GB, unthrottled. $(head -1 "$out/settings.txt")."
  echo
  echo "| workload | server | buffered tps | direct tps | direct ÷ buffered |"
  echo "|---|---|---:|---:|---:|"
  for w in $workloads; do
    for s in pg18 walnut; do
      b=$(get "$s" buffered "$w"); d=$(get "$s" direct "$w")
      [ -n "$b$d" ] || continue
      echo "| $w | $s | ${b:-–} | ${d:-–} | $(ratio "$d" "$b") |"
    done
  done
  awk -F'\t' '$4 !~ /^(ok|status)$/ {print $1 " " $2 " " $3 ": " $4}' "$out/results.tsv" | sort -u | sed 's/^/\n/'
  echo
  echo "| workload | walnut ÷ pg18, buffered | walnut ÷ pg18, direct |"
  echo "|---|---:|---:|"
  for w in $workloads; do
    echo "| $w | $(ratio "$(get walnut buffered "$w")" "$(get pg18 buffered "$w")") | $(ratio "$(get walnut direct "$w")" "$(get pg18 direct "$w")") |"
  done
  echo
  echo "Memory after each run (MB): RSS and PSS of the server's processes, page cache of its data directory (WAL part), data directory size."
  echo
  echo "| server | I/O | after | RSS | PSS | page cache | of which WAL | data dir |"
  echo "|---|---|---|---:|---:|---:|---:|---:|"
  awk -F'\t' 'NR > 1 && $4 == "ok" {printf "| %s | %s | %s | %s | %s | %s | %s | %s |\n", $1, $2, $3, $7, $8, $9, $10, $11}' "$out/results.tsv"
} >"$out/table.md"
cat "$out/table.md"
echo "results in $out"
