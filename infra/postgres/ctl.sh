#!/usr/bin/env bash
# A real PostgreSQL server for tests and demos, on 127.0.0.1 and a free port.
#
#   infra/postgres/ctl.sh start   # idempotent; prints `export AIPERF_TEST_POSTGRES_URL=...`
#   infra/postgres/ctl.sh stop    # stops the server and deletes its folder
#   infra/postgres/ctl.sh url     # the URL of the running server
#   infra/postgres/ctl.sh restart [SECONDS]  # stop the server, stay down SECONDS (0), start it again
#
# AIPERF_PG_SERVICE (default postgres) names the server: a test that restarts a server starts its
# own (e.g. AIPERF_PG_SERVICE=postgres-faults) so that nobody else's connections are cut.
#
# The server binaries refuse to run as root, so they run as the `postgres` user with a private
# folder (mktemp -d, mode 0700, see infra/state.sh) that user owns: data, unix socket, log, and the
# superuser's password, generated at initdb. Every connection, local or over 127.0.0.1, must give
# that password (scram-sha-256); the URL printed carries it. Durability is switched off (fsync,
# synchronous_commit): this server holds throw-away test databases only.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
# shellcheck source=../state.sh
. "$here/../state.sh"

db="${AIPERF_PG_DATABASE:-aiperf}"
if [[ ! "$db" =~ ^[a-z_][a-z0-9_]*$ ]]; then
  echo "postgres: AIPERF_PG_DATABASE must be a plain lower-case name, got '$db'" >&2
  exit 2
fi
service="${AIPERF_PG_SERVICE:-postgres}"
if [[ ! "$service" =~ ^postgres(-[a-z0-9]+)?$ ]]; then
  echo "postgres: AIPERF_PG_SERVICE must be postgres or postgres-<name>, got '$service'" >&2
  exit 2
fi
dir="$(state_dir "$service")"  # empty until `start` makes one

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

as_pg() {  # the client reads the password from the folder's pgpass file, never from a command line
  if [ "$(id -u)" = 0 ]; then
    PGPASSFILE="$dir/pgpass" runuser -u postgres -- "$@"
  else
    PGPASSFILE="$dir/pgpass" "$@"
  fi
}

ensure_installed() {
  if ! command -v initdb >/dev/null 2>&1 && ! ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1; then
    echo "postgres: installing PostgreSQL from Debian" >&2
    apt-get update -qq >&2 && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq postgresql >&2
  fi
  if [ "$(id -u)" = 0 ] && ! id postgres >/dev/null 2>&1; then
    useradd --system --no-create-home --home-dir /nonexistent --shell /usr/sbin/nologin postgres
  fi
}

free_port() {
  python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

running() {
  [ -n "$dir" ] && [ -f "$dir/data/postmaster.pid" ] && as_pg "$(find_bin pg_ctl)" -D "$dir/data" status >/dev/null 2>&1
}

url() {
  echo "postgresql+psycopg://postgres:$(cat "$dir/password")@127.0.0.1:$(cat "$dir/port")/$db"
}

# A new private folder with a fresh cluster: a generated password (hex, so it needs no quoting in a
# URL or a shell), and password authentication for every connection.
init_server() {
  forget_state_dir "$service"
  dir="$(new_state_dir "$service")"
  (
    umask 077
    od -An -tx1 -N24 /dev/urandom | tr -d ' \n' >"$dir/password"
    echo "127.0.0.1:*:*:postgres:$(cat "$dir/password")" >"$dir/pgpass"
  )
  if [ "$(id -u)" = 0 ]; then chown -R postgres "$dir"; fi
  as_pg "$(find_bin initdb)" -D "$dir/data" -U postgres --pwfile="$dir/password" --auth=scram-sha-256 \
    --encoding=UTF8 --no-locale >"$dir/initdb.log" 2>&1 || { cat "$dir/initdb.log" >&2; exit 1; }
  cat >"$dir/data/pg_hba.conf" <<'EOF'
# Written by infra/postgres/ctl.sh: a password (scram-sha-256) for every connection, from this machine only.
local all all scram-sha-256
host  all all 127.0.0.1/32 scram-sha-256
EOF
}

# Start the server of $dir on the port recorded in $dir/port.
launch() {
  as_pg "$(find_bin pg_ctl)" -D "$dir/data" -l "$dir/server.log" -w -t 60 start \
    -o "-c listen_addresses=127.0.0.1 -p $(cat "$dir/port") -k $dir -c password_encryption=scram-sha-256 -c fsync=off -c synchronous_commit=off -c full_page_writes=off -c max_connections=200" \
    >/dev/null || { tail -n 20 "$dir/server.log" >&2; exit 1; }
}

start() {
  ensure_installed
  if ! running; then
    if [ -z "$dir" ] || [ ! -f "$dir/data/PG_VERSION" ] || [ ! -f "$dir/password" ]; then
      init_server
    fi
    local port
    port="$(free_port)"
    echo "$port" >"$dir/port"
    launch
    if ! as_pg "$(find_bin psql)" -h 127.0.0.1 -p "$port" -U postgres -d postgres -tAc \
        "SELECT 1 FROM pg_database WHERE datname = '$db'" | grep -q 1; then
      as_pg "$(find_bin createdb)" -h 127.0.0.1 -p "$port" -U postgres "$db"
    fi
  fi
  echo "export AIPERF_TEST_POSTGRES_URL=$(url)"
}

stop() {
  if running; then
    as_pg "$(find_bin pg_ctl)" -D "$dir/data" -m fast -w stop >/dev/null
  fi
  forget_state_dir "$service"
}

# Stop (cutting every connection), stay down for ${1:-0} seconds, start again: same port and data.
restart() {
  if ! running; then
    echo "postgres: $service is not running; start it first" >&2
    exit 1
  fi
  as_pg "$(find_bin pg_ctl)" -D "$dir/data" -m fast -w stop >/dev/null
  sleep "${1:-0}"
  launch
}

case "${1:-}" in
  start) start ;;
  stop) stop ;;
  url) running && url ;;
  restart) restart "${2:-0}" ;;
  *) echo "usage: $0 start|stop|url|restart" >&2; exit 2 ;;
esac
