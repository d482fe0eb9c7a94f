#!/usr/bin/env bash
# Run a command with every service the tests need started, and stop them afterwards.
#
#   infra/with-services.sh .venv/bin/python -m pytest
#
# Each service lives in infra/<name>/ctl.sh with `start` (idempotent; installs what is missing
# and prints `export NAME=value` lines for the environment of the tests) and `stop`.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
services=()
for ctl in "$here"/*/ctl.sh; do
  [ -x "$ctl" ] && services+=("$ctl")
done

stop_all() {
  for ctl in "${services[@]}"; do "$ctl" stop >/dev/null 2>&1 || true; done
}
trap stop_all EXIT

for ctl in "${services[@]}"; do
  echo "starting $(basename "$(dirname "$ctl")")" >&2
  exports="$("$ctl" start)"
  eval "$exports"
done

"$@"
