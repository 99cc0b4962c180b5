#!/usr/bin/env bash
# Issue 14's benchmark: does data I/O ever stall a commit? walnut and PostgreSQL 18, both at their
# DEFAULT settings (shared_buffers=128MB, max_wal_size=1GB, checkpoint_timeout=5min), each under a
# write-IOPS limit, run pgbench simple-update long enough for several checkpoints, one second at
# a time.
#
#   bench/io/nostall.sh --walnut BIN [--seconds 600] [--wiops 1000|0] [--scale 100] [--clients 10]
#                       [--only both|pg|walnut] [--pg-from DIR] [--out DIR] [--keep-logs]
#
# For each server, one after the other (they would share the throttle's cgroup), with its data
# under /var/tmp: start under ../../shared/bench/throttle.sh WIOPS (the server's process tree;
# pgbench runs outside it), pgbench -i -s SCALE, CHECKPOINT, then
#   pgbench -n -b simple-update -c 10 -j 2 -T SECONDS -P 1 -l
# and from pgbench's per-transaction log: mean tps, p50/p99 latency, tps in each second, the
# worst second, the seconds below a quarter of the mean. Checkpoints during the run: PostgreSQL's
# log_checkpoints lines (on by default); for walnut, the changes of global/pg_control (rewritten
# by every checkpoint), sampled twice a second, which also works for binaries that logged none.
# PostgreSQL comes from postgres18.sh, whose tuned settings PG_EXTRA_CONF overrides back to the
# defaults (shared_buffers, max_wal_size, checkpoint_timeout, max_connections,
# shared_preload_libraries); walnut runs with no -c at all. settings.txt records SHOW and every
# pg_settings row not at its default, for both.
#
# --only walnut reruns walnut alone and compares it with PostgreSQL's figures from an earlier
# sitting: --pg-from DIR (default: the newest bench/io/reference/*nostall* holding a pg18 row).
# Ports 5460 (PostgreSQL) and 5461 (walnut).
#
# Writes to OUT (default bench/io/results/DATE-TIME): summary.tsv, tps.csv (second,pg18,walnut),
# checkpoints.tsv, table.md (with PASS/FAIL for the issue's three targets), chart.svg,
# settings.txt, SERVER.pgbench.txt (pgbench's output with its -P 1 lines), SERVER.init.txt,
# server logs. The per-transaction logs are deleted (kept in OUT/raw/ with --keep-logs, which
# git ignores). Needs root (cgroups, su pgref).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd); root=$(cd "$here/../.." && pwd)
shared=${WALNUT_SHARED:-$root/../shared}
walnut=""; seconds=600; wiops=1000; scale=100; clients=10; only=both; pg_from=""; out=""; keep_logs=""
usage() { awk 'NR > 1 && /^#/ {sub(/^# ?/, ""); print; next} NR > 1 {exit}' "$0" >&2; exit 2; }
while [ $# -gt 0 ]; do
  case $1 in
    --walnut) walnut=$2;; --seconds) seconds=$2;; --wiops) wiops=$2;; --scale) scale=$2;;
    --clients) clients=$2;; --only) only=$2;; --pg-from) pg_from=$2;; --out) out=$2;;
    --keep-logs) keep_logs=1; shift; continue;;
    -h|--help) usage;;
    *) echo "unknown option $1" >&2; usage;;
  esac; shift 2
done
case $only in both|pg|walnut) ;; *) echo "--only must be both, pg or walnut" >&2; exit 2;; esac
case $wiops in 0|none) wiops="";; esac
[ "$only" = pg ] || [ -x "$walnut" ] || { echo "--walnut BIN is required (an executable walnut)" >&2; exit 2; }
walnut=${walnut:+$(cd "$(dirname "$walnut")" && pwd)/$(basename "$walnut")}
threads=$(( clients < 2 ? clients : 2 ))

"$shared/bench/postgres18.sh" install >/dev/null
PGBIN=$("$shared/bench/postgres18.sh" bin)
PGBENCH=${PGBENCH:-$PGBIN/pgbench}; PSQL=${PSQL:-$PGBIN/psql}

if [ "$only" = walnut ] && [ -z "$pg_from" ]; then
  for d in $(ls -d "$here"/reference/*nostall* 2>/dev/null | sort -r); do
    if grep -q '^pg18' "$d/summary.tsv" 2>/dev/null; then pg_from=$d; break; fi
  done
  [ -n "$pg_from" ] || { echo "--only walnut: no earlier sitting with PostgreSQL's figures; give --pg-from DIR" >&2; exit 2; }
fi

out=${out:-$here/results/$(date +%Y%m%d-%H%M%S)}
mkdir -p "$out"; out=$(cd "$out" && pwd)
work=$(mktemp -d /var/tmp/walnut-io-nostall.XXXXXX); chmod 755 "$work"   # pgref must reach pg/
pport=5460; wport=5461
pg_up=""; wpid=""; sampler=""
thr=(); [ -n "$wiops" ] && thr=("$shared/bench/throttle.sh" "$wiops" --dir "$work" --)

cleanup() {
  if [ -n "$sampler" ]; then kill "$sampler" 2>/dev/null || true; fi
  if [ -n "$wpid" ]; then kill -TERM "$wpid" 2>/dev/null || true; wait "$wpid" 2>/dev/null || true; fi
  if [ -n "$pg_up" ]; then "$shared/bench/postgres18.sh" stop "$work/pg" >/dev/null 2>&1 || true; fi
  if [ -f "$work/pg/server.log" ]; then cp "$work/pg/server.log" "$out/pg18.server.log"; fi
  if [ -n "$keep_logs" ] && [ -d "$work/raw" ]; then rm -rf "$out/raw"; mv "$work/raw" "$out/raw"; fi
  rm -rf "$work"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

psql_() { local port=$1; shift; "$PSQL" -h 127.0.0.1 -p "$port" -U postgres -X "$@" postgres; }
warn() { echo "warning: $*" | tee -a "$out/warnings.txt" >&2; }
ios() { if [ -n "$wiops" ]; then "$shared/bench/throttle.sh" --ios "$wiops"; else echo 0; fi; }
note() { echo "$*" | tee -a "$out/settings.txt"; }

# p50 and p99 (ms, nearest rank) of column 3 (latency, µs) of pgbench's per-transaction logs.
percentiles() {
  cat "$@" | awk '$3 ~ /^[0-9]+$/ {print $3}' | sort -n | awk '
    {a[NR] = $1}
    function rank(p,  i) { i = int(p * NR); if (i < p * NR) i++; if (i < 1) i = 1; return a[i] / 1000 }
    END { if (NR == 0) print "nan nan"; else printf "%.3f %.3f\n", rank(0.50), rank(0.99) }'
}

# Transactions that ended in each second 1..SECONDS of the run (t0: the epoch pgbench started).
per_second() { # T0 LOGS...
  local t0=$1; shift
  cat "$@" | awk -v t0="$t0" -v n="$seconds" '
    { s = int($5 + $6 / 1e6 - t0) + 1; if (s >= 1 && s <= n) c[s]++ }
    END { for (i = 1; i <= n; i++) print i, c[i] + 0 }'
}

# settings SERVER PORT: what the server says it runs with (the defaults are the point here).
settings() {
  local server=$1 port=$2 g
  { echo "== $server: SHOW"
    for g in server_version shared_buffers max_wal_size checkpoint_timeout checkpoint_completion_target \
             synchronous_commit commit_delay wal_buffers wal_sync_method full_page_writes \
             log_checkpoints max_connections io_direct debug_io_direct shared_preload_libraries; do
      printf '%s = %s\n' "$g" "$(psql_ "$port" -Atqc "show $g" 2>&1 | head -1)"
    done
    echo "== $server: pg_settings not at their built-in default"
    psql_ "$port" -Atc "select name || ' = ' || setting || coalesce(' ' || unit, '') || ' (' || source || ')'
                        from pg_settings where source not in ('default', 'override') order by name" 2>&1 || true
  } >>"$out/settings.txt"
  local want
  for want in "shared_buffers 128MB" "max_wal_size 1GB" "checkpoint_timeout 5min"; do
    set -- $want
    local got; got=$(psql_ "$port" -Atqc "show $1" 2>&1 | head -1)
    [ "$got" = "$2" ] || warn "$server: $1 is '$got', not the default $2"
  done
}

# checkpoints_pg T0 LOG LINES_BEFORE: "pg18 SECOND start|complete" for each log_checkpoints line.
checkpoints_pg() {
  local t0=$1 log=$2 skip=$3 line ts ev
  tail -n +"$((skip + 1))" "$log" | { grep -E 'LOG: +checkpoint (starting|complete)' || true; } | while IFS= read -r line; do
    ts=$(date -d "$(awk '{print $1, $2, $3}' <<<"$line")" +%s.%N)
    case $line in *"checkpoint starting"*) ev=start;; *) ev=complete;; esac
    awk -v t="$ts" -v t0="$t0" -v ev="$ev" -v n="$seconds" \
      'BEGIN { s = int(t - t0) + 1; if (s >= 1 && s <= n) printf "pg18\t%d\t%s\n", s, ev }'
  done
}

# checkpoints_walnut T0 SAMPLES: "walnut SECOND complete" for each change of pg_control.
checkpoints_walnut() {
  local t0=$1 samples=$2 prev="" cur mt
  while read -r _ cur; do
    [ -n "$cur" ] || continue   # pg_control between its replacement's unlink and rename
    if [ -n "$prev" ] && [ "$cur" != "$prev" ]; then
      mt=$(date -d "$(cut -d' ' -f2- <<<"$cur")" +%s.%N)
      awk -v t="$mt" -v t0="$t0" -v n="$seconds" \
        'BEGIN { s = int(t - t0) + 1; if (s >= 1 && s <= n) printf "walnut\t%d\tcomplete\n", s }'
    fi
    prev=$cur
  done <"$samples"
}

# measure SERVER PORT: the run itself, and its summary row.
measure() {
  local server=$1 port=$2
  psql_ "$port" -Atqc checkpoint >/dev/null
  mkdir -p "$work/raw/$server"
  local logbefore=0 ctl=""
  [ "$server" = pg18 ] && logbefore=$(wc -l <"$work/pg/server.log")
  if [ "$server" = walnut ]; then
    ctl=$work/walnut/global/pg_control
    ( while :; do echo "$(date +%s.%N) $(stat -c '%i %y' "$ctl" 2>/dev/null)"; sleep 0.5; done ) >"$work/ctl.txt" &
    sampler=$!
  fi
  note "$server run: start $(date -Is), load average $(cut -d' ' -f1-3 /proc/loadavg)"
  local a b t0 t1 rc=0
  a=$(ios); t0=$(date +%s.%N)
  "$PGBENCH" -h 127.0.0.1 -p "$port" -U postgres -n -b simple-update -c "$clients" -j "$threads" \
    -T "$seconds" -P 1 -l --log-prefix="$work/raw/$server/tx" postgres >"$out/$server.pgbench.txt" 2>&1 || rc=$?
  b=$(ios); t1=$(date +%s.%N)
  note "$server run: end $(date -Is), load average $(cut -d' ' -f1-3 /proc/loadavg)"
  if [ -n "$sampler" ]; then kill "$sampler" 2>/dev/null || true; wait "$sampler" 2>/dev/null || true; sampler=""; fi
  [ "$rc" = 0 ] || warn "$server: pgbench exited $rc: $(tail -2 "$out/$server.pgbench.txt" | tr '\n' ' ')"

  local tps pct
  tps=$(awk '/^tps/{print $3; exit}' "$out/$server.pgbench.txt")
  pct=$(percentiles "$work/raw/$server"/tx.*)
  per_second "$t0" "$work/raw/$server"/tx.* >"$work/$server.persec"
  if [ "$server" = pg18 ]; then checkpoints_pg "$t0" "$work/pg/server.log" "$logbefore"
  else checkpoints_walnut "$t0" "$work/ctl.txt"; fi >>"$out/checkpoints.tsv"
  local worst below ckpt started
  worst=$(awk 'NR == 1 || $2 < m {m = $2; s = $1} END {print s, m}' "$work/$server.persec")   # "second tps"
  below=$(awk -v m="${tps:-0}" '$2 < m / 4 {n++} END {print n + 0}' "$work/$server.persec")
  ckpt=$(awk -v s="$server" '$1 == s && $3 == "complete"' "$out/checkpoints.tsv" | wc -l)
  started=$(awk -v s="$server" '$1 == s && $3 == "start"' "$out/checkpoints.tsv" | wc -l)
  [ "$server" = walnut ] && started="-"
  printf '%s\t%.1f\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%.0f\n' "$server" "${tps:-0}" $pct \
    "$(cut -d' ' -f2 <<<"$worst")" "$(cut -d' ' -f1 <<<"$worst")" "$below" "$ckpt" "$started" \
    "$(echo "($b - $a) / ($t1 - $t0)" | bc -l)" >>"$out/summary.tsv"
  [ -n "$keep_logs" ] || rm -rf "$work/raw/$server"
}

load() { # SERVER PORT
  local s; s=$(date +%s.%N)
  "$PGBENCH" -h 127.0.0.1 -p "$2" -U postgres -i -s "$scale" postgres >"$out/$1.init.txt" 2>&1
  note "$1: pgbench -i -s $scale took $(echo "$(date +%s.%N) - $s" | bc -l | xargs printf '%.1f') s (under the throttle)"
}

run_pg() {
  PG_EXTRA_CONF="shared_buffers=128MB max_wal_size=1GB checkpoint_timeout=5min max_connections=100 shared_preload_libraries=" \
    "${thr[@]}" "$shared/bench/postgres18.sh" start "$work/pg" "$pport" >"$out/pg18.start.txt"
  pg_up=1
  settings pg18 "$pport"
  load pg18 "$pport"
  measure pg18 "$pport"
  "$shared/bench/postgres18.sh" stop "$work/pg"; pg_up=""
  cp "$work/pg/server.log" "$out/pg18.server.log"; rm -rf "$work/pg"
}

run_walnut() {
  "$walnut" initdb -D "$work/walnut" >"$out/walnut.initdb.txt" 2>&1
  "${thr[@]}" "$walnut" serve -D "$work/walnut" -p "$wport" >"$out/walnut.server.log" 2>&1 &
  wpid=$!
  local i
  for i in $(seq 300); do
    psql_ "$wport" -Atqc 'select 1' >/dev/null 2>&1 && break
    kill -0 "$wpid" 2>/dev/null || { echo "walnut exited:" >&2; tail -20 "$out/walnut.server.log" >&2; exit 1; }
    sleep 0.2
  done
  settings walnut "$wport"
  load walnut "$wport"
  measure walnut "$wport"
  kill -TERM "$wpid"; wait "$wpid" || true; wpid=""
  rm -rf "$work/walnut"
}

{ echo "date: $(date -Is)"; echo "host: $(nproc) cpus, $(awk '/MemTotal/{print $2" kB"}' /proc/meminfo), load average $(cut -d' ' -f1-3 /proc/loadavg)"
  echo "wiops=${wiops:-none} scale=$scale seconds=$seconds clients=$clients threads=$threads only=$only"
  echo "pgbench: $("$PGBENCH" --version)"
  [ "$only" = pg ] || echo "walnut: $walnut ($("$walnut" --version 2>&1 | head -1))"
  if [ -n "$pg_from" ]; then echo "pg18 figures from: $pg_from"; fi
  echo "bench scripts at: $(git -C "$root" rev-parse --short HEAD 2>/dev/null || echo '?')"
} >"$out/settings.txt"
if [ -n "$wiops" ]; then
  cg=/sys/fs/cgroup/blkio/walnut-throttle-$wiops
  if [ -s "$cg/cgroup.procs" ]; then
    warn "the throttle cgroup $cg already holds processes ($(tr '\n' ' ' <"$cg/cgroup.procs")): another benchmark shares the limit"
  fi
fi
printf 'server\ttps\tlat_p50_ms\tlat_p99_ms\tworst_second_tps\tworst_second\tseconds_below_quarter_mean\tcheckpoints_completed\tcheckpoints_started\twrite_iops\n' >"$out/summary.tsv"
printf 'server\tsecond\tevent\n' >"$out/checkpoints.tsv"
[ "$only" = walnut ] || run_pg
[ "$only" = pg ] || run_walnut

if [ -n "$pg_from" ]; then   # PostgreSQL's figures from the earlier sitting
  grep '^pg18' "$pg_from/summary.tsv" >>"$out/summary.tsv"
  grep '^pg18' "$pg_from/checkpoints.tsv" >>"$out/checkpoints.tsv" || true
  awk -F, 'NR > 1 {print $1, $2}' "$pg_from/tps.csv" >"$work/pg18.persec"
fi

# tps.csv: second,pg18,walnut (an empty cell where a server did not run).
{ echo "second,pg18,walnut"
  awk 'FILENAME ~ /\/pg18\.persec$/ {p[$1] = $2} FILENAME ~ /\/walnut\.persec$/ {w[$1] = $2}
       {if ($1 > n) n = $1}
       END {for (i = 1; i <= n; i++) print i "," p[i] "," w[i]}' \
    $(ls "$work"/pg18.persec "$work"/walnut.persec 2>/dev/null)
} >"$out/tps.csv"

# table.md and the targets.
row() { awk -F'\t' -v s="$1" '$1 == s' "$out/summary.tsv" | head -1; }
pg=$(row pg18); wn=$(row walnut)
{ echo "pgbench simple-update -c $clients -j $threads -T $seconds, scale $scale, ${wiops:-no} write-IOPS limit, both servers at their defaults"
  echo "(shared_buffers 128MB, max_wal_size 1GB, checkpoint_timeout 5min). $(head -1 "$out/settings.txt")."
  [ -z "$pg_from" ] || echo "PostgreSQL's row comes from the sitting $(basename "$pg_from")."
  echo
  echo "| server | tps | p50 (ms) | p99 (ms) | worst second (tps at s) | seconds below ¼ mean | checkpoints completed (started) | write IOPS |"
  echo "|---|---:|---:|---:|---:|---:|---:|---:|"
  for r in "$pg" "$wn"; do
    [ -n "$r" ] || continue
    awk -F'\t' '{printf "| %s | %.0f | %.2f | %.2f | %s at %s | %s | %s (%s) | %s |\n", $1, $2, $3, $4, $5, $6, $7, $8, $9, $10}' <<<"$r"
  done
  if [ -n "$pg" ] && [ -n "$wn" ]; then
    IFS=$'\t' read -r _ ptps _ pp99 _ <<<"$pg"
    IFS=$'\t' read -r _ wtps _ wp99 _ _ wbelow _ <<<"$wn"
    pf() { if [ "$1" = 1 ]; then echo PASS; else echo FAIL; fi; }
    echo
    echo "| issue 14's target | measured | result |"
    echo "|---|---:|---|"
    echo "| no second below a quarter of walnut's mean | $wbelow seconds below $(echo "$wtps / 4" | bc -l | xargs printf '%.0f') tps | $(pf "$([ "$wbelow" = 0 ] && echo 1)") |"
    echo "| walnut p99 ≤ PostgreSQL p99 | $(printf '%.2f' "$wp99") ms vs $(printf '%.2f' "$pp99") ms | $(pf "$(echo "$wp99 <= $pp99" | bc -l)") |"
    echo "| walnut tps ≥ 1.5 × PostgreSQL tps | $(echo "$wtps / $ptps" | bc -l | xargs printf '%.2f')× | $(pf "$(echo "$wtps >= 1.5 * $ptps" | bc -l)") |"
  fi
  if [ -s "$out/warnings.txt" ]; then echo; echo "Warnings:"; sed 's/^/- /' "$out/warnings.txt"; fi
} >"$out/table.md"
cargo run --release -q --manifest-path "$here/chart/Cargo.toml" -- "$out" \
  "simple-update at the defaults, ${wiops:-no} write-IOPS limit: tps per second" >/dev/null
cat "$out/table.md"
echo "results in $out"
