#!/usr/bin/env bash
# `make serve`: the Prefect UI for aiperf on this machine.
#
#   1. starts a Prefect server on 127.0.0.1:4200 (AIPERF_PREFECT_PORT), unless PREFECT_API_URL
#      already names a server, which is then used instead;
#   2. creates the process work pool `aiperf` (kept if it exists);
#   3. registers the deployments of prefect.yaml (`benchmark`, `nightly-regression`);
#   4. creates or updates the automation that announces a failed nightly (flows/notify.py) through
#      the notification block `aiperf-nightly`, once the user has made one;
#   5. serves the runs' HTML reports and event logs, read-only, on 127.0.0.1:4201
#      (AIPERF_REPORTS_PORT; 0: none) from AIPERF_REPORTS_DIR (this checkout's aiperf-out, where
#      flow runs write with the profiles' `out`), and gives the worker AIPERF_REPORTS_URL, so a
#      run's artifacts link there (aiperf/report/served.py);
#   6. runs a worker on the pool in the foreground until Ctrl-C, then stops what it started.
#
# The API takes HTTP basic authentication (Prefect's own): the server it starts requires
# PREFECT_SERVER_API_AUTH_STRING, "user:password", taken from the environment (or from
# PREFECT_API_AUTH_STRING) or else made up afresh for the session, and written, readable by this
# user only, to $state/api-auth; the work pool, `prefect deploy` and the worker get it as
# PREFECT_API_AUTH_STRING, which clients set too. Anyone who holds it can start flow runs as this
# user, so it is never printed: the UI's login page and clients take it from that file.
#
# Open http://127.0.0.1:4200, log in with the auth string, pick Deployments -> benchmark -> Run ->
# Custom run, and watch the flow run's task runs, logs and artifacts. Runs start in this checkout
# (AIPERF_REPO, the pull step of prefect.yaml), so relative paths such as sqlite:///aiperf.db land
# here. A run's `profile` is a packaged profile's name or NAME for NAME.yaml in AIPERF_PROFILE_DIR,
# which the worker inherits from this script's environment.
set -euo pipefail
repo="$(cd "$(dirname "$0")/../.." && pwd)"
prefect="${PREFECT_BIN:-$repo/.venv/bin/prefect}"
port="${AIPERF_PREFECT_PORT:-4200}"
pool="${AIPERF_WORK_POOL:-aiperf}"
state="${AIPERF_SERVE_DIR:-${PREFECT_HOME:-$HOME/.prefect}/aiperf-serve}"
export AIPERF_REPO="$repo"
export DO_NOT_TRACK="${DO_NOT_TRACK:-1}"
export PREFECT_SERVER_ANALYTICS_ENABLED="${PREFECT_SERVER_ANALYTICS_ENABLED:-false}"
export PREFECT_SERVER_UI_SHOW_PROMOTIONAL_CONTENT=false
mkdir -p "$state"
auth_file="$state/api-auth"

healthy() {  # the API answers /health (python, not curl: the venv is all a fresh machine has)
  "$repo/.venv/bin/python" -c 'import sys, urllib.request; urllib.request.urlopen(sys.argv[1], timeout=3)' \
    "$PREFECT_API_URL/health" >/dev/null 2>&1
}

# Each child (server, worker) runs in a session of its own (setsid), so its flow runs and helper
# processes can be stopped as one group. On Ctrl-C or SIGTERM each group gets SIGTERM, then, after
# STOP_GRACE_S, SIGKILL: Prefect's worker may otherwise go on reporting to a server already gone
# for a minute, and `make serve` is gone within 10 s.
STOP_GRACE_S=6
children=()
stop_children() {
  trap - EXIT INT TERM
  local pid i deadline=$((SECONDS + STOP_GRACE_S))
  for ((i = ${#children[@]} - 1; i >= 0; i--)); do  # the worker first, the server last
    kill -TERM -- "-${children[i]}" 2>/dev/null || true
  done
  for pid in "${children[@]}"; do
    while kill -0 "$pid" 2>/dev/null && [ "$SECONDS" -lt "$deadline" ]; do sleep 0.2; done
    kill -KILL -- "-$pid" 2>/dev/null || true
    wait "$pid" 2>/dev/null || true
  done
}
trap stop_children EXIT
trap 'exit 130' INT TERM

save_auth() {  # the session's auth string, for clients and the UI's login, readable by this user only
  (umask 077 && printf '%s\n' "$PREFECT_API_AUTH_STRING" >"$auth_file.new" && mv "$auth_file.new" "$auth_file")
}

auth="${PREFECT_SERVER_API_AUTH_STRING:-${PREFECT_API_AUTH_STRING:-}}"
if [ -z "${PREFECT_API_URL:-}" ]; then
  export PREFECT_API_URL="http://127.0.0.1:$port/api"
  if healthy; then
    echo "serve: a Prefect server already answers on $PREFECT_API_URL; using it" >&2
    if [ -z "$auth" ] && [ -r "$auth_file" ]; then auth="$(cat "$auth_file")"; fi
    export PREFECT_API_AUTH_STRING="$auth"
    [ -z "$auth" ] || save_auth
  else
    if [ -z "$auth" ]; then  # a fresh secret for this session: 192 random bits
      auth="aiperf:$("$repo/.venv/bin/python" -c 'import secrets; print(secrets.token_urlsafe(24))')"
    fi
    export PREFECT_API_AUTH_STRING="$auth"
    save_auth
    echo "serve: starting a Prefect server on 127.0.0.1:$port (log: $state/server.log)" >&2
    PREFECT_SERVER_API_AUTH_STRING="$auth" \
      setsid "$prefect" server start --host 127.0.0.1 --port "$port" >"$state/server.log" 2>&1 &
    children+=("$!")
    for _ in $(seq 1 240); do
      healthy && break
      kill -0 "${children[0]}" 2>/dev/null || { tail -n 30 "$state/server.log" >&2; exit 1; }
      sleep 0.5
    done
    healthy || { echo "serve: the server did not answer within 2 minutes" >&2; exit 1; }
  fi
else
  echo "serve: using the Prefect server at $PREFECT_API_URL" >&2
  healthy || { echo "serve: no Prefect server answers at $PREFECT_API_URL/health; check PREFECT_API_URL" >&2; exit 1; }
  export PREFECT_API_AUTH_STRING="$auth"  # that server's, from the environment (none: an open server)
fi
[ -n "$PREFECT_API_AUTH_STRING" ] || unset PREFECT_API_AUTH_STRING
unset PREFECT_SERVER_API_AUTH_STRING  # the server's own; the worker and its flow runs are clients

# /health answers anyone; this needs the auth string (a 401 is the likely failure, so say so)
if ! "$prefect" work-pool ls >"$state/work-pools.log" 2>&1; then
  echo "serve: the API at $PREFECT_API_URL refused this script's requests; set PREFECT_API_AUTH_STRING" \
    "to its user:password (a server make serve started keeps it in $auth_file)" >&2
  tail -n 5 "$state/work-pools.log" >&2
  exit 1
fi
if ! "$prefect" work-pool inspect "$pool" >/dev/null 2>&1; then
  "$prefect" work-pool create "$pool" --type process >/dev/null
  echo "serve: created the process work pool $pool" >&2
fi

cd "$repo"
"$prefect" --no-prompt deploy --all --prefect-file "$repo/prefect.yaml" >"$state/deploy.log" 2>&1 \
  || { cat "$state/deploy.log" >&2; exit 1; }
echo "serve: deployed $(grep -c '^  - name:' "$repo/prefect.yaml") deployments from prefect.yaml" >&2
"$repo/.venv/bin/python" -m aiperf_flows.notify 2>&1 | sed 's/^/serve: /' >&2
[ "${PIPESTATUS[0]}" -eq 0 ] || exit 1

# The reports server: a child like the others, started before the worker so its flow runs inherit
# the address (a run with an `out` outside the folder keeps file:// links).
reports_port="${AIPERF_REPORTS_PORT:-4201}"
if [ "$reports_port" != 0 ]; then
  reports_dir="${AIPERF_REPORTS_DIR:-aiperf-out}"
  mkdir -p "$reports_dir"
  export AIPERF_REPORTS_DIR="$(cd "$reports_dir" && pwd)"  # relative: to this checkout, as runs' `out`
  export AIPERF_REPORTS_URL="http://127.0.0.1:$reports_port"
  setsid "$repo/.venv/bin/python" -m aiperf.report.served --root "$AIPERF_REPORTS_DIR" --port "$reports_port" \
    >"$state/reports.log" 2>&1 &
  children+=("$!")
  for _ in $(seq 1 60); do
    "$repo/.venv/bin/python" -c 'import sys, urllib.request; urllib.request.urlopen(sys.argv[1], timeout=2)' \
      "$AIPERF_REPORTS_URL/" >/dev/null 2>&1 && break
    kill -0 "${children[-1]}" 2>/dev/null || { cat "$state/reports.log" >&2; exit 1; }
    sleep 0.25
  done
  echo "serve: reports and event logs of $AIPERF_REPORTS_DIR at $AIPERF_REPORTS_URL" >&2
else
  unset AIPERF_REPORTS_URL
fi

ui="${PREFECT_API_URL%/api}"
echo "serve: open $ui and run Deployments -> aiperf-benchmark/benchmark; Ctrl-C stops the worker" >&2
if [ -n "${PREFECT_API_AUTH_STRING:-}" ] && [ "${PREFECT_API_URL}" = "http://127.0.0.1:$port/api" ]; then
  echo "serve: the API needs basic authentication: log in to the UI with the contents of $auth_file;" \
    "clients and other workers: export PREFECT_API_URL=$PREFECT_API_URL" \
    "PREFECT_API_AUTH_STRING=\"\$(cat $auth_file)\"" >&2
fi
# One flow run at a time: a benchmark run uses every core, two at once would measure each other.
setsid "$prefect" worker start --pool "$pool" --name "aiperf-$(hostname -s)" --type process --limit 1 &
children+=("$!")
wait "${children[-1]}"
