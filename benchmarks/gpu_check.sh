#!/usr/bin/env bash
# The GPU check as one command on the device machine (docs/performance.md, "One GPU"): installs the
# carried wheels of .gpu-bundle/ (benchmarks/gpu_bundle.sh), then runs benchmarks/bench_gpu.py
# under a timeout. It expects one NVIDIA H200 (141 GB):
#
#   run(command="bash benchmarks/gpu_check.sh --batch 256", kind="nvidia-h200",
#       carry=[".gpu-bundle"], timeout_s=410)
#   benchmarks/gpu_check.sh --no-run            # any bench_gpu.py flags pass through
#
# $OUT (where set) receives each part's figures as the part ends (part0.json, part1.json,
# feed.json, fit.json, part2.json, part3.json), the summary and table of everything so far
# (gpu_check.json, gpu_check.txt, rewritten after each part) and the whole log (gpu_check.log):
# the device tool returns them even when the command runs past its timeout_s.
#
# The machine's python3 (3.12, with CUDA JAX) is itself a virtual environment: a venv made from it
# with --system-site-packages would see its base interpreter's packages, not its JAX. So nothing
# is made: the wheels install with --target into a folder outside the checkout, which goes first
# on PYTHONPATH with the checkout itself (aiperf runs from the working tree, not installed).
#
# Sizing: GPU_CHECK_SECONDS (default 340) is what the whole check, install included, should take;
# the run's budget is what is left of it (benchmarks/gpu_check/run.py). `timeout` stops the check
# LATE_S (50) after that and kills it 10 s later: at most 400 s, under the device call's 410.
set -euo pipefail
cd "$(dirname "$0")/.."
began=$SECONDS
CHECK_S=${GPU_CHECK_SECONDS:-340}
LATE_S=50 # as benchmarks/gpu_check/run.py LATE_S: the shortest run is left out past it
PYTHON=${PYTHON:-python3}
SITE=${GPU_CHECK_SITE:-${TMPDIR:-/tmp}/aiperf-gpu-site}
BUNDLE=${GPU_BUNDLE:-.gpu-bundle}
OUT=${OUT:-}
if [[ -n "$OUT" ]]; then
	mkdir -p "$OUT"
	exec > >(tee -a "$OUT/gpu_check.log") 2>&1 # the install's lines too, as they come
fi

if [[ ! -f "$BUNDLE/requirements.txt" ]]; then
	echo "gpu_check: no $BUNDLE/ here: run benchmarks/gpu_bundle.sh (make gpu-bundle) where" \
		"the check is sent from, and carry .gpu-bundle with it" >&2
	exit 2
fi
if ! "$PYTHON" -c 'import sys; sys.exit(sys.version_info[:2] != (3, 12))'; then
	echo "gpu_check: $BUNDLE/ holds wheels for Python 3.12; $PYTHON is" \
		"$("$PYTHON" -V 2>&1): set PYTHON to a Python 3.12" >&2
	exit 2
fi

rm -rf "$SITE"
"$PYTHON" -m pip install --quiet --no-index --no-deps --no-compile --disable-pip-version-check \
	--target "$SITE" "$BUNDLE"/*.whl
ln -sfn "$PWD/flows" "$SITE/aiperf_flows" # the flows' package name, as pyproject.toml installs it
export PYTHONPATH="$PWD:$SITE${PYTHONPATH:+:$PYTHONPATH}"
export KERAS_BACKEND=jax PYTHONUNBUFFERED=1 TF_CPP_MIN_LOG_LEVEL=2
export DO_NOT_TRACK=1 PREFECT_SERVER_ANALYTICS_ENABLED=false
export PREFECT_HOME=${PREFECT_HOME:-$SITE/.prefect}
# The run's temporary Prefect API starts from fresh wheels (no byte code yet): more than the 20 s
# Prefect waits by default, on a busy machine.
export PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS=${PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS:-120}
"$PYTHON" - <<'EOF'
import importlib.metadata as m
import platform

names = ("jax", "jaxlib", "keras", "keras-tuner", "prefect", "distributed", "numpy")
print(f"gpu_check: Python {platform.python_version()},", ", ".join(f"{n} {m.version(n)}" for n in names))
EOF
echo "gpu_check: installed in $((SECONDS - began)) s"

left=$((CHECK_S - (SECONDS - began)))
left=$((left > 1 ? left : 1)) # a slow install leaves the parts little, never no limit at all
args=(--limit "$left" ${OUT:+--out "$OUT"})
set +e
timeout --kill-after=10 $((left + LATE_S)) "$PYTHON" benchmarks/bench_gpu.py "${args[@]}" "$@"
code=$?
echo "gpu_check: exit $code after $((SECONDS - began)) s"
exit "$code"
