#!/usr/bin/env bash
# Kills a walnut server running pgbench tpcb-like (16 clients) with SIGKILL N times in a row,
# at random moments, and checks after each restart that nothing acknowledged was lost, that the
# TPC-B balances agree, and that `walnut verify` finds no problem.
#
#   scripts/kill9.sh [N] [SEED]      N kills (default 20); SEED replays the kill moments
#
# It runs the end-to-end test `kill_9_during_tpcb_loses_no_acknowledged_commit` (CI runs it
# with its default of 3 kills). Needs pgbench and psql (apt-get install postgresql-client).
set -euo pipefail
cd "$(dirname "$0")/.."
export WALNUT_KILL_ROUNDS=${1:-20}
[ -n "${2:-}" ] && export WALNUT_KILL_SEED=$2
exec cargo test --release -p walnut-server --test e2e -- --exact \
  kill_9_during_tpcb_loses_no_acknowledged_commit --nocapture
