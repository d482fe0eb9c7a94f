"""What this host offers a run, probed in one place: its cores, and its NVIDIA GPUs through the
one function that runs nvidia-smi.

Every nvidia-smi call in aiperf goes through `nvidia_smi` (the config finding a machine's GPUs, a
worker reading its devices' facts, the system description, the fingerprint, the MLPerf host facts),
so a missing tool, a failing driver and a hung call are handled once: nothing is spawned without
nvidia-smi on PATH (a CPU machine pays one PATH lookup), and a call that fails or runs past
TIMEOUT_S reads as no output. This module sits below the config's schema and imports nothing of
aiperf, so every layer above may probe the host.
"""

from __future__ import annotations

import os
import shutil
import subprocess

TIMEOUT_S = 20  # seconds one nvidia-smi call may take; a hung driver must not hang a run


def nvidia_smi(*args: str) -> str | None:
    """nvidia-smi's output, or None where it is missing or fails (no driver loaded)."""
    if shutil.which("nvidia-smi") is None:
        return None
    try:
        return subprocess.run(
            ["nvidia-smi", *args], capture_output=True, text=True, timeout=TIMEOUT_S, check=True
        ).stdout
    except (subprocess.SubprocessError, OSError):
        return None


def machine_cores() -> int:
    """Cores this process may use (respects CPU affinity, e.g. inside a SLURM allocation)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover - not Linux
        return os.cpu_count() or 1


def visible_gpus() -> int:
    """NVIDIA GPUs this process may use: those `nvidia-smi -L` lists, narrowed as CUDA narrows them
    by CUDA_VISIBLE_DEVICES. Nothing is spawned without nvidia-smi on PATH, so a CPU machine pays
    one PATH lookup; a failing nvidia-smi (no driver loaded) finds none."""
    listing = nvidia_smi("-L")
    if listing is None:
        return 0
    return len(visible_devices(listing, os.environ.get("CUDA_VISIBLE_DEVICES")))


def visible_devices(listing: str, cuda_visible: str | None) -> list[str]:
    """The UUIDs of the devices CUDA would show, from `nvidia-smi -L` and CUDA_VISIBLE_DEVICES.

    Unset, every listed GPU. Set, its entries in order: an index among the listed GPUs, or a
    UUID (or a unique start of one) of a GPU or a MIG instance; like CUDA, the first entry that
    names no device ends the list, so "" and "-1" show none."""
    gpus, migs = [], []
    for line in listing.splitlines():
        head, _, uuid = line.rpartition("(UUID: ")
        uuid = uuid.rstrip(")").strip() if head else ""
        if line.startswith("GPU "):
            gpus.append(uuid or line.split(":", 1)[0])
        elif head.lstrip().startswith("MIG ") and uuid:
            migs.append(uuid)
    if cuda_visible is None:
        return gpus
    shown: list[str] = []
    for entry in (e.strip() for e in cuda_visible.split(",")):
        named = [u for u in gpus + migs if entry and u.startswith(entry)]
        if entry.isdigit() and int(entry) < len(gpus):
            named = [gpus[int(entry)]]
        if len(named) != 1 or named[0] in shown:
            break
        shown.append(named[0])
    return shown
