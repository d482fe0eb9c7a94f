"""Where a run has GPUs, its trials train on them with Keras on JAX, compiled with jit, whatever
the profile's train.backend and train.jit_compile say.

A profile is written once for every machine: the ranked ones say `backend: tensorflow` and
`jit_compile: false`, which on a CPU machine is the fastest measured, but the base install's
TensorFlow is tensorflow-cpu, which sees no GPU. A run whose cluster has GPUs (found by nvidia-smi
on this machine, or given as cluster.gpus for a job queue's nodes) therefore resolves the backend
to JAX with jit before anything is recorded, so the run row, the event log and the workers' own
KERAS_BACKEND all say what the trials ran on, as they say the resolved precision. Backend and jit
are implementations of the same training (every ruleset allows each in the closed division), so a
result's division and workload do not change.

A backend the user names (`--set train.backend=...`, `--set train.jit_compile=...`) is theirs and
kept; a worker whose framework then shows no accelerator is refused in one line before the first
trial (aiperf.train.gpu_failures), never trained on its CPUs while nvidia-smi lists GPUs.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from aiperf import settings

GPU_BACKEND = "jax"
INSTALL = "pip install '.[cuda]'"


def cluster_gpus(raw: Mapping[str, Any]) -> int:
    """cluster.gpus of a raw config (0 when unset or not a whole number: validation names it)."""
    section = raw.get("cluster")
    value = section.get("gpus") if isinstance(section, Mapping) else None
    try:
        return max(0, int(value or 0))
    except (TypeError, ValueError):
        return 0


def train_on_gpus(raw: dict[str, Any], overrides: Mapping[str, Any]) -> bool:
    """Set train.backend jax and train.jit_compile true in a raw config whose cluster has GPUs and
    whose trials train (not simulated), except where `overrides` (the user's --set) name them.
    Returns whether the cluster has GPUs for real trials."""
    train = raw.get("train")
    if train is None:
        train = raw["train"] = {}
    if not isinstance(train, dict) or train.get("trainer") == "simulated" or not cluster_gpus(raw):
        return False
    if "train.backend" not in overrides:
        train["backend"] = GPU_BACKEND
    if "train.jit_compile" not in overrides:
        train["jit_compile"] = True
    return True


def accelerator_platforms() -> frozenset[str]:
    """The JAX platforms whose devices count as the node's accelerators
    ($AIPERF_ACCELERATOR_PLATFORMS: gpu, cuda and rocm by default).

    This is the one seam between a real GPU node and the stand-in of benchmarks/gpu_node_standin.sh,
    which sets it to `cpu`: with XLA's host platform split into N devices and a stand-in nvidia-smi
    listing N GPUs, a worker then takes the GPU path everywhere after this function (device facts
    from nvidia-smi, precision candidates by compute capability, the batch by GPU memory, the peak
    counted per device) while its arithmetic runs on the CPU. Nothing else in aiperf knows it (the
    trials' devices (aiperf.train.peak.device) and the feed's choice (aiperf.data.feed) ask here)."""
    written = settings.text(settings.ACCELERATOR_PLATFORMS) or ""
    return frozenset(p.strip().lower() for p in written.split(",") if p.strip())
