#!/usr/bin/env bash
# Runs every fuzz target (fuzz/README.md) for a bounded time and prints each one's executions.
#
#   scripts/fuzz.sh [SECONDS_PER_TARGET]     default 60; CI passes a short budget
#
# Installs cargo-fuzz if it is missing. Exits non-zero if any target found a crash; the input
# is saved under fuzz/artifacts/TARGET/.
set -euo pipefail
cd "$(dirname "$0")/.."
secs=${1:-60}
command -v cargo-fuzz >/dev/null 2>&1 || cargo install --locked cargo-fuzz
export RUSTC_BOOTSTRAP=1   # the sanitizer flags cargo-fuzz passes need it on a stable toolchain
for t in wal_record sql_frontend wire_protocol; do
  mkdir -p "fuzz/corpus/$t"
  log=$(mktemp)
  if ! cargo fuzz run "$t" -- -max_total_time="$secs" -rss_limit_mb=4096 -print_final_stats=1 >"$log" 2>&1; then
    tail -60 "$log"
    echo "fuzz: $t FAILED (see above)" >&2
    exit 1
  fi
  # libFuzzer's final statistics (-print_final_stats=1), else its "Done N runs" line.
  execs=$(grep -Eo 'stat::number_of_executed_units: *[0-9]+' "$log" | grep -Eo '[0-9]+$' | tail -1 || true)
  [ -n "$execs" ] || execs=$(grep -Eo '^Done [0-9]+ runs' "$log" | grep -Eo '[0-9]+' | tail -1 || true)
  echo "fuzz: $t: ${execs:-?} executions in ${secs}s, no crash"
  rm -f "$log"
done
