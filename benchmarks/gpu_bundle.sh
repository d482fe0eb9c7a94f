#!/usr/bin/env bash
# The Python packages that the GPU check (benchmarks/gpu_check.sh) needs and the device machine
# lacks, as wheels for its Python 3.12 on x86-64 Linux, in .gpu-bundle/ (git-ignored).
#
# Why: the H200 machine reaches no package registry and has Python 3.12 with CUDA JAX and PyTorch
# but no Keras, keras-tuner, Prefect, Dask, SQLAlchemy, Alembic or pydantic. It takes at most
# 64 MiB of files beside the working tree, so the bundle holds exactly the missing packages: the
# dependencies of pyproject.toml without TensorFlow (Keras runs on JAX there), resolved for
# CPython 3.12 and manylinux, less the packages the machine's image already has (PROVIDED below:
# JAX, NumPy, SciPy, scikit-learn and the other compiled ones a shadowing copy could break).
#
#   benchmarks/gpu_bundle.sh          # or: make gpu-bundle
#
# It prints the bundle's size and fails when the bundle and the working tree that travels with it
# exceed 64 MiB. PYTHON (default python3) only runs pip here: its own version does not matter.
set -euo pipefail
cd "$(dirname "$0")/.."

PYTHON=${PYTHON:-python3}
BUNDLE=${GPU_BUNDLE:-.gpu-bundle}
LIMIT_MIB=64
# What the device machine's image already has, in the versions it has (normalised names):
# compiled packages whose copy would shadow the image's own, and pieces of them.
PROVIDED="numpy scipy scikit-learn joblib threadpoolctl ml-dtypes h5py pyyaml psutil markupsafe
msgpack grpcio protobuf regex charset-normalizer jax jaxlib tensorboard tensorboard-data-server"
# Never brought: TensorFlow (the check runs Keras on JAX) and TensorBoard, which only keras-tuner's
# TensorFlow backend imports.
SKIPPED="tensorflow tensorflow-cpu tensorboard"
TARGET=(--python-version 3.12 --implementation cp --abi cp312
	--platform manylinux_2_28_x86_64 --platform manylinux2014_x86_64 --only-binary=:all:)
quiet() { grep -v "^WARNING: Location" || true; } # this machine's pip config names absent mirrors

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# 1. The requirements: pyproject.toml's dependencies, TensorFlow and TensorBoard left out, and the
#    cuda extra's NVML binding (the node's GPU energy meters; the extra's JAX and DALI are not brought).
"$PYTHON" - "$SKIPPED" >"$work/wanted.txt" <<'EOF'
import re, sys, tomllib

skipped = set(sys.argv[1].split())
with open("pyproject.toml", "rb") as handle:
    project = tomllib.load(handle)["project"]
for requirement in project["dependencies"]:
    name = re.split(r"[\s\[<>=!~;]", requirement, maxsplit=1)[0].lower()
    if name not in skipped:
        print(requirement.split(";")[0].strip())
for requirement in project["optional-dependencies"]["cuda"]:
    if requirement.startswith("nvidia-ml-py"):
        print(requirement)
EOF

# 2. Resolved for CPython 3.12 on manylinux, whatever Python runs this (nothing is installed).
"$PYTHON" -m pip install --dry-run --ignore-installed --quiet --target "$work/none" \
	"${TARGET[@]}" --report "$work/report.json" -r "$work/wanted.txt" 2>&1 | quiet

# 3. Pinned, less what the machine has; then exactly those wheels, without their dependencies.
"$PYTHON" - "$PROVIDED" "$work/report.json" >"$work/pinned.txt" <<'EOF'
import json, re, sys

provided = set(sys.argv[1].split())
with open(sys.argv[2]) as handle:
    for item in json.load(handle)["install"]:
        name, version = item["metadata"]["name"], item["metadata"]["version"]
        if re.sub(r"[-_.]+", "-", name).lower() not in provided:
            print(f"{name}=={version}")
EOF
rm -rf "$BUNDLE"
mkdir -p "$BUNDLE"
"$PYTHON" -m pip download --no-deps --quiet "${TARGET[@]}" -d "$BUNDLE" -r "$work/pinned.txt" \
	2>&1 | quiet
cp "$work/pinned.txt" "$BUNDLE/requirements.txt" # what gpu_check.sh installs, and in which versions

# 4. Its size, and the 64 MiB that the bundle and the working tree share on the device machine.
wheels=$(find "$BUNDLE" -name '*.whl' | wc -l)
bundle=$(du -sb "$BUNDLE" | cut -f1)
tree=$(git ls-files -co --exclude-standard -z | xargs -0 -r du -cb 2>/dev/null | tail -1 | cut -f1)
mib() { awk -v b="$1" 'BEGIN { printf "%.1f", b / 1048576 }'; }
echo "gpu-bundle: $wheels wheels in $BUNDLE/, $(mib "$bundle") MiB; with the working tree" \
	"($(mib "$tree") MiB) $(mib $((bundle + tree))) MiB of the device machine's $LIMIT_MIB MiB"
if ((bundle + tree > LIMIT_MIB * 1048576)); then
	echo "gpu-bundle: too large: the device machine takes at most $LIMIT_MIB MiB with the working" \
		"tree; leave packages out of pyproject.toml's dependencies or add them to PROVIDED" >&2
	exit 1
fi
