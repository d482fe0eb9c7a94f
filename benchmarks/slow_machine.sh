#!/usr/bin/env bash
# Run a command as on the slowest machine aiperf's tests must pass on: a 2-vCPU AMD EPYC Zen 3 (AVX2,
# no AVX-512), about three times slower per core than the Zen 4, 5 or Xeon these tests are written on.
#
#   sudo bash benchmarks/slow_machine.sh [CPUS] -- COMMAND [ARGS...]
#   sudo bash benchmarks/slow_machine.sh -- env CI=true bash .ci/run     # make test, as CI runs it
#
# Two things make a fast machine behave like that one (docs/performance.md, "The test suite"):
# - TF_ENABLE_ONEDNN_OPTS=0 for every process: TensorFlow's choice on a CPU without AVX-512 VNNI,
#   BF16 or AMX, so its kernels and allocator are a Zen 3's ("A 2-core Zen 3");
# - every process of the command, and every process it starts (services, workers, jobs), in one
#   control group held to CPUS CPUs (default 1.2, so 0.6 of each of two cores): with both, two
#   one-thread TensorFlow processes multiply 2048^2 float32 matrices at 68-86 GFLOP/s each on a Xeon,
#   where the Zen 3 gives 60-70.
# It needs root and a writable cgroup file system (version 1's cpu controller, or version 2 with the
# cpu controller enabled for its children). The group is left behind, empty, for the next run.
set -euo pipefail

cpus=1.2
if [[ ${1:-} != -- ]]; then
  cpus=${1:?usage: bash benchmarks/slow_machine.sh [CPUS] -- COMMAND [ARGS...]}
  shift
fi
[[ ${1:-} == -- ]] || { echo "usage: bash benchmarks/slow_machine.sh [CPUS] -- COMMAND [ARGS...]" >&2; exit 2; }
shift
(($#)) || { echo "usage: bash benchmarks/slow_machine.sh [CPUS] -- COMMAND [ARGS...]" >&2; exit 2; }

period=100000
quota=$(awk -v c="$cpus" -v p="$period" 'BEGIN { q = int(c * p); if (q < 1000) exit 1; print q }') || {
  echo "slow_machine.sh: CPUS must be a number of at least 0.01, got '$cpus'" >&2
  exit 2
}

if [[ -d /sys/fs/cgroup/cpu && -w /sys/fs/cgroup/cpu ]]; then  # cgroup version 1
  group=/sys/fs/cgroup/cpu/aiperf-slow-machine
  mkdir -p "$group"
  echo "$period" >"$group/cpu.cfs_period_us"
  echo "$quota" >"$group/cpu.cfs_quota_us"
  echo $$ >"$group/tasks"
elif [[ -f /sys/fs/cgroup/cgroup.controllers ]]; then  # cgroup version 2
  group=/sys/fs/cgroup/aiperf-slow-machine
  mkdir -p "$group"
  echo "$quota $period" >"$group/cpu.max" || {
    echo "slow_machine.sh: the cpu controller is not enabled for $group's parent (cgroup.subtree_control)" >&2
    exit 2
  }
  echo $$ >"$group/cgroup.procs"
else
  echo "slow_machine.sh: no writable cgroup cpu controller here (run as root)" >&2
  exit 2
fi

export TF_ENABLE_ONEDNN_OPTS=0
echo "slow_machine.sh: $* on $cpus CPUs ($group), TF_ENABLE_ONEDNN_OPTS=0" >&2
exec "$@"
