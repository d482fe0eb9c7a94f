# Sourced by infra/*/ctl.sh: where a service keeps its files.
#
# Each service's files (data, config, sockets, logs, passwords) live in a folder made by `mktemp -d`
# (mode 0700), never at a fixed /tmp name that another user could create first or read. Its path is
# recorded in <repo>/.aiperf/services/<service> (git ignores .aiperf/; the folder is mode 0700), so
# `stop`, `url` and a second `start` find the service again.

services_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)/.aiperf/services"

# The folder recorded for service $1, or nothing when there is none (or it is gone). A record that
# does not name a folder of the form mktemp made here is refused: `stop` deletes the folder.
state_dir() {
  local record="$services_root/$1" dir
  [ -f "$record" ] || return 0
  dir="$(head -n 1 "$record")"
  if [[ ! "$dir" =~ ^/[A-Za-z0-9._/-]*/aiperf-$1\.[A-Za-z0-9]+$ || "$dir" == *..* ]]; then
    echo "$1: $record does not name a folder that infra/$1/ctl.sh made; remove it" >&2
    return 1
  fi
  if [ -d "$dir" ] && [ ! -L "$dir" ]; then echo "$dir"; fi
  return 0
}

# A new private folder for service $1, recorded for the next calls.
new_state_dir() {
  local dir
  mkdir -p "$services_root"
  chmod 0700 "$services_root"
  dir="$(mktemp -d "${TMPDIR:-/tmp}/aiperf-$1.XXXXXXXX")"
  chmod 0700 "$dir"
  echo "$dir" >"$services_root/$1"
  echo "$dir"
}

# Delete service $1's folder and its record.
forget_state_dir() {
  local dir
  dir="$(state_dir "$1")"
  if [ -n "$dir" ]; then rm -rf -- "$dir"; fi
  rm -f -- "$services_root/$1"
}
