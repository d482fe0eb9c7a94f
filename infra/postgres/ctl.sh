#!/usr/bin/env bash
# A real PostgreSQL server for tests and demos, on 127.0.0.1 and a free port.
#
#   infra/postgres/ctl.sh start   # idempotent; prints `export AIPERF_TEST_POSTGRES_URL=...`
#   infra/postgres/ctl.sh stop
#   infra/postgres/ctl.sh url     # the URL of the running server
#
# The server binaries refuse to run as root, so they run as the `postgres` user with a data
# folder that user owns (AIPERF_PG_DIR, default /tmp/aiperf-postgres). Durability is switched
# off (fsync, synchronous_commit): this server holds throw-away test databases only.
set -euo pipefail

dir="${AIPERF_PG_DIR:-/tmp/aiperf-postgres}"
data="$dir/data"
db="${AIPERF_PG_DATABASE:-aiperf}"

find_bin() {
  local name="$1"
  if command -v "$name" >/dev/null 2>&1; then command -v "$name"; return; fi
  local found
  found="$(ls -d /usr/lib/postgresql/*/bin/"$name" 2>/dev/null | sort -V | tail -n 1 || true)"
  if [ -z "$found" ]; then
    echo "postgres: $name not found; install PostgreSQL (apt-get install -y postgresql)" >&2
    exit 1
  fi
  echo "$found"
}

as_pg() {
  if [ "$(id -u)" = 0 ]; then runuser -u postgres -- "$@"; else "$@"; fi
}

ensure_installed() {
  if ! command -v initdb >/dev/null 2>&1 && ! ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1; then
    echo "postgres: installing PostgreSQL from Debian" >&2
    apt-get update -qq >&2 && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq postgresql >&2
  fi
  if [ "$(id -u)" = 0 ] && ! id postgres >/dev/null 2>&1; then
    useradd --system --home-dir "$dir" --shell /bin/bash postgres
  fi
}

free_port() {
  python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

running() {
  [ -f "$data/postmaster.pid" ] && as_pg "$(find_bin pg_ctl)" -D "$data" status >/dev/null 2>&1
}

url() {
  echo "postgresql+psycopg://postgres@127.0.0.1:$(cat "$dir/port")/$db"
}

start() {
  ensure_installed
  if running; then
    echo "export AIPERF_TEST_POSTGRES_URL=$(url)"
    return
  fi
  mkdir -p "$dir"
  if [ "$(id -u)" = 0 ]; then chown postgres "$dir"; fi
  chmod 0755 "$dir"
  if [ ! -f "$data/PG_VERSION" ]; then
    rm -rf "$data"
    as_pg "$(find_bin initdb)" -D "$data" -U postgres --auth=trust --encoding=UTF8 --no-locale >"$dir/initdb.log" 2>&1 \
      || { cat "$dir/initdb.log" >&2; exit 1; }
  fi
  local port
  port="$(free_port)"
  echo "$port" >"$dir/port"
  as_pg "$(find_bin pg_ctl)" -D "$data" -l "$dir/server.log" -w -t 60 start \
    -o "-c listen_addresses=127.0.0.1 -p $port -k $dir -c fsync=off -c synchronous_commit=off -c full_page_writes=off -c max_connections=200" \
    >/dev/null || { tail -n 20 "$dir/server.log" >&2; exit 1; }
  if ! as_pg "$(find_bin psql)" -h 127.0.0.1 -p "$port" -U postgres -d postgres -tAc \
      "SELECT 1 FROM pg_database WHERE datname = '$db'" | grep -q 1; then
    as_pg "$(find_bin createdb)" -h 127.0.0.1 -p "$port" -U postgres "$db"
  fi
  echo "export AIPERF_TEST_POSTGRES_URL=$(url)"
}

stop() {
  if running; then
    as_pg "$(find_bin pg_ctl)" -D "$data" -m fast -w stop >/dev/null
  fi
}

case "${1:-}" in
  start) start ;;
  stop) stop ;;
  url) running && url ;;
  *) echo "usage: $0 start|stop|url" >&2; exit 2 ;;
esac
