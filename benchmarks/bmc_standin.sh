#!/usr/bin/env bash
# A quick run on this machine metered by a simulated BMC, then packaged: the energy path as a user
# with a BMC takes it, on a machine that has none.
#
#   bash benchmarks/bmc_standin.sh DB_URL PACKAGE_DIR [WATTS] [aiperf run options...]
#
# infra/bmc/ctl.sh starts OpenIPMI's BMC simulator (ipmi_sim) on 127.0.0.1 with one power sensor
# that reads WATTS (default 350) from a file; the run is given it as cluster.bmc (user aiperf, the
# password in a mode-600 file, never on a command line), so its one node is metered at its power
# supply over IPMI: `aiperf show` prints the window's joules (WATTS x the window's seconds, in the
# sensor's 10 W steps), operations per watt and the level, L1. Then `aiperf package` writes the run
# to PACKAGE_DIR. BMC_STANDIN_BUDGET (default 30s) sets the budget; further arguments go to
# `aiperf run` (e.g. --set train.trainer=simulated for a run of seconds); BMC_STANDIN_DIR keeps the
# simulator's folder (its password file, its log) there instead of a temporary one. The exit status is
# aiperf run's (3: invalid by its rules, as a 30 s quick run is) unless a later step fails.
set -euo pipefail

db=${1:?usage: bash benchmarks/bmc_standin.sh DB_URL PACKAGE_DIR [WATTS] [aiperf run options...]}
package=${2:?usage: bash benchmarks/bmc_standin.sh DB_URL PACKAGE_DIR [WATTS] [aiperf run options...]}
watts=${3:-350}
shift $(($# < 3 ? $# : 3))
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
aiperf=${AIPERF:-$repo/.venv/bin/aiperf}

bmc=${BMC_STANDIN_DIR:-}  # the simulator's folder (its password file): a temporary one unless given
if [[ -z $bmc ]]; then
  bmc=$(mktemp -d "${TMPDIR:-/tmp}/bmc-standin.XXXXXX")
  remove=$bmc
fi
port=$("$repo/.venv/bin/python" -c 'import socket; s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
mkdir -p "$bmc" && echo "$watts" > "$bmc/watts"
bash "$repo/infra/bmc/ctl.sh" start "$bmc" "$port"
trap 'bash "$repo/infra/bmc/ctl.sh" stop "$bmc"; rm -rf "${remove:-}"' EXIT

status=0
"$aiperf" run --profile quick --budget "${BMC_STANDIN_BUDGET:-30s}" --db "$db" \
  --set cluster.bmc.host=127.0.0.1 --set "cluster.bmc.port=$port" --set cluster.bmc.user=aiperf \
  --set "cluster.bmc.password_file=$bmc/password" --set cluster.bmc.reading=sensor:Power \
  "$@" || status=$?
[[ $status == 0 || $status == 3 ]] || exit "$status"
run=$("$aiperf" runs --db "$db" --json | "$repo/.venv/bin/python" -c 'import json, sys; print(max(r["run_id"] for r in json.load(sys.stdin)))')
"$aiperf" show "$run" --db "$db"
"$aiperf" package "$run" --db "$db" --to "$package"
exit "$status"
