#!/usr/bin/env bash
# A stand-in N-GPU node: `aiperf run --profile imagenet-shaped` through the GPU code path on a CPU.
#
#   bash benchmarks/gpu_node_standin.sh DB_URL [N] [OUT]
#
# The machine looks to aiperf like an N x H200 node (N default 8):
# - an nvidia-smi first on PATH (benchmarks/gpu_node_standin.py writes it into a temporary folder)
#   answers -L, both --query-gpu field lists, topo -m (NV18 between every pair) and the plain header
#   as such a node would, with compute capability 9.0 and 1024 MiB per GPU, so the per-device
#   batches the run resolves (12, 13 and 14 per GiB) train on a CPU;
# - JAX's host platform shows N devices (XLA_FLAGS' host platform device count), which stand where
#   the GPUs would;
# - AIPERF_ACCELERATOR_PLATFORMS=cpu, the one seam: it tells aiperf.train.peak.device() that those
#   devices are the node's accelerators (docs/performance.md, "The GPU node stand-in").
# Everything else is the ordinary CLI: GPUs found -> one worker per node (devices_per_trial node),
# JAX with jit, the precision and batch resolved from the devices, data-parallel trials over N
# devices, scoring and verification, into DB_URL; then `aiperf show` prints the run.
#
# Sizes are cut to fit a CPU in a minute or two (32-pixel images, 224 training samples, one epoch
# per trial, the resnet-mini seed), so the run is open and cannot reach the accuracy floor: its exit
# status is 0, or 3 (invalid by its rules, which those cuts make it). The staged data and the event
# log go to OUT (default aiperf-out), where `aiperf verify RUN --db DB_URL` finds them.
# STANDIN_BUDGET (default 90s) sets the budget: the first trial (build and compiles included) took
# 27 s in mixed_bfloat16 on a 2-vCPU AMD EPYC shared with other work, so 90 s fits one completed
# trial on a 2-vCPU Zen 3 with a margin. Further arguments after OUT go to `aiperf run`.
# STANDIN_PROFILE=imagenet runs the ranked profile instead, over TFRecord shards in ImageNet's
# layout (10 classes, labels from 1) that `gpu_node_standin.py shards` generates once into
# OUT/standin-shards. STANDIN_PROFILE=lm runs the LM track's GPU profile, its sizes cut the same way
# (the lm-tiny seed, windows of 32 tokens, 16 Ki training tokens, 4 windows a device a step).
# STANDIN_PROFILE=enwik8 runs the LM track's ranked profile the same way, on a 20,480-byte stand-in
# in enwik8's format (`python -m aiperf.data.enwik8`, written once into OUT): 18,432 training and
# 1,024 validation bytes, whose digest is not the pin.
set -euo pipefail

db=${1:?usage: bash benchmarks/gpu_node_standin.sh DB_URL [N] [OUT] [aiperf run options...]}
gpus=${2:-8}
out=${3:-aiperf-out}
shift $(($# < 3 ? $# : 3))
mkdir -p "$out" && out=$(cd "$out" && pwd)
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
python=${PYTHON:-$repo/.venv/bin/python}
[[ -x $python ]] || python=python3

bin=$(mktemp -d "${TMPDIR:-/tmp}/gpu-node-standin.XXXXXX")
trap 'rm -rf "$bin"' EXIT
"$python" "$repo/benchmarks/gpu_node_standin.py" nvidia-smi "$bin" "$gpus" --memory-mib 1024

export PATH="$bin:$PATH"
unset CUDA_VISIBLE_DEVICES  # every listed GPU is the node's
flags=()
for flag in ${XLA_FLAGS:-}; do
  [[ $flag == --xla_force_host_platform_device_count=* ]] || flags+=("$flag")
done
export XLA_FLAGS="${flags[*]:+${flags[*]} }--xla_force_host_platform_device_count=$gpus"
export AIPERF_ACCELERATOR_PLATFORMS=cpu
export AIPERF_PEAK_SECONDS=${AIPERF_PEAK_SECONDS:-1}

profile=${STANDIN_PROFILE:-imagenet-shaped}
source_args=()
if [[ $profile == imagenet ]]; then  # the ranked profile reads TFRecord shards: generated once
  shards=$(cd "$repo" && "$python" benchmarks/gpu_node_standin.py shards "$out/standin-shards")
  source_args=(--set "data.source=$shards")
fi

if [[ $profile == enwik8 ]]; then  # the ranked LM profile reads enwik8: a stand-in, once
  standin=$out/enwik8-standin.zip
  [[ -f $standin ]] || (cd "$repo" && "$python" -m aiperf.data.enwik8 "$standin" --bytes 20480)
  source_args=(--set "data.source=$standin")
fi

if [[ $profile == lm* || $profile == enwik8 ]]; then  # the LM track: cut to fit a CPU
  cuts=(--set data.seq_len=32 --set search.space.batch_tokens=[128]
    --set search.space.warmup_epochs=[0.0] --set search.seed_architecture=lm-tiny)
  [[ $profile == enwik8 ]] || cuts+=(--set data.train_tokens=16384 --set data.val_tokens=4096)
else
  cuts=(--set data.image_size=32 --set data.train_samples=224 --set data.val_samples=112
    --set data.shard_images=112 --set train.warmup_epochs=0.5
    --set search.seed_architecture=resnet-mini)
fi

status=0
"$python" -m aiperf.cli.main run --profile "$profile" --db "$db" --out "$out" \
  --budget "${STANDIN_BUDGET:-90s}" --allow-concurrent \
  --set train.epochs=[1] --set train.early_stopping_patience=1 --set search.candidates=4 \
  "${cuts[@]}" "${source_args[@]}" "$@" || status=$?
if ((status != 0 && status != 3)); then
  echo "gpu_node_standin: aiperf run ended with status $status" >&2
  exit "$status"
fi
run=$("$python" -m aiperf.cli.main runs --db "$db" --limit 1 --json |
  "$python" -c 'import json, sys; print(json.load(sys.stdin)[0]["run_id"])')
"$python" -m aiperf.cli.main show "$run" --db "$db"
exit "$status"
