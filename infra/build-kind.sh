#!/usr/bin/env bash
# Which build `make` installs on this machine: prints `cuda` where nvidia-smi answers and lists a
# GPU (then the extra .[cuda] goes in and `make run` trains on the JAX backend), else `cpu` (the
# base install). No nvidia-smi on PATH, or one that fails (driver not loaded): `cpu`, nothing
# spawned. The Makefile calls it once; `make run BUILD_KIND=cpu` overrides it. Bash builtins only
# besides nvidia-smi: its listing is read whole, not piped into a reader that may stop early.
set -u
newline=$'\n'
if command -v nvidia-smi >/dev/null 2>&1 && listing=$(nvidia-smi -L 2>/dev/null) &&
    [[ "$newline$listing" == *"${newline}GPU "[0-9]* ]]; then
    echo cuda
else
    echo cpu
fi
