#!/usr/bin/env bash
# The GPU check as one command on the device machine (docs/performance.md, "One GPU"): installs the
# carried wheels of .gpu-bundle/ (benchmarks/gpu_bundle.sh), then runs benchmarks/bench_gpu.py
# under a timeout and leaves its table, results and log in $OUT when that is set.
#
#   device run: command "bash benchmarks/gpu_check.sh", carry [".gpu-bundle"], timeout_s 420
#   benchmarks/gpu_check.sh --no-run            # any bench_gpu.py flags pass through
#
# The machine's python3 (3.12, with CUDA JAX) is itself a virtual environment: a venv made from it
# with --system-site-packages would see its base interpreter's packages, not its JAX. So nothing
# is made: the wheels install with --target into a folder outside the checkout, which goes first
# on PYTHONPATH with the checkout itself (aiperf runs from the working tree, not installed).
#
# GPU_CHECK_SECONDS (default 330): what the whole check, install included, should take; the
# run's budget is sized to it. A timeout stops it 60 s after that, the table still printed, so
# two checks fit in a 15-minute device lease.
set -euo pipefail
cd "$(dirname "$0")/.."
began=$SECONDS
CHECK_S=${GPU_CHECK_SECONDS:-330}
PYTHON=${PYTHON:-python3}
SITE=${GPU_CHECK_SITE:-${TMPDIR:-/tmp}/aiperf-gpu-site}
BUNDLE=${GPU_BUNDLE:-.gpu-bundle}
OUT=${OUT:-}

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
args=(--limit "$left")
if [[ -n "$OUT" ]]; then
	mkdir -p "$OUT"
	args+=(--json "$OUT/gpu_check.json" --table "$OUT/gpu_check.txt")
fi
set +e
timeout --kill-after=20 $((left + 60)) "$PYTHON" benchmarks/bench_gpu.py "${args[@]}" "$@" 2>&1 |
	tee ${OUT:+"$OUT/gpu_check.log"}
code=${PIPESTATUS[0]}
echo "gpu_check: exit $code after $((SECONDS - began)) s"
exit "$code"
