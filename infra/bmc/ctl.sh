#!/usr/bin/env bash
# A simulated BMC for the energy tests and demos: OpenIPMI's ipmi_sim serving IPMI over LAN
# (lanplus) on 127.0.0.1, with one power sensor, "Power", in watts, read from a file anyone can
# change (10 W steps: the sensor's raw byte times 10, as its SDR says).
#
#   infra/bmc/ctl.sh start DIR [PORT]   # writes DIR/lan.conf, DIR/bmc.emu, DIR/password, DIR/watts
#   echo 350 > DIR/watts                # the node now draws 350 W
#   infra/bmc/ctl.sh stop DIR
#
# The BMC's user is "aiperf"; its password is in DIR/password (mode 600), which is what a run's
# cluster.bmc.password_file names. Installs openipmi and ipmitool with apt-get where missing;
# without DIR, `start` only installs them and `stop` does nothing (infra/with-services.sh calls
# every service so before the tests, which start their own simulators).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
action=${1:?usage: ctl.sh start|stop [DIR [PORT]]}
dir=${2:-}
port=${3:-9623}

install() {
  command -v ipmi_sim >/dev/null && command -v ipmitool >/dev/null && return
  if [ "$(id -u)" != 0 ]; then
    echo "bmc: ipmi_sim or ipmitool is missing and installing needs root: apt-get install -y openipmi ipmitool" >&2
    exit 1
  fi
  apt-get update -qq >&2
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends openipmi ipmitool >&2
}

start() {
  install
  mkdir -p "$dir/state"
  dir=$(cd "$dir" && pwd)
  umask 077
  printf '%s\n' "aiperf-$RANDOM$RANDOM" > "$dir/password"
  umask 022
  [ -f "$dir/watts" ] || echo 0 > "$dir/watts"
  sed -e "s|@PORT@|$port|" -e "s|@PASSWORD@|$(cat "$dir/password")|" "$here/lan.conf" > "$dir/lan.conf"
  chmod 600 "$dir/lan.conf"
  sed -e "s|@WATTS@|$dir/watts|" "$here/bmc.emu" > "$dir/bmc.emu"
  ipmi_sim -c "$dir/lan.conf" -f "$dir/bmc.emu" -s "$dir/state" -n > "$dir/ipmi_sim.log" 2>&1 &
  echo $! > "$dir/ipmi_sim.pid"
  for _ in $(seq 100); do  # it answers once its LAN channel is up
    if ipmitool -I lanplus -C 3 -H 127.0.0.1 -p "$port" -U aiperf -f "$dir/password" -N 1 -R 1 \
        sensor reading Power -c >/dev/null 2>&1; then
      sleep 0.5  # past its first polls of the watts file (every 200 ms): it reads what the file says
      return 0
    fi
    kill -0 "$(cat "$dir/ipmi_sim.pid")" 2>/dev/null || { cat "$dir/ipmi_sim.log" >&2; exit 1; }
    sleep 0.2
  done
  echo "bmc: ipmi_sim did not answer on 127.0.0.1:$port (log: $dir/ipmi_sim.log)" >&2
  exit 1
}

stop() {
  [ -f "$dir/ipmi_sim.pid" ] || return 0
  kill "$(cat "$dir/ipmi_sim.pid")" 2>/dev/null || true
  rm -f "$dir/ipmi_sim.pid"
}

case "$action" in
  start) if [ -n "$dir" ]; then start; else install; fi ;;
  stop) if [ -n "$dir" ]; then stop; fi ;;
  *) echo "usage: ctl.sh start|stop DIR [PORT]" >&2; exit 2 ;;
esac
