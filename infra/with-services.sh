#!/usr/bin/env bash
# Run a command with every service the tests need started, and stop them afterwards.
#
#   infra/with-services.sh .venv/bin/python -m pytest
#
# Each service lives in infra/<name>/ctl.sh with `start` (idempotent; installs what is missing
# and prints `export NAME=value` lines for the environment of the tests) and `stop`.
#
# What a service prints is never evaluated: each line must be `export NAME=VALUE`, NAME in capitals
# and VALUE of characters that mean nothing to a shell (so the line is also safe for a person's
# `eval "$(infra/x/ctl.sh start)"`), and is exported as it is; any other line stops the run.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
services=()
for ctl in "$here"/*/ctl.sh; do
  [ -x "$ctl" ] && services+=("$ctl")
done

apply_exports() {  # $1: the service; $2: what its `ctl.sh start` printed
  local line
  while IFS= read -r line; do
    [ -n "$line" ] || continue
    if [[ "$line" =~ ^export\ ([A-Z_][A-Z0-9_]*)=([A-Za-z0-9_./:@%+,=-]*)$ ]]; then
      export "${BASH_REMATCH[1]}=${BASH_REMATCH[2]}"
    else
      echo "with-services: $1 printed a line that is not 'export NAME=VALUE' with a plain value; refusing it: $line" >&2
      exit 1
    fi
  done <<<"$2"
}

stop_all() {
  for ctl in "${services[@]}"; do "$ctl" stop >/dev/null 2>&1 || true; done
}
trap stop_all EXIT

for ctl in "${services[@]}"; do
  echo "starting $(basename "$(dirname "$ctl")")" >&2
  exports="$("$ctl" start)"
  apply_exports "$(basename "$(dirname "$ctl")")" "$exports"
done

"$@"
