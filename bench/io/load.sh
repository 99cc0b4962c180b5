#!/usr/bin/env bash
# The anchors' bulk load (../../shared/anchors.md, "Bulk load and direct I/O"), walnut and
# PostgreSQL 18 side by side: pgbench -i -s SCALE, buffered and with direct I/O, and the memory
# each holds afterwards (double buffering: the server's buffers plus the page cache's copy).
#
#   bench/io/load.sh --walnut BIN [--scale 100] [--only both|pg|walnut] [--modes "buffered direct"]
#                    [--out DIR]
#
# For each server and mode, in a fresh data directory under /var/tmp, unthrottled, with
# shared_buffers=1GB (lib.sh; otherwise the anchors' settings):
#   direct: PostgreSQL debug_io_direct='data,wal,wal_init'; walnut -c io_direct=data,wal,wal_init
#           (a walnut that refuses it is reported as "refused", with its words, and the run goes on)
#   pgbench -i -s SCALE -q: wall time, and pgbench's own split (drop, create, client-side
#           generate, vacuum, primary keys)
#   then, with the server still up: RSS and PSS of its processes, the page cache that its data
#   directory's files occupy (fincore), and the directory's size
# Ports 5462 (PostgreSQL) and 5463 (walnut). Needs root (su pgref).
#
# Writes to OUT (default bench/io/results/load-DATE-TIME): results.tsv, table.md (times, phase
# split, memory, ratios walnut/PostgreSQL and direct/buffered), settings.txt, SERVER-MODE.init.txt.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd); root=$(cd "$here/../.." && pwd)
shared=${WALNUT_SHARED:-$root/../shared}
walnut=""; scale=100; only=both; modes="buffered direct"; out=""
usage() { awk 'NR > 1 && /^#/ {sub(/^# ?/, ""); print; next} NR > 1 {exit}' "$0" >&2; exit 2; }
while [ $# -gt 0 ]; do
  case $1 in
    --walnut) walnut=$2;; --scale) scale=$2;; --only) only=$2;; --modes) modes=$2;; --out) out=$2;;
    -h|--help) usage;;
    *) echo "unknown option $1" >&2; usage;;
  esac; shift 2
done
case $only in both|pg|walnut) ;; *) echo "--only must be both, pg or walnut" >&2; exit 2;; esac
[ "$only" = pg ] || [ -x "$walnut" ] || { echo "--walnut BIN is required (an executable walnut)" >&2; exit 2; }
walnut=${walnut:+$(cd "$(dirname "$walnut")" && pwd)/$(basename "$walnut")}
# shellcheck source=lib.sh
. "$here/lib.sh"
io_setup
out=${out:-$here/results/load-$(date +%Y%m%d-%H%M%S)}
mkdir -p "$out"; out=$(cd "$out" && pwd)
pport=5462; wport=5463

{ echo "date: $(date -Is)"; echo "host: $(nproc) cpus, $(awk '/MemTotal/{print $2" kB"}' /proc/meminfo), load average $(cut -d' ' -f1-3 /proc/loadavg)"
  echo "scale=$scale modes=\"$modes\" only=$only; unthrottled; shared_buffers=1GB max_wal_size=100GB checkpoint_timeout=15min synchronous_commit=on"
  echo "pgbench: $("$PGBENCH" --version)"
  [ "$only" = pg ] || echo "walnut: $walnut ($("$walnut" --version 2>&1 | head -1))"
  echo "bench scripts at: $(git -C "$root" rev-parse --short HEAD 2>/dev/null || echo '?')"
} >"$out/settings.txt"
cols="server mode status total_s drop_s create_s generate_s vacuum_s primary_keys_s rss_mb pss_mb page_cache_mb page_cache_wal_mb data_mb"
tr ' ' '\t' <<<"$cols" >"$out/results.tsv"

# one SERVER MODE: a fresh directory, the load, the memory; one row of results.tsv.
one() {
  local server=$1 mode=$2 dir=$work/$1-$2 port=$pport
  [ "$server" = pg18 ] || port=$wport
  if [ "$server" = pg18 ]; then pg_start "$dir" "$port" "$mode"
  elif ! walnut_start "$dir" "$port" "$mode"; then
    printf '%s\t%s\trefused: %s\n' "$server" "$mode" "$refused" | tee -a "$out/results.tsv"
    rm -rf "$dir" "$dir.log"; return 0
  fi
  { echo "== $server $mode (load average $(cut -d' ' -f1-3 /proc/loadavg))"
    for g in shared_buffers max_wal_size checkpoint_timeout io_direct debug_io_direct; do
      printf '%s = %s\n' "$g" "$(psql_ "$port" -Atqc "show $g" 2>&1 | head -1)"
    done; } >>"$out/settings.txt"
  local s e rc=0
  s=$(date +%s.%N)
  "$PGBENCH" -h 127.0.0.1 -p "$port" -U postgres -i -s "$scale" -q postgres >"$out/$server-$mode.init.txt" 2>&1 || rc=$?
  e=$(date +%s.%N)
  if [ "$rc" != 0 ]; then
    printf '%s\t%s\tfailed: pgbench -i exited %s\n' "$server" "$mode" "$rc" | tee -a "$out/results.tsv"
  else
    # "done in 16.12 s (drop tables 0.00 s, create tables 0.01 s, client-side generate 10.5 s,
    #  vacuum 2.30 s, primary keys 3.20 s)."
    local init=$out/$server-$mode.init.txt mem drop create gen vac pk
    phase() { grep -o "$1 [0-9.]* s" "$init" | tail -1 | awk '{print $(NF - 1)}'; }
    drop=$(phase 'drop tables'); create=$(phase 'create tables'); gen=$(phase generate)
    vac=$(phase vacuum); pk=$(phase 'primary keys')
    mem=$(memory "$server" "$dir")
    local total; total=$(phase 'done in')   # pgbench's own total; the wall time if it printed none
    printf '%s\t%s\tok\t%.2f\t%s\t%s\t%s\t%s\t%s\t%s\n' "$server" "$mode" "${total:-$(echo "$e - $s" | bc -l)}" \
      "${drop:--}" "${create:--}" "${gen:--}" "${vac:--}" "${pk:--}" "$(tr ' ' '\t' <<<"$mem")" | tee -a "$out/results.tsv"
  fi
  server_stop "$server" "$dir"
  rm -rf "$dir" "$dir.log"
}

for server in pg18 walnut; do
  case $only in both) ;; pg) [ "$server" = pg18 ] || continue;; walnut) [ "$server" = walnut ] || continue;; esac
  for mode in $modes; do one "$server" "$mode"; done
done

# table.md
get() { awk -F'\t' -v s="$1" -v m="$2" -v c="$3" 'NR == 1 {for (i = 1; i <= NF; i++) k[$i] = i; next}
  $1 == s && $2 == m && $3 == "ok" {print $k[c]}' "$out/results.tsv"; }
ratio() { local a b; a=$(get "$1" "$2" "$5"); b=$(get "$3" "$4" "$5")
  if [ -n "$a" ] && [ -n "$b" ] && [ "$(echo "$b > 0" | bc -l)" = 1 ]; then printf '%.2f' "$(echo "$a / $b" | bc -l)"; else echo "–"; fi; }
{ echo "pgbench -i -s $scale, unthrottled, shared_buffers=1GB for both. $(head -1 "$out/settings.txt")."
  echo "Memory is read right after the load, with the server still up: RSS and PSS summed over its"
  echo "processes (PSS counts PostgreSQL's shared buffers once), and the page cache that its data"
  echo "directory's files occupy (fincore), WAL included."
  echo
  echo "| server | I/O | total (s) | generate (s) | vacuum (s) | primary keys (s) | RSS (MB) | PSS (MB) | page cache of data dir (MB) | of which WAL (MB) | data dir (MB) |"
  echo "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|"
  awk -F'\t' 'NR > 1 { if ($3 == "ok") printf "| %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s |\n", $1, $2, $4, $7, $8, $9, $10, $11, $12, $13, $14;
                        else printf "| %s | %s | %s | | | | | | | | |\n", $1, $2, $3 }' "$out/results.tsv"
  echo
  echo "| ratio | total | generate | primary keys |"
  echo "|---|---:|---:|---:|"
  for m in $modes; do
    echo "| walnut ÷ pg18, $m | $(ratio walnut "$m" pg18 "$m" total_s) | $(ratio walnut "$m" pg18 "$m" generate_s) | $(ratio walnut "$m" pg18 "$m" primary_keys_s) |"
  done
  for s in pg18 walnut; do
    echo "| $s direct ÷ buffered | $(ratio "$s" direct "$s" buffered total_s) | $(ratio "$s" direct "$s" buffered generate_s) | $(ratio "$s" direct "$s" buffered primary_keys_s) |"
  done
  echo
  echo "Anchors' targets: walnut's buffered load ≤ 0.5 × PostgreSQL's (walnut ÷ pg18, buffered ≤ 0.50);"
  echo "walnut direct ≤ 1.1 × walnut buffered."
} >"$out/table.md"
cat "$out/table.md"
echo "results in $out"
