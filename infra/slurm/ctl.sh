#!/usr/bin/env bash
# A single-node SLURM on localhost (Debian's slurm-wlm), for the tests and for trying
# `aiperf run --cluster slurm` on one machine.
#
#   eval "$(infra/slurm/ctl.sh start)"   # installs slurm-wlm when missing, starts slurmctld + slurmd,
#                                         # waits until the node is idle, prints `export SLURM_CONF=...`
#   infra/slurm/ctl.sh status             # sinfo of the local cluster
#   infra/slurm/ctl.sh stop               # stops both daemons (jobs still running are killed), deletes the folder
#
# Everything it writes (config, state, spool, logs, pid files) lives in a private folder (mktemp -d,
# mode 0700, see infra/state.sh), so it never touches /etc/slurm, and only root can read or submit
# to this cluster. Both daemons listen on 127.0.0.1 only (CommunicationParameters). They run as root
# with AuthType=auth/none, which trusts the user id a client claims: a demo and test cluster on one
# machine whose other users are trusted, not a production setup (that needs munge).
# Must run as root (slurmd launches jobs as their users).
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
# shellcheck source=../state.sh
. "$here/../state.sh"

dir="$(state_dir slurm)"  # empty until `start` makes one
conf="$dir/slurm.conf"
node="$(hostname -s)"

log() { echo "slurm: $*" >&2; }

install_packages() {
  command -v slurmctld >/dev/null && command -v slurmd >/dev/null && command -v sinfo >/dev/null && return
  if [ "$(id -u)" != 0 ]; then
    log "slurm-wlm is not installed and installing it needs root: run 'sudo apt-get install slurm-wlm'"
    exit 1
  fi
  log "installing slurm-wlm and munge (apt-get)"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq >&2
  apt-get install -y -qq slurm-wlm munge >&2
}

write_config() {
  forget_state_dir slurm
  dir="$(new_state_dir slurm)"
  conf="$dir/slurm.conf"
  mkdir -p "$dir"/{state,spool,log,run}
  local cpus memory_mb
  cpus="$(nproc --all)"
  memory_mb="$(awk '/MemTotal/ {print int($2 / 1024 * 0.9)}' /proc/meminfo)"
  cat >"$conf" <<EOF
# Written by infra/slurm/ctl.sh: a one-node cluster on localhost for tests and demos.
ClusterName=aiperf
SlurmctldHost=$node(127.0.0.1)
SlurmctldPort=${AIPERF_SLURMCTLD_PORT:-6817}
SlurmdPort=${AIPERF_SLURMD_PORT:-6818}
SlurmUser=root
SlurmdUser=root
AuthType=auth/none
CredType=cred/none
# Listen on the addresses above (127.0.0.1), not on every interface.
CommunicationParameters=NoCtldInAddrAny,NoInAddrAny
StateSaveLocation=$dir/state
SlurmdSpoolDir=$dir/spool
SlurmctldPidFile=$dir/run/slurmctld.pid
SlurmdPidFile=$dir/run/slurmd.pid
SlurmctldLogFile=$dir/log/slurmctld.log
SlurmdLogFile=$dir/log/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
SchedulerType=sched/backfill
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
# Finished jobs (id, name, state, node) are appended here: sacct needs slurmdbd, this does not.
JobCompType=jobcomp/filetxt
JobCompLoc=$dir/log/jobcomp.log
MpiDefault=none
ReturnToService=2
SlurmctldTimeout=30
SlurmdTimeout=30
InactiveLimit=0
MinJobAge=300
KillWait=5
Waittime=0
SchedulerParameters=sched_interval=2
MailProg=/bin/true
NodeName=$node NodeAddr=127.0.0.1 CPUs=$cpus RealMemory=$memory_mb State=UNKNOWN
PartitionName=debug Nodes=$node Default=YES MaxTime=INFINITE State=UP
EOF
}

running() {  # $1: daemon name; true when its pid file names a live process
  local pid_file="$dir/run/$1.pid"
  [ -n "$dir" ] && [ -f "$pid_file" ] && kill -0 "$(cat "$pid_file")" 2>/dev/null
}

node_state() {
  SLURM_CONF="$conf" sinfo -h -n "$node" -o %T 2>/dev/null | head -1 | tr -d '*~#' || true
}

start() {
  install_packages
  if ! running slurmctld || ! running slurmd; then
    stop_daemons
    write_config
    log "starting slurmctld and slurmd for node $node (config $conf)"
    SLURM_CONF="$conf" slurmctld -f "$conf" -i
    SLURM_CONF="$conf" slurmd -f "$conf"
  fi
  local state=""
  for _ in $(seq 1 60); do
    state="$(node_state)"
    case "$state" in
      idle|mixed|allocated) break ;;
      down|drained|draining|drain) SLURM_CONF="$conf" scontrol update NodeName="$node" State=RESUME >/dev/null 2>&1 || true ;;
    esac
    sleep 1
  done
  case "$state" in
    idle|mixed|allocated) ;;
    *) log "node $node did not become idle (state '${state:-unknown}'); see $dir/log/"; tail -5 "$dir"/log/*.log >&2 || true; exit 1 ;;
  esac
  log "node $node is $state"
  echo "export SLURM_CONF=$conf"
}

stop_daemons() {
  [ -n "$dir" ] || return 0
  for daemon in slurmd slurmctld; do
    if running "$daemon"; then
      local pid
      pid="$(cat "$dir/run/$daemon.pid")"
      kill "$pid" 2>/dev/null || true
      for _ in $(seq 1 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
      kill -9 "$pid" 2>/dev/null || true
    fi
    rm -f "$dir/run/$daemon.pid"
  done
}

case "${1:-}" in
  start) start ;;
  stop)
    # Cancel our jobs first so no slurmstepd outlives the daemons.
    if running slurmctld; then SLURM_CONF="$conf" scancel --full --partition debug >/dev/null 2>&1 || true; sleep 1; fi
    stop_daemons
    forget_state_dir slurm
    log "stopped" ;;
  status)
    if running slurmctld; then SLURM_CONF="$conf" sinfo; else log "not running"; exit 1; fi ;;
  *) echo "usage: $0 start|stop|status" >&2; exit 2 ;;
esac
