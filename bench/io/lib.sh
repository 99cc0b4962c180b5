# Shared by bench/io/load.sh and bench/io/direct.sh (sourced, not run): starting each server in
# a mode, buffered or direct, with the same settings, and reading its memory.
#
#   io_setup                       PGBIN PGBENCH PSQL, a work dir under /var/tmp ($work), cleanup
#   pg_start DIR PORT MODE         PostgreSQL 18 (postgres18.sh) with shared_buffers=1GB and, for
#                                  MODE=direct, debug_io_direct='data,wal,wal_init'
#   walnut_start DIR PORT MODE     walnut serve with shared_buffers=1GB and, for MODE=direct,
#                                  -c io_direct=data,wal,wal_init; returns 1 and sets $refused
#                                  (the server's own words) if walnut does not come up
#   server_stop SERVER DIR         stop whichever is running
#   memory SERVER DIR              "rss_mb pss_mb cache_mb cache_wal_mb data_mb": the server's
#                                  process tree (RSS and PSS summed, so PostgreSQL's shared
#                                  buffers count once in PSS), the page cache holding DIR's files
#                                  (fincore), the part of it that is WAL, and DIR's size
# Settings besides shared_buffers are the anchors' (../../shared/anchors.md): max_wal_size=100GB,
# checkpoint_timeout=15min, synchronous_commit=on, max_connections=100.
# shellcheck shell=bash

io_setup() {
  "$shared/bench/postgres18.sh" install >/dev/null
  PGBIN=$("$shared/bench/postgres18.sh" bin)
  PGBENCH=${PGBENCH:-$PGBIN/pgbench}; PSQL=${PSQL:-$PGBIN/psql}
  work=$(mktemp -d /var/tmp/walnut-io.XXXXXX); chmod 755 "$work"   # pgref must reach pg/
  wpid=""; pg_dir=""
  trap io_cleanup EXIT
  trap 'exit 130' INT TERM
}

io_cleanup() {
  if [ -n "$wpid" ]; then kill -TERM "$wpid" 2>/dev/null || true; wait "$wpid" 2>/dev/null || true; fi
  if [ -n "$pg_dir" ]; then "$shared/bench/postgres18.sh" stop "$pg_dir" >/dev/null 2>&1 || true; fi
  rm -rf "$work"
}

psql_() { local port=$1; shift; "$PSQL" -h 127.0.0.1 -p "$port" -U postgres -X "$@" postgres; }

pg_start() { # DIR PORT MODE
  local conf="shared_buffers=1GB max_wal_size=100GB checkpoint_timeout=15min max_connections=100 synchronous_commit=on"
  [ "$3" = direct ] && conf="$conf debug_io_direct=data,wal,wal_init"
  PG_EXTRA_CONF=$conf "$shared/bench/postgres18.sh" start "$1" "$2" >/dev/null
  pg_dir=$1
}

walnut_start() { # DIR PORT MODE
  local dir=$1 port=$2 log=$1.log i
  local extra=(); [ "$3" = direct ] && extra=(-c io_direct=data,wal,wal_init)
  refused=""
  "$walnut" initdb -D "$dir" >/dev/null
  "$walnut" serve -D "$dir" -p "$port" -c shared_buffers=1GB -c max_wal_size=100GB \
    -c checkpoint_timeout=15min -c max_connections=100 -c synchronous_commit=on "${extra[@]}" >"$log" 2>&1 &
  wpid=$!
  for i in $(seq 300); do
    psql_ "$port" -Atqc 'select 1' >/dev/null 2>&1 && return 0
    if ! kill -0 "$wpid" 2>/dev/null; then
      wait "$wpid" 2>/dev/null || true; wpid=""
      refused=$(grep -iE 'error|refus|not supported|invalid' "$log" | tail -1 | sed 's/\x1b\[[0-9;]*m//g')
      refused=${refused:-$(tail -1 "$log")}
      return 1
    fi
    sleep 0.2
  done
  refused="did not answer within 60 s"; return 1
}

server_stop() { # SERVER DIR
  if [ "$1" = pg18 ]; then
    "$shared/bench/postgres18.sh" stop "$2"; pg_dir=""
  elif [ -n "$wpid" ]; then
    kill -TERM "$wpid"; wait "$wpid" || true; wpid=""
  fi
}

# The server's processes: PostgreSQL's postmaster and its children, or walnut's one process.
server_pids() { # SERVER DIR
  local main
  if [ "$1" = pg18 ]; then main=$(head -1 "$2/postmaster.pid"); else main=$wpid; fi
  echo "$main"; pgrep -P "$main" || true
}

memory() { # SERVER DIR
  local p rss=0 pss=0 r s
  for p in $(server_pids "$1" "$2"); do
    r=$(awk '/^Rss:/{print $2}' "/proc/$p/smaps_rollup" 2>/dev/null || echo 0)
    s=$(awk '/^Pss:/{print $2}' "/proc/$p/smaps_rollup" 2>/dev/null || echo 0)
    rss=$((rss + ${r:-0})); pss=$((pss + ${s:-0}))
  done
  local cache wal data
  cache=$(find "$2" -type f -print0 | xargs -0 -r fincore -b -n -o RES 2>/dev/null | awk '{s += $1} END {print s + 0}')
  wal=$(find "$2/pg_wal" "$2/wal" -type f -print0 2>/dev/null | xargs -0 -r fincore -b -n -o RES 2>/dev/null | awk '{s += $1} END {print s + 0}')
  data=$(du -sb "$2" | awk '{print $1}')
  awk -v r="$rss" -v p="$pss" -v c="$cache" -v w="$wal" -v d="$data" \
    'BEGIN {printf "%.0f %.0f %.0f %.0f %.0f\n", r / 1024, p / 1024, c / 1048576, w / 1048576, d / 1048576}'
}
