#!/usr/bin/env bash
# Runs every fuzz target (fuzz/README.md) for a bounded time and prints each one's seed and
# executions.
#
#   scripts/fuzz.sh [SECONDS_PER_TARGET]            default 60; CI passes a short budget
#   FUZZ_SEED=N scripts/fuzz.sh [SECONDS_PER_TARGET] every target runs with libFuzzer seed N
#
# Each target runs with libFuzzer's -seed=N: FUZZ_SEED if set (1 ..= 4294967295), else a fresh
# random one. The seed is printed before the run starts and again with its result, so a run can
# be repeated (same seed, binary and corpus: the same inputs in the same order; see
# fuzz/README.md for what else changes between runs).
#
# Installs cargo-fuzz if it is missing. Exits non-zero if any target found a crash; the input
# is saved under fuzz/artifacts/TARGET/.
set -euo pipefail
cd "$(dirname "$0")/.."
secs=${1:-60}
if [ -n "${FUZZ_SEED:-}" ]; then
  # libFuzzer's -seed is an unsigned 32-bit number, and 0 means "pick one".
  if ! [[ $FUZZ_SEED =~ ^[0-9]{1,10}$ ]] || (( 10#$FUZZ_SEED < 1 || 10#$FUZZ_SEED > 4294967295 )); then
    echo "fuzz: FUZZ_SEED must be a number from 1 to 4294967295, not '$FUZZ_SEED'" >&2
    exit 2
  fi
fi
command -v cargo-fuzz >/dev/null 2>&1 || cargo install --locked cargo-fuzz
export RUSTC_BOOTSTRAP=1   # the sanitizer flags cargo-fuzz passes need it on a stable toolchain
for t in wal_record sql_frontend wire_protocol; do
  mkdir -p "fuzz/corpus/$t"
  if [ -n "${FUZZ_SEED:-}" ]; then
    seed=$((10#$FUZZ_SEED))
  else
    seed=$(( $(od -An -N4 -tu4 /dev/urandom | tr -d ' ') % 4294967295 + 1 ))
  fi
  echo "fuzz: $t: seed $seed (repeat with FUZZ_SEED=$seed scripts/fuzz.sh $secs)"
  log=$(mktemp)
  if ! cargo fuzz run "$t" -- -seed="$seed" -max_total_time="$secs" -rss_limit_mb=4096 -print_final_stats=1 >"$log" 2>&1; then
    tail -60 "$log"
    echo "fuzz: $t FAILED with seed $seed (see above; repeat with FUZZ_SEED=$seed scripts/fuzz.sh $secs)" >&2
    exit 1
  fi
  # The seed libFuzzer reports it used ("INFO: Seed: N"): the one passed, unless the flag was lost.
  used=$(grep -Eo 'INFO: Seed: [0-9]+' "$log" | grep -Eo '[0-9]+$' | head -1 || true)
  if [ "${used:-}" != "$seed" ]; then
    echo "fuzz: $t: libFuzzer reported seed ${used:-?}, not $seed" >&2
  fi
  # libFuzzer's final statistics (-print_final_stats=1), else its "Done N runs" line.
  execs=$(grep -Eo 'stat::number_of_executed_units: *[0-9]+' "$log" | grep -Eo '[0-9]+$' | tail -1 || true)
  [ -n "$execs" ] || execs=$(grep -Eo '^Done [0-9]+ runs' "$log" | grep -Eo '[0-9]+' | tail -1 || true)
  echo "fuzz: $t: ${execs:-?} executions in ${secs}s with seed ${used:-$seed}, no crash"
  rm -f "$log"
done
