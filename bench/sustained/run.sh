#!/usr/bin/env bash
# Issue 17's benchmark: does walnut run for long at its defaults without growing? walnut and
# PostgreSQL 18, both at their DEFAULT settings (PostgreSQL with autovacuum on), one after the
# other in one sitting:
#
#   bench/sustained/run.sh --walnut BIN [--minutes 30] [--scale 20] [--clients 8] [--sample 30]
#                          [--only both|pg|walnut] [--out DIR | --add DIR]
#
# For each server, with its data under /var/tmp: start, pgbench -i -s SCALE, then
#   pgbench -M prepared -c CLIENTS -j 2 -T MINUTES*60 -P SAMPLE      (tpcb-like)
# sampling every SAMPLE seconds the data size (the relation files: base/ of each data
# directory, which for both holds tables and indexes) and the transaction status store (pg_xact/),
# and taking tps per interval from pgbench's -P lines.
#
# Targets (issue 17), reported PASS/FAIL in table.md:
#   - walnut's data after MINUTES <= 1.3x its size after load, and its growth over the last 10
#     minutes (or the last third of a shorter run) under 5 %;
#   - walnut's tps over the last 5 minutes >= 95 % of its first 5 (a sixth of a shorter run);
#   - walnut's growth per million transactions <= PostgreSQL's;
#   - walnut's pg_xact <= 16 MB at the end.
# PostgreSQL comes from ../../shared/bench/postgres18.sh with its tuned settings overridden back to
# the defaults; walnut runs with no -c at all. Ports 5470 (PostgreSQL) and 5471 (walnut).
#
# pgbench_history gains a row per transaction on both servers: its growth is data, not garbage,
# and alone it exceeds the first target at a few thousand tps. So each relation's size is also
# taken after the load and at the end (relations.tsv), and table.md gives the growth without
# pgbench_history beside the total.
#
# Writes to OUT (default bench/sustained/results/DATE-TIME): samples.tsv (server, second, data MB,
# pg_xact kB, tps over the interval ending there), steal.tsv (server, second, the share of CPU
# time the hypervisor took from this machine over the interval, from /proc/stat: a tps fall
# that comes with a rise in steal is the machine's, not the server's), relations.tsv, summary.tsv, table.md,
# chart.svg (if cargo can build bench/sustained/chart), SERVER.pgbench.txt, SERVER.init.txt,
# server logs. --add DIR writes into the OUT of an earlier run instead, keeping its other
# server's series (e.g. --only walnut --add DIR after a --only pg run, or to run walnut again
# with a new build): the tables and chart then show both.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd); root=$(cd "$here/../.." && pwd)
shared=${WALNUT_SHARED:-$root/../shared}
walnut=""; minutes=30; scale=20; clients=8; sample=30; only=both; out=""; add=""
usage() { awk 'NR > 1 && /^#/ {sub(/^# ?/, ""); print; next} NR > 1 {exit}' "$0" >&2; exit 2; }
while [ $# -gt 0 ]; do
  case $1 in
    --walnut) walnut=$2;; --minutes) minutes=$2;; --scale) scale=$2;; --clients) clients=$2;;
    --sample) sample=$2;; --only) only=$2;; --out) out=$2;; --add) out=$2; add=1;;
    -h|--help) usage;;
    *) echo "unknown option $1" >&2; usage;;
  esac; shift 2
done
case $only in both|pg|walnut) ;; *) echo "--only must be both, pg or walnut" >&2; exit 2;; esac
[ "$only" = pg ] || [ -x "$walnut" ] || { echo "--walnut BIN is required (an executable walnut)" >&2; exit 2; }
walnut=${walnut:+$(cd "$(dirname "$walnut")" && pwd)/$(basename "$walnut")}
seconds=$((minutes * 60)); threads=$(( clients < 2 ? clients : 2 ))

"$shared/bench/postgres18.sh" install >/dev/null
PGBIN=$("$shared/bench/postgres18.sh" bin)
PGBENCH=${PGBENCH:-$PGBIN/pgbench}; PSQL=${PSQL:-$PGBIN/psql}

out=${out:-$here/results/$(date +%Y%m%d-%H%M%S)}
mkdir -p "$out"; out=$(cd "$out" && pwd)
work=$(mktemp -d /var/tmp/walnut-sustained.XXXXXX); chmod 755 "$work"   # pgref must reach pg/
pport=5470; wport=5471
pg_up=""; wpid=""; sampler=""; stealer=""

cleanup() {
  if [ -n "$sampler" ]; then kill "$sampler" 2>/dev/null || true; fi
  if [ -n "$stealer" ]; then kill "$stealer" 2>/dev/null || true; fi
  if [ -n "$wpid" ]; then kill -TERM "$wpid" 2>/dev/null || true; wait "$wpid" 2>/dev/null || true; fi
  if [ -n "$pg_up" ]; then "$shared/bench/postgres18.sh" stop "$work/pg" >/dev/null 2>&1 || true; fi
  if [ -f "$work/pg/server.log" ]; then cp "$work/pg/server.log" "$out/pg18.server.log"; fi
  rm -rf "$work"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

psql_() { local port=$1; shift; "$PSQL" -h 127.0.0.1 -p "$port" -U postgres -X "$@" postgres; }
mb() { du -sk "$1" 2>/dev/null | awk '{printf "%.1f", $1 / 1024}'; }

# relations SERVER PORT WHEN: "SERVER WHEN relname MB" for each pgbench relation (its main
# fork: pg_relation_size, on both servers).
relations() {
  local server=$1 port=$2 when=$3
  psql_ "$port" -Atc "select relname, pg_relation_size(oid) from pg_class where relname like 'pgbench%' order by relname" |
    awk -F'|' -v s="$server" -v w="$when" '{printf "%s\t%s\t%s\t%.1f\n", s, w, $1, $2 / 1048576}' \
    >>"$out/relations.tsv"
}
kb() { du -sk "$1" 2>/dev/null | awk '{print $1}'; }
# cpu_ticks: "steal total" from /proc/stat's cpu line (all CPUs, in clock ticks; guest time is
# already in user time, so the total stops at steal).
cpu_ticks() { awk '/^cpu / { t = 0; for (i = 2; i <= 9; i++) t += $i; print $9, t; exit }' /proc/stat; }

if [ -n "$add" ] && [ -f "$out/summary.tsv" ]; then
  # Keep the earlier run's rows, less those of the servers about to run again.
  for f in samples relations summary steal; do
    [ -f "$out/$f.tsv" ] || continue
    awk -F'\t' -v only="$only" 'NR == 1 || !(only == "both" || (only == "pg" ? $1 == "pg18" : $1 == "walnut"))' \
      "$out/$f.tsv" >"$out/$f.tsv.new" && mv "$out/$f.tsv.new" "$out/$f.tsv"
  done
else
  printf 'server\tsecond\tdata_mb\txact_kb\ttps\n' >"$out/samples.tsv"
  printf 'server\twhen\trelation\tmb\n' >"$out/relations.tsv"
  printf 'server\tload_mb\tend_mb\tmax_mb\tlast_window_growth_pct\ttransactions\tgrowth_mb_per_million\ttps_first\ttps_last\tend_xact_kb\tmean_tps\n' >"$out/summary.tsv"
fi

[ -f "$out/steal.tsv" ] || printf 'server\tsecond\tsteal_pct\n' >"$out/steal.tsv"

run_one() { # SERVER PORT DATADIR
  local server=$1 port=$2 dir=$3 t0 i
  "$PGBENCH" -h 127.0.0.1 -p "$port" -U postgres -i -q -s "$scale" postgres >"$out/$server.init.txt" 2>&1
  psql_ "$port" -qc checkpoint >/dev/null 2>&1 || true
  local load_mb; load_mb=$(mb "$dir/base")
  relations "$server" "$port" load
  printf '%s\t0\t%s\t%s\t\n' "$server" "$load_mb" "$(kb "$dir/pg_xact")" >>"$work/sizes.$server"
  t0=$(date +%s)
  ( while sleep "$sample"; do
      printf '%s\t%d\t%s\t%s\n' "$server" $(( $(date +%s) - t0 )) "$(mb "$dir/base")" "$(kb "$dir/pg_xact")"
    done ) >>"$work/sizes.$server" &
  sampler=$!
  ( read -r s0 t0c < <(cpu_ticks)
    while sleep "$sample"; do
      read -r s1 t1c < <(cpu_ticks)
      awk -v srv="$server" -v t=$(( $(date +%s) - t0 )) -v ds=$((s1 - s0)) -v dt=$((t1c - t0c)) \
        'BEGIN { printf "%s\t%d\t%.1f\n", srv, t, (dt > 0 ? 100 * ds / dt : 0) }'
      s0=$s1; t0c=$t1c
    done ) >>"$out/steal.tsv" &
  stealer=$!
  "$PGBENCH" -h 127.0.0.1 -p "$port" -U postgres -M prepared -c "$clients" -j "$threads" \
    -T "$seconds" -P "$sample" postgres >"$out/$server.pgbench.txt" 2>&1 || true
  kill "$sampler" 2>/dev/null || true; wait "$sampler" 2>/dev/null || true; sampler=""
  kill "$stealer" 2>/dev/null || true; wait "$stealer" 2>/dev/null || true; stealer=""
  printf '%s\t%d\t%s\t%s\n' "$server" "$seconds" "$(mb "$dir/base")" "$(kb "$dir/pg_xact")" >>"$work/sizes.$server"
  relations "$server" "$port" end
  # tps per interval from pgbench's progress lines, matched to the nearest size sample.
  awk -v s="$server" -F'\t' '
    NR == FNR { if ($0 ~ /^progress:/) { split($0, a, " "); t = int(a[2] + 0.5); tps[t] = a[4] } ; next }
    { best = ""; for (k in tps) if (best == "" || (k - $2) ^ 2 < (best - $2) ^ 2) best = k
      printf "%s\t%s\t%s\t%s\t%s\n", $1, $2, $3, $4, ($2 == 0 || best == "" ? "" : tps[best]) }' \
    <(tr -s ' ' <"$out/$server.pgbench.txt" | sed 's/^progress: \([0-9.]*\) s, \([0-9.]*\) tps.*/progress: \1 s, \2 tps/') \
    "$work/sizes.$server" >>"$out/samples.tsv"
  local txns mean; txns=$(awk '/number of transactions actually processed/ {print $NF}' "$out/$server.pgbench.txt" | sed 's|/.*||')
  mean=$(awk '/^tps = / {print $3; exit}' "$out/$server.pgbench.txt")
  awk -F'\t' -v s="$server" -v n="$seconds" -v txns="${txns:-0}" -v mean="${mean:-0}" -v sample="$sample" '
    $1 == s { t[++k] = $2; d[k] = $3; x[k] = $4; p[k] = $5 }
    END {
      win = (n >= 1800 ? 600 : n / 3); edge = (n >= 1800 ? 300 : n / 6)
      if (edge < sample) edge = sample
      load = d[1]; end = d[k]; max = 0; before = load
      for (i = 1; i <= k; i++) { if (d[i] > max) max = d[i]; if (t[i] <= n - win) before = d[i] }
      f = 0; fn = 0; l = 0; ln = 0
      for (i = 2; i <= k; i++) if (p[i] != "") {
        if (t[i] <= edge) { f += p[i]; fn++ } if (t[i] > n - edge) { l += p[i]; ln++ } }
      printf "%s\t%s\t%s\t%s\t%.1f\t%d\t%.1f\t%.0f\t%.0f\t%s\t%s\n", s, load, end, max,
        (before > 0 ? 100 * (end - before) / before : 0), txns,
        (txns > 0 ? (end - load) / (txns / 1e6) : 0), (fn ? f / fn : 0), (ln ? l / ln : 0), x[k], mean
    }' "$out/samples.tsv" >>"$out/summary.tsv"
}

if [ "$only" != walnut ]; then
  PG_EXTRA_CONF="shared_buffers=128MB max_wal_size=1GB checkpoint_timeout=5min max_connections=100 shared_preload_libraries=" \
    "$shared/bench/postgres18.sh" start "$work/pg" "$pport" >/dev/null
  pg_up=1
  run_one pg18 "$pport" "$work/pg"
  "$shared/bench/postgres18.sh" stop "$work/pg" >/dev/null; pg_up=""
  cp "$work/pg/server.log" "$out/pg18.server.log" 2>/dev/null || true
fi
if [ "$only" != pg ]; then
  "$walnut" initdb -D "$work/walnut" >/dev/null
  "$walnut" serve -D "$work/walnut" -p "$wport" >"$out/walnut.server.log" 2>&1 &
  wpid=$!
  for _ in $(seq 300); do psql_ "$wport" -Atqc 'select 1' >/dev/null 2>&1 && break; sleep 0.2; done
  run_one walnut "$wport" "$work/walnut"
  kill -TERM "$wpid"; wait "$wpid" || true; wpid=""
fi

# table.md: both series' figures and the targets.
awk -F'\t' -v minutes="$minutes" '
  NR == 1 { next }
  { s = $1; load[s] = $2; end[s] = $3; max[s] = $4; lastg[s] = $5; tx[s] = $6; gpm[s] = $7
    first[s] = $8; last[s] = $9; xkb[s] = $10; mean[s] = $11; order[++n] = s }
  END {
    print "| server | data after load (MB) | after " minutes " min | max | growth, last window | transactions | growth per million tx (MB) | tps first / last window | mean tps | pg_xact at end |"
    print "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|"
    for (i = 1; i <= n; i++) { s = order[i]
      printf "| %s | %s | %s | %s | %s %% | %d | %s | %s / %s | %.0f | %.2f MB |\n", s, load[s], end[s], max[s], lastg[s], tx[s], gpm[s], first[s], last[s], mean[s], xkb[s] / 1024 }
    if ("walnut" in load) {
      w = "walnut"; print ""
      printf "- size after the run <= 1.3x after load: %.2fx: %s\n", end[w] / load[w], (end[w] <= 1.3 * load[w] ? "PASS" : "FAIL")
      printf "- growth in the last window < 5 %%: %s %%: %s\n", lastg[w], (lastg[w] < 5 ? "PASS" : "FAIL")
      printf "- tps of the last window >= 95 %% of the first: %.1f %%: %s\n", 100 * last[w] / first[w], (last[w] >= 0.95 * first[w] ? "PASS" : "FAIL")
      if ("pg18" in load) printf "- growth per million transactions <= PostgreSQL'"'"'s: %s vs %s MB: %s\n", gpm[w], gpm["pg18"], (gpm[w] <= gpm["pg18"] ? "PASS" : "FAIL")
      printf "- pg_xact <= 16 MB at the end: %.1f MB: %s\n", xkb[w] / 1024, (xkb[w] <= 16384 ? "PASS" : "FAIL")
    }
  }' "$out/summary.tsv" >"$out/table.md"
# Without pgbench_history (which gains a row per transaction on both servers).
awk -F'\t' '
  NR == FNR { if (FNR > 1) tx[$1] = $6; next }
  FNR == 1 { next }
  $4 == "" { next }
  { v[$1, $2, $3] = $4; if ($3 == "pgbench_history") { hist[$1] = 1; next } tot[$1, $2] += $4; seen[$1] = 1 }
  END {
    print ""
    print "Without pgbench_history (a row per transaction on both servers):"
    print ""
    print "| server | relations after load (MB) | at the end | ratio | growth per million tx (MB) | pgbench_history at the end |"
    print "|---|---:|---:|---:|---:|---:|"
    for (s in seen) if (s in hist) printf "| %s | %.1f | %.1f | %.2fx | %.1f | %.1f MB |\n", s, tot[s, "load"], tot[s, "end"],
      (tot[s, "load"] > 0 ? tot[s, "end"] / tot[s, "load"] : 0),
      (tx[s] > 0 ? (tot[s, "end"] - tot[s, "load"]) / (tx[s] / 1e6) : 0), v[s, "end", "pgbench_history"]
  }' "$out/summary.tsv" "$out/relations.tsv" >>"$out/table.md"
# CPU steal over the same first and last windows as tps.
awk -F'\t' -v n="$seconds" -v sample="$sample" '
  FNR == 1 { next }
  { edge = (n >= 1800 ? 300 : n / 6); if (edge < sample) edge = sample
    if ($2 <= edge) { f[$1] += $3; fn[$1]++ } if ($2 > n - edge) { l[$1] += $3; ln[$1]++ }
    if (!($1 in seen)) { seen[$1] = 1; order[++k] = $1 } }
  END {
    if (k == 0) exit
    print ""
    print "CPU steal (time the hypervisor took from this machine), mean over the same windows:"
    print ""
    for (i = 1; i <= k; i++) { s = order[i]
      printf "- %s: first window %s, last window %s\n", s, (fn[s] ? sprintf("%.1f %%", f[s] / fn[s]) : "no sample"),
        (ln[s] ? sprintf("%.1f %%", l[s] / ln[s]) : "no sample") }
  }' "$out/steal.tsv" >>"$out/table.md"

if command -v cargo >/dev/null && cargo build -q --release --manifest-path "$here/chart/Cargo.toml" 2>"$out/chart.build.txt"; then
  "$here/chart/target/release/sustained-chart" "$out" "pgbench tpcb-like, -c $clients, scale $scale, defaults: data size and tps" || true
fi
cat "$out/table.md"
echo "results in $out"
