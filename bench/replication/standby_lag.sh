#!/usr/bin/env bash
# Issue 15, "Performance": a streaming hot standby under the primary's peak write rate. For
# PostgreSQL 18 and walnut, one after the other, each at its default settings plus
# synchronous_commit=off on the primary:
#   1. the primary starts, pgbench -i -s SCALE loads it, and the server's own tool makes a
#      standby on a physical slot "standby" (PostgreSQL: postgres18.sh standby; walnut:
#      walnut basebackup -R -C -S standby, then walnut serve on the copy); the run waits until
#      the standby's pg_last_wal_replay_lsn() reaches the primary's pg_current_wal_flush_lsn().
#   2. phase "lag": pgbench -n -b tpcb-like -M prepared -c CLIENTS -j 2 -T SECONDS -P 1 on the
#      primary. Every 100 ms (plus psql's start-up) the primary is asked, from
#      pg_stat_replication:
#        replay_lag  in ms; NULL counts as 0 if replay_lsn = sent_lsn, else the sample is skipped
#        bytes       pg_current_wal_lsn() - replay_lsn, WAL the standby has not replayed yet
#      and the summary gives p50, p99 and max of both, the primary's tps, its worst second and
#      the WAL it wrote per second (the servers' WAL differs in size: compare bytes through it).
#   3. phase "reads": the same tpcb-like load on the primary again while
#        pgbench -n -b select-only -c 8 -j 2 -T SECONDS
#      runs on the standby (pgbench_accounts is there by replication); the summary gives both
#      tps figures and the replay lag's p99 and max over this phase.
#   4. once the load has stopped: catch-up, the seconds from the end of the load until the
#      standby has replayed the primary's pg_current_wal_lsn() at that moment; then a checkpoint
#      on the primary, the standby replays up to the primary's flush LSN, and sum(abalance) of
#      pgbench_accounts must be the same on both (printed; the script exits 1 if it is not).
#
#   bench/replication/standby_lag.sh --walnut BIN [--seconds 120] [--scale 100] [--clients 10]
#                                    [--only both|pg|walnut] [--out DIR]
#
# Ports 5472/5473 (PostgreSQL primary/standby) and 5474/5475 (walnut); data under /var/tmp.
# Writes OUT (default bench/replication/results/standby-DATE-TIME): summary.tsv, table.md (each
# figure for both servers and walnut ÷ PostgreSQL), SERVER.PHASE.samples.tsv (time, replay_lag,
# bytes, sent_lsn - replay_lsn, replay lag in ms or "-" if skipped), SERVER.PHASE.primary.txt
# and SERVER.reads.standby.txt (pgbench), SERVER.init.txt, SERVER.backup.txt, the standby's
# server log, settings.txt (with the load average before and after each phase: the machine
# must be otherwise idle). Needs root (postgres18.sh runs PostgreSQL as pgref).
set -euo pipefail
source "$(dirname "$0")/lib.sh"
walnut=""; seconds=120; scale=100; clients=10; only=both; out=""
parse_lag_options "$@"

pg_tools

out=${out:-$here/results/standby-$(date +%Y%m%d-%H%M%S)}
mkdir -p "$out"; out=$(cd "$out" && pwd)
work=$(mktemp -d /var/tmp/walnut-standby.XXXXXX); chmod 755 "$work"   # pgref must reach pg*/
pg_pport=5472; pg_sport=5473; w_pport=5474; w_sport=5475
pg_primary=""; pg_standby=""; wpid=""; wspid=""; bg=""
trap cleanup_pairs EXIT
trap 'exit 130' INT TERM


# p50 p99 max of column COL of FILE (nearest rank; numeric cells only).
stats() {
  awk -v c="$2" '$c ~ /^-?[0-9]+(\.[0-9]+)?$/ {print $c}' "$1" | sort -g | awk '
    {a[NR] = $1}
    function rank(p,  i) { i = int(p * NR); if (i < p * NR) i++; if (i < 1) i = 1; return a[i] }
    END { if (NR == 0) print "nan nan nan"; else print rank(0.50), rank(0.99), a[NR] }'
}

# Samples pg_stat_replication on PORT every 100 ms into FILE until killed: time, replay_lag
# (interval text or NULL), pg_current_wal_lsn() - replay_lsn, sent_lsn - replay_lsn (bytes).
sample() { # PORT FILE
  local q="select replay_lag::text, pg_wal_lsn_diff(pg_current_wal_lsn(), replay_lsn),
                  pg_wal_lsn_diff(sent_lsn, replay_lsn) from pg_stat_replication"
  while :; do
    printf '%s\t%s\n' "$(now)" "$(psql_ "$1" -AtqF $'\t' -P null=NULL -c "$q" 2>/dev/null | head -1)"
    sleep 0.1
  done >"$2"
}

# Appends the replay lag in ms to each sample of FILE: the interval ([N day[s]] HH:MM:SS[.f]);
# a NULL lag counts as 0 if replay_lsn = sent_lsn, otherwise "-" (skipped by stats).
lag_ms() { # FILE
  awk -F'\t' -v OFS='\t' '
    function ms(t,  d, a) {
      d = 0
      if (t ~ / days? /) { split(t, a, " "); d = a[1]; t = a[3] }
      if (split(t, a, ":") != 3) return "-"
      return sprintf("%.3f", ((d * 24 + a[1]) * 3600 + a[2] * 60 + a[3]) * 1000)
    }
    { v = $2 == "NULL" ? ($4 == "0" ? "0" : "-") : ($2 == "" ? "-" : ms($2)); print $1, $2, $3, $4, v }
  ' "$1" >"$1.tmp" && mv "$1.tmp" "$1"
}


settings() { # SERVER ROLE PORT
  {
    echo "== $1 $2 (load average: $(cut -d' ' -f1-3 /proc/loadavg))"
    for g in server_version shared_buffers max_wal_size checkpoint_timeout synchronous_commit \
             wal_compression wal_writer_delay hot_standby hot_standby_feedback \
             max_standby_streaming_delay; do
      printf '%s = %s\n' "$g" "$(psql_ "$3" -Atqc "show $g" 2>&1 | head -1)"
    done
  } >>"$out/settings.txt"
}

tps_of() { awk '/^tps/ {print $3; exit}' "$1"; }
worst_second() { awk '/^progress:/ { if (n++ == 0 || $4 < m) m = $4 } END { print n ? m : "nan" }' "$1"; }

# Steps 2 to 4 against a primary on PPORT with its standby on SPORT (both up and caught up).
measure() { # SERVER PPORT SPORT
  local server=$1 pport=$2 sport=$3 ppid lsn lsn0 t0 catchup sum_p sum_s wal_mbs
  local tpcb=("$PGBENCH" -h 127.0.0.1 -p "$pport" -U postgres -n -b tpcb-like -M prepared
              -c "$clients" -j 2 -T "$seconds" -P 1 postgres)
  settings "$server" primary "$pport"; settings "$server" standby "$sport"
  echo "$server: $(psql_ "$pport" -AtqF ' ' -c "select application_name, state, sync_state from pg_stat_replication")" >>"$out/settings.txt"

  echo "$server: phase lag ($seconds s)" >&2
  sample "$pport" "$out/$server.lag.samples.tsv" & bg=$!
  lsn0=$(psql_ "$pport" -Atqc "select pg_current_wal_lsn()"); t0=$(now)
  "${tpcb[@]}" >"$out/$server.lag.primary.txt" 2>&1 || echo "warning: $server: pgbench (lag) failed" >&2
  wal_mbs=$(psql_ "$pport" -Atqc "select pg_wal_lsn_diff(pg_current_wal_lsn(), '$lsn0')" |
            awk -v a="$t0" -v b="$(now)" '{ printf "%.1f", $1 / (b - a) / 1e6 }')
  echo "$server: load average after the lag phase: $(cut -d' ' -f1-3 /proc/loadavg)" >>"$out/settings.txt"
  kill "$bg" 2>/dev/null || true; wait "$bg" 2>/dev/null || true; bg=""
  lag_ms "$out/$server.lag.samples.tsv"

  echo "$server: phase reads ($seconds s)" >&2
  sample "$pport" "$out/$server.reads.samples.tsv" & bg=$!
  "${tpcb[@]}" >"$out/$server.reads.primary.txt" 2>&1 & ppid=$!; bg="$bg $ppid"
  "$PGBENCH" -h 127.0.0.1 -p "$sport" -U postgres -n -b select-only -c 8 -j 2 -T "$seconds" postgres \
    >"$out/$server.reads.standby.txt" 2>&1 || echo "warning: $server: pgbench select-only on the standby failed" >&2
  wait "$ppid" || echo "warning: $server: pgbench (reads, primary) failed" >&2
  echo "$server: load average after the reads phase: $(cut -d' ' -f1-3 /proc/loadavg)" >>"$out/settings.txt"
  t0=$(now); lsn=$(psql_ "$pport" -Atqc "select pg_current_wal_lsn()")
  kill "${bg%% *}" 2>/dev/null || true; wait "${bg%% *}" 2>/dev/null || true; bg=""
  lag_ms "$out/$server.reads.samples.tsv"

  # Catch-up from the end of the load (t0), then the check on everything flushed.
  catchup=$(wait_replayed "$sport" "$lsn" 900) || echo "error: $server: the standby did not replay $lsn within 900 s" >&2
  [ "$catchup" = timeout ] || catchup=$(awk -v a="$t0" -v b="$(now)" 'BEGIN { printf "%.1f", b - a }')
  psql_ "$pport" -Atqc checkpoint >/dev/null
  lsn=$(psql_ "$pport" -Atqc "select pg_current_wal_flush_lsn()")
  wait_replayed "$sport" "$lsn" 900 >/dev/null || echo "error: $server: the standby did not replay $lsn (after a checkpoint) within 900 s" >&2
  sum_p=$(psql_ "$pport" -Atqc "select sum(abalance) from pgbench_accounts" 2>&1 | head -1)
  sum_s=$(psql_ "$sport" -Atqc "select sum(abalance) from pgbench_accounts" 2>&1 | head -1)
  echo "$server: sum(abalance) primary $sum_p, standby $sum_s (replayed to $lsn)" | tee -a "$out/settings.txt" >&2
  [[ $sum_p =~ ^-?[0-9]+$ ]] && [ "$sum_p" = "$sum_s" ] || { echo "error: $server: primary and standby differ" | tee -a "$out/settings.txt" >&2; failed=1; }

  local lag_ms_ lag_bytes reads_lag
  lag_ms_=$(stats "$out/$server.lag.samples.tsv" 5); lag_bytes=$(stats "$out/$server.lag.samples.tsv" 3)
  reads_lag=$(stats "$out/$server.reads.samples.tsv" 5)
  printf '%s\t%.0f\t%.0f\t%s\t%s\t%s\t%.0f\t%.0f\t%s\t%s\t%s\t%s\t%s\n' "$server" \
    "$(tps_of "$out/$server.lag.primary.txt")" "$(worst_second "$out/$server.lag.primary.txt")" \
    "$(awk '{ printf "%.1f\t%.1f\t%.1f", $1, $2, $3 }' <<<"$lag_ms_")" "$(tr ' ' '\t' <<<"$lag_bytes")" \
    "$(awk -F'\t' '$5 != "-"' "$out/$server.lag.samples.tsv" | wc -l)" \
    "$(tps_of "$out/$server.reads.standby.txt")" "$(tps_of "$out/$server.reads.primary.txt")" \
    "$(awk '{ printf "%.1f\t%.1f", $2, $3 }' <<<"$reads_lag")" "$catchup" "$sum_p" "$sum_s" "$wal_mbs" >>"$out/summary.tsv"
}

failed=""
printf 'server\tprimary_tps\tprimary_tps_worst_second\tlag_ms_p50\tlag_ms_p99\tlag_ms_max\tlag_bytes_p50\tlag_bytes_p99\tlag_bytes_max\tsamples\treads_standby_tps\treads_primary_tps\treads_lag_ms_p99\treads_lag_ms_max\tcatchup_s\tsum_primary\tsum_standby\tlag_wal_mb_per_s\n' >"$out/summary.tsv"
: >"$out/settings.txt"
if [ "$only" != walnut ]; then
  echo "pg18: primary, pgbench -i -s $scale, standby" >&2
  pg18_primary "$pg_pport"
  t0=$(now)
  pg18_standby "$pg_sport" "$pg_pport"
  echo "pg18: backup and standby start $(awk -v a="$t0" -v b="$(now)" 'BEGIN { printf "%.1f", b - a }') s" >>"$out/settings.txt"
  w=$(wait_replayed "$pg_sport" "$(psql_ "$pg_pport" -Atqc "select pg_current_wal_flush_lsn()")" 600) ||
    echo "warning: pg18: the standby did not catch up before the run" | tee -a "$out/settings.txt" >&2
  echo "pg18: initial catch-up ${w} s" >>"$out/settings.txt"
  measure pg18 "$pg_pport" "$pg_sport"
  pg18_drop_pair
fi
if [ "$only" != pg ]; then
  echo "walnut: primary, pgbench -i -s $scale, standby" >&2
  walnut_primary "$w_pport"
  t0=$(now)
  walnut_backup "$w_pport"
  walnut_standby "$w_sport"
  echo "walnut: backup and standby start $(awk -v a="$t0" -v b="$(now)" 'BEGIN { printf "%.1f", b - a }') s" >>"$out/settings.txt"
  w=$(wait_replayed "$w_sport" "$(psql_ "$w_pport" -Atqc "select pg_current_wal_flush_lsn()")" 600) ||
    echo "warning: walnut: the standby did not catch up before the run" | tee -a "$out/settings.txt" >&2
  echo "walnut: initial catch-up ${w} s" >>"$out/settings.txt"
  measure walnut "$w_pport" "$w_sport"
fi

{
  echo "| figure | PostgreSQL 18 | walnut | walnut ÷ PG |"
  echo "|---|---:|---:|---:|"
  awk -F'\t' '
    NR == 1 { for (i = 2; i <= NF; i++) col[i] = $i; next }
    { for (i = 2; i <= NF; i++) v[$1, i] = $i }
    END {
      n = split("2:lag: primary tps|3:lag: primary tps, worst second|18:lag: primary WAL (MB/s)|4:lag: replay_lag p50 (ms)|5:lag: replay_lag p99 (ms)|6:lag: replay_lag max (ms)|7:lag: unreplayed WAL p50 (bytes)|8:lag: unreplayed WAL p99 (bytes)|9:lag: unreplayed WAL max (bytes)|10:lag: samples|11:reads: standby select-only tps|12:reads: primary tps|13:reads: replay_lag p99 (ms)|14:reads: replay_lag max (ms)|15:catch-up after the load (s)|16:sum(abalance), primary|17:sum(abalance), standby", rows, "|")
      for (r = 1; r <= n; r++) {
        split(rows[r], f, ":"); i = f[1]; name = substr(rows[r], length(i) + 2)
        p = v["pg18", i]; w = v["walnut", i]
        ratio = (i != 10 && i != 15 && i != 16 && i != 17 && p ~ /^[0-9.]+$/ && w ~ /^[0-9.]+$/ && p + 0 > 0) ? sprintf("%.2f", w / p) : "-"
        printf "| %s | %s | %s | %s |\n", name, (p == "" ? "-" : p), (w == "" ? "-" : w), ratio
      }
    }' "$out/summary.tsv"
} >"$out/table.md"
cat "$out/table.md"
if [ -n "$failed" ]; then echo "error: sum(abalance) differs between a primary and its standby" >&2; exit 1; fi
