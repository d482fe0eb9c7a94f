"""What this host offers a run, probed in one place: its cores, and its NVIDIA GPUs through the
one function that runs nvidia-smi.

Every nvidia-smi call in aiperf goes through `nvidia_smi` (the config finding a machine's GPUs, a
worker reading its devices' facts, the system description, the fingerprint, the MLPerf host facts),
so a missing tool, a failing driver and a hung call are handled once: nothing is spawned without
nvidia-smi on PATH (a CPU machine pays one PATH lookup), and a call that fails or runs past
TIMEOUT_S reads as no output (`ask_nvidia_smi` also says why). This module sits below the config's
schema and imports nothing of aiperf, so every layer above may probe the host.

A node's GPUs are also seen without nvidia-smi, so that a node whose GPUs exist but cannot be
queried is never taken for a CPU machine (`gpu_problem`): the driver's device files
(/dev/nvidia0, ...) and its libraries (libcuda.so.1, libnvidia-ml.so.1; the CUDA toolkit's stubs
are unversioned and do not count). The libraries alone count only where nvidia-smi cannot say
otherwise (missing, or failing): a CPU partition booted from its GPU nodes' image has them, and
there `nvidia-smi -L` answers that it lists no GPU, with no device file beside it (`gpu_evidence`).
Both probes only look at files, and take the folder they look in as a parameter, so a test gives
them a folder of its own.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

TIMEOUT_S = 20  # seconds one nvidia-smi call may take; a hung driver must not hang a run
# The query that gives a worker's GPUs their memory and compute capability (aiperf.train.auto):
# compute_cap is reported by the drivers of 2022 and later.
GPU_QUERY = ("--query-gpu=uuid,memory.total,compute_cap", "--format=csv,noheader,nounits")
DEV = Path("/dev")
_DEVICE_FILE = re.compile(r"^nvidia[0-9]+$")  # one per GPU; nvidiactl and nvidia-uvm are not GPUs
# The driver's own libraries, by the versioned names the driver installs.
DRIVER_LIBRARIES = ("libcuda.so.1", "libnvidia-ml.so.1")
# Where distributions, containers (the NVIDIA container toolkit) and WSL put them; LD_LIBRARY_PATH's
# folders are searched first.
LIBRARY_FOLDERS = (
    "/usr/lib/x86_64-linux-gnu",
    "/usr/lib/aarch64-linux-gnu",
    "/usr/lib64",
    "/usr/lib",
    "/lib64",
    "/usr/local/nvidia/lib64",
    "/usr/lib/wsl/lib",
)
NOT_ON_PATH = "nvidia-smi is not on PATH"
# What nvidia-smi prints (with a non-zero exit) where its driver is loaded and finds no GPU: an
# answer, not a failure.
NO_DEVICES = "No devices were found"
# What a GPU node that cannot be used may do instead: train on its CPUs, as an open run.
ON_THE_CPUS = "or train on the CPUs with --set train.device=cpu (an open run)"


@dataclass(frozen=True)
class Answer:
    """One nvidia-smi call: its output where it ran and succeeded, else why not in a few words."""

    output: str | None
    failure: str | None = None


def ask_nvidia_smi(*args: str) -> Answer:
    """nvidia-smi's answer to `args`: its output, or why there is none (not on PATH, its exit
    status and first line, or the timeout)."""
    if shutil.which("nvidia-smi") is None:
        return Answer(None, NOT_ON_PATH)
    try:
        done = subprocess.run(
            ["nvidia-smi", *args], capture_output=True, text=True, timeout=TIMEOUT_S, check=False
        )
    except subprocess.TimeoutExpired:
        return Answer(None, f"no answer within {TIMEOUT_S} s")
    except (subprocess.SubprocessError, OSError) as exc:
        return Answer(None, f"{type(exc).__name__}: {exc}")
    if done.returncode == 0:
        return Answer(done.stdout)
    if args == ("-L",) and done.stdout.strip() == NO_DEVICES:
        return Answer("")  # a driver that lists no GPU answered
    said = next((s.strip() for s in (done.stdout + done.stderr).splitlines() if s.strip()), "")
    return Answer(None, f"exit {done.returncode}" + (f": {said[:200]}" if said else ""))


def nvidia_smi(*args: str) -> str | None:
    """nvidia-smi's output, or None where it is missing or fails (no driver loaded)."""
    return ask_nvidia_smi(*args).output


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


def device_files(dev: Path = DEV) -> list[str]:
    """The GPUs' device files the NVIDIA driver made in `dev` (/dev/nvidia0, /dev/nvidia1, ...)."""
    try:
        names = [entry.name for entry in dev.iterdir() if _DEVICE_FILE.match(entry.name)]
    except OSError:
        return []
    return [str(dev / name) for name in sorted(names, key=lambda name: int(name[6:]))]


def library_folders() -> list[Path]:
    """Where the driver's libraries are looked for: LD_LIBRARY_PATH's folders, then
    LIBRARY_FOLDERS."""
    listed = [folder for folder in os.environ.get("LD_LIBRARY_PATH", "").split(":") if folder]
    return [Path(folder) for folder in dict.fromkeys([*listed, *LIBRARY_FOLDERS])]


def driver_libraries(folders: Sequence[Path] | None = None) -> list[str]:
    """The NVIDIA driver's libraries (DRIVER_LIBRARIES) in `folders` (`library_folders()` unless
    given), the first of each name."""
    found: dict[str, str] = {}
    for folder in library_folders() if folders is None else folders:
        for name in DRIVER_LIBRARIES:
            if name not in found and (Path(folder) / name).exists():
                found[name] = str(Path(folder) / name)
    return list(found.values())


def gpu_evidence(
    dev: Path = DEV, folders: Sequence[Path] | None = None, listing: Answer | None = None
) -> list[str]:
    """The files that say this node has NVIDIA GPUs: their device files in `dev`, else the driver's
    libraries in `folders` unless `nvidia-smi -L` (`listing`, asked here only where there are
    libraries and no device file, unless given) answered.
    An answer listing none, beside no device file, is a CPU node that shares its GPU nodes' image
    (their libraries but no GPU); a missing or failing nvidia-smi cannot say so, and there the
    libraries stand for GPUs that cannot be seen."""
    files = device_files(dev)
    if files:
        return files
    libraries = driver_libraries(folders)
    if not libraries:  # nothing to ask about: no nvidia-smi is spawned
        return []
    if listing is None:
        listing = ask_nvidia_smi("-L")
    return libraries if listing.output is None else []


@dataclass(frozen=True)
class NodeGpus:
    """The GPUs a run on this node may use, and why GPUs it has cannot be used (one line with the
    fix; None when nothing is wrong)."""

    count: int
    problem: str | None = None


def node_gpus(dev: Path = DEV, folders: Sequence[Path] | None = None) -> NodeGpus:
    """This node's usable NVIDIA GPUs: those `nvidia-smi -L` lists, narrowed by
    CUDA_VISIBLE_DEVICES, once nvidia-smi has answered the query that sizes their batch and
    precision (GPU_QUERY). Where the node has GPUs (listed, or their device files in `dev`, or the
    driver's libraries in `folders`) that cannot be listed, shown or queried, `problem` says which
    call failed and the fix: a run must not take such a node for a CPU machine and train on its
    CPUs in float32. A node with none of them (a laptop, a CI runner) has 0 GPUs and no problem."""
    listing = ask_nvidia_smi("-L")
    if listing.output is None:
        seen = gpu_evidence(dev, folders, listing)
        if not seen:
            return NodeGpus(0)
        return NodeGpus(
            0,
            f"this node has NVIDIA GPUs ({_few(seen)}) but {call_failed(('-L',), listing)}, so aiperf "
            f"cannot see them; load the NVIDIA driver and put its nvidia-smi on PATH, {ON_THE_CPUS}",
        )
    cuda_visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    listed = visible_devices(listing.output, None)
    shown = visible_devices(listing.output, cuda_visible)
    if listed and not shown:
        return NodeGpus(
            0,
            f"CUDA_VISIBLE_DEVICES={cuda_visible!r} hides all {len(listed)} GPUs nvidia-smi lists, "
            f"so the run would train on the CPUs; unset it or name the GPUs to use, {ON_THE_CPUS}",
        )
    if not shown:
        files = device_files(dev)
        return NodeGpus(
            0,
            f"`nvidia-smi -L` lists no GPU although this node has {_few(files)}; check the driver "
            f"(and the job's GPU allocation), {ON_THE_CPUS}"
            if files
            else None,
        )
    query = ask_nvidia_smi(*GPU_QUERY)
    if query.output is None:
        return NodeGpus(
            len(shown),
            f"nvidia-smi lists {len(shown)} GPUs but {call_failed(GPU_QUERY, query)}, so their memory "
            f"and compute capability are unknown and the run would train in float32 at the CPUs' "
            f"batch; fix the NVIDIA driver until that command answers, {ON_THE_CPUS}",
        )
    return NodeGpus(len(shown))


def call_failed(args: Sequence[str], answer: Answer) -> str:
    """What went wrong, for a one-line error: `nvidia-smi ARGS` fails (why), or nvidia-smi is not on
    PATH."""
    if answer.failure == NOT_ON_PATH:
        return NOT_ON_PATH
    return f"`nvidia-smi {' '.join(args)}` fails ({answer.failure})"


def _few(paths: Sequence[str]) -> str:
    """Up to three paths, and how many more."""
    return ", ".join(paths[:3]) + (f" and {len(paths) - 3} more" if len(paths) > 3 else "")
