# Shared by bench/replication's scripts (sourced, after `set -euo pipefail`): paths, the usage
# text (each script's header), the PostgreSQL 18 client tools, and small helpers.
here=$(cd "$(dirname "$0")" && pwd); root=$(cd "$here/../.." && pwd)
shared=${WALNUT_SHARED:-$root/../shared}

# Prints the calling script's header comment (its usage) and exits 2.
usage() { awk 'NR > 1 && /^#/ {sub(/^# ?/, ""); print; next} NR > 1 {exit}' "$0" >&2; exit 2; }

# The options of the lag scripts: --walnut --seconds --scale --clients --only --out, into
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

# The primary/standby pairs of standby_lag.sh and catchup.sh, in $work, logs and pgbench output
# in $out, loaded with pgbench -i -s $scale. Each sets the variable its script's cleanup reads.
# PostgreSQL 18 primary on PORT at its defaults plus synchronous_commit = off; sets pg_primary.
pg18_primary() { # PORT
  PG_EXTRA_CONF="shared_buffers=128MB max_wal_size=1GB checkpoint_timeout=5min max_connections=100 synchronous_commit=off shared_preload_libraries=" \
    "$shared/bench/postgres18.sh" start "$work/pg" "$1" >/dev/null
  pg_primary=1
  "$PGBENCH" -h 127.0.0.1 -p "$1" -U postgres -i -q -s "$scale" postgres >"$out/pg18.init.txt" 2>&1
}

# Its streaming hot standby on SPORT, on a physical slot "standby"; sets pg_standby.
pg18_standby() { # SPORT PPORT
  "$shared/bench/postgres18.sh" standby "$work/pg-standby" "$1" "$2" standby >"$out/pg18.backup.txt" 2>&1
  pg_standby=1
}

# walnut primary on PORT with synchronous_commit = off; sets wpid.
walnut_primary() { # PORT
  "$walnut" initdb -D "$work/walnut" >/dev/null
  "$walnut" serve -D "$work/walnut" -p "$1" -c synchronous_commit=off >"$out/walnut.primary.log" 2>&1 &
  wpid=$!
  for _ in $(seq 300); do psql_ "$1" -Atqc 'select 1' >/dev/null 2>&1 && break; sleep 0.2; done
  "$PGBENCH" -h 127.0.0.1 -p "$1" -U postgres -i -q -s "$scale" postgres >"$out/walnut.init.txt" 2>&1
}

# Its base backup (walnut basebackup -R -C -S standby) into $work/walnut-standby.
walnut_backup() { # PPORT
  "$walnut" basebackup -h 127.0.0.1 -p "$1" -U postgres -D "$work/walnut-standby" -R -C -S standby \
    >"$out/walnut.backup.txt" 2>&1 || { echo "error: walnut basebackup failed (walnut.backup.txt)" >&2; exit 1; }
}

# walnut serve on the backup at SPORT, with the serve options given (-c name=value ...), until
# it answers as a standby; sets wspid.
walnut_standby() { # SPORT [OPTION...]
  local port=$1; shift
  "$walnut" serve -D "$work/walnut-standby" -p "$port" "$@" >>"$out/walnut.standby.log" 2>&1 &
  wspid=$!
  for _ in $(seq 600); do [ "$(psql_ "$port" -Atqc 'select pg_is_in_recovery()' 2>/dev/null)" = t ] && break; sleep 0.2; done
}

# Stops the PostgreSQL pair (its standby's log kept as $out/pg18.standby.log) and removes it.
pg18_drop_pair() {
  cp "$work/pg-standby/server.log" "$out/pg18.standby.log" 2>/dev/null || true
  "$shared/bench/postgres18.sh" stop "$work/pg-standby" >/dev/null; pg_standby=""
  "$shared/bench/postgres18.sh" stop "$work/pg" >/dev/null; pg_primary=""
  rm -rf "$work/pg-standby" "$work/pg"
}

# The EXIT trap of the pair scripts: stops what still runs (the background jobs in $bg, the
# walnut standby and primary, the PostgreSQL pair) and removes $work.
cleanup_pairs() {
  for p in ${bg:-}; do kill "$p" 2>/dev/null || true; done
  for p in ${wspid:-} ${wpid:-}; do kill -TERM "$p" 2>/dev/null || true; wait "$p" 2>/dev/null || true; done
  if [ -n "${pg_standby:-}" ]; then "$shared/bench/postgres18.sh" stop "$work/pg-standby" >/dev/null 2>&1 || true; fi
  if [ -n "${pg_primary:-}" ]; then "$shared/bench/postgres18.sh" stop "$work/pg" >/dev/null 2>&1 || true; fi
  rm -rf "$work"
}
