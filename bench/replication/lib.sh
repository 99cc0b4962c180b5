# Shared by bench/replication's scripts (sourced, after `set -euo pipefail`): paths, the usage
# text (each script's header), the PostgreSQL 18 client tools, and small helpers.
here=$(cd "$(dirname "$0")" && pwd); root=$(cd "$here/../.." && pwd)
shared=${WALNUT_SHARED:-$root/../shared}

# Prints the calling script's header comment (its usage) and exits 2.
usage() { awk 'NR > 1 && /^#/ {sub(/^# ?/, ""); print; next} NR > 1 {exit}' "$0" >&2; exit 2; }

# The options of the two lag scripts: --walnut --seconds --scale --clients --only --out, into
# the variables of those names (defaults set by the caller).
parse_lag_options() {
  while [ $# -gt 0 ]; do
    case $1 in
      --walnut) walnut=$2;; --seconds) seconds=$2;; --scale) scale=$2;; --clients) clients=$2;;
      --only) only=$2;; --out) out=$2;;
      -h|--help) usage;;
      *) echo "unknown option $1" >&2; usage;;
    esac; shift 2
  done
  case $only in both|pg|walnut) ;; *) echo "--only must be both, pg or walnut" >&2; exit 2;; esac
  [ "$only" = pg ] || [ -x "$walnut" ] || { echo "--walnut BIN is required (an executable walnut)" >&2; exit 2; }
  walnut=${walnut:+$(cd "$(dirname "$walnut")" && pwd)/$(basename "$walnut")}
}

# Installs PostgreSQL 18 once and sets PGBIN, PGBENCH, PSQL and RECEIVEWAL.
pg_tools() {
  "$shared/bench/postgres18.sh" install >/dev/null
  PGBIN=$("$shared/bench/postgres18.sh" bin)
  PGBENCH=$PGBIN/pgbench; PSQL=$PGBIN/psql; RECEIVEWAL=$PGBIN/pg_receivewal
}

psql_() { local port=$1; shift; "$PSQL" -h 127.0.0.1 -p "$port" -U postgres -X "$@" postgres; }
now() { date +%s.%N; }

# Waits (up to LIMIT s) until the standby on SPORT has replayed LSN; prints the seconds waited.
wait_replayed() { # SPORT LSN LIMIT
  local t0 d; t0=$(now)
  while :; do
    d=$(psql_ "$1" -Atqc "select pg_wal_lsn_diff(pg_last_wal_replay_lsn(), '$2')" 2>/dev/null || true)
    if [ -n "$d" ] && awk -v d="$d" 'BEGIN { exit !(d >= 0) }'; then break; fi
    if awk -v a="$t0" -v b="$(now)" -v l="$3" 'BEGIN { exit !(b - a > l) }'; then echo timeout; return 1; fi
    sleep 0.1
  done
  awk -v a="$t0" -v b="$(now)" 'BEGIN { printf "%.1f\n", b - a }'
}
