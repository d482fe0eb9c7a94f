"""A node's NVIDIA GPUs as nvidia-smi describes them: model, memory, driver and CUDA version of
each, and the links between them (`nvidia-smi topo -m`), for the system description.

The parse functions are pure (tested on captured outputs); `describe` runs nvidia-smi through
aiperf.config.host.nvidia_smi, which spawns nothing where it is not on PATH, so a node without GPUs
spawns nothing. CUDA_VISIBLE_DEVICES is not applied here: a node is described with every GPU it has
(how many a run uses is aiperf.config.host.visible_gpus).
"""

from __future__ import annotations

import re
from typing import Any

from aiperf.config.host import nvidia_smi

# Fields nvidia-smi --query-gpu takes (`nvidia-smi --help-query-gpu`); the CUDA version is not
# one of them: the driver prints it in the header of a plain `nvidia-smi`.
QUERY = "name,memory.total,driver_version"
_CUDA_VERSION = re.compile(r"CUDA Version\s*:\s*([0-9]+(?:\.[0-9]+)+)")
_ANSI = re.compile(r"\x1b\[[0-9;]*m")
_DEVICE = re.compile(r"^GPU(\d+)$")
_VERSION = re.compile(r"^[0-9]+(?:\.[0-9]+)*$")
# `nvidia-smi topo -m` legend: NV# is # bonded NVLinks; the others are PCIe paths, from the
# closest (one PCIe switch) to the farthest (across CPU sockets), SOC on older drivers.
PCIE_LINKS = ("PIX", "PXB", "PHB", "NODE", "SYS", "SOC")


def parse_gpus(csv: str, cuda_version: str | None = None) -> list[dict[str, Any]]:
    """`--query-gpu=name,memory.total,driver_version --format=csv,noheader,nounits` lines (memory
    in MiB) as accelerators, in nvidia-smi's order; lines without the driver field read too."""
    gpus: list[dict[str, Any]] = []
    for line in csv.splitlines():
        name, memory, driver = _fields(line)
        if name:
            gpus.append(
                {
                    "index": len(gpus),
                    "model": name,
                    # "[N/A]" on some boards
                    "memory_bytes": int(float(memory)) * 2**20 if _VERSION.match(memory) else None,
                    "driver_version": driver,
                    "cuda_version": cuda_version,
                }
            )
    return gpus


def _fields(line: str) -> tuple[str, str, str | None]:
    """Name, memory and driver of one query line. A driver version always has a dot and a memory
    size never does, so a name with a comma in it is told apart from three fields."""
    parts = [part.strip() for part in line.rsplit(",", 2)]
    if len(parts) == 3 and "." in parts[2] and _VERSION.match(parts[2]):
        return parts[0], parts[1], parts[2]
    name, _, memory = line.rpartition(",")
    return name.strip(), memory.strip(), None


def parse_cuda_version(text: str) -> str | None:
    """The CUDA version the driver supports, from `nvidia-smi`'s header ("CUDA Version: 12.4")
    or `nvidia-smi -q` ("CUDA Version : 12.4")."""
    found = _CUDA_VERSION.search(text)
    return found.group(1) if found else None


def parse_topology(matrix: str) -> list[dict[str, Any]]:
    """`nvidia-smi topo -m` as one entry per pair of GPUs, {"a": 0, "b": 1, "link": "NV18"}, a < b.
    NIC rows and columns, the CPU and NUMA affinity columns and the legend are left out."""
    lines = [_ANSI.sub("", line) for line in matrix.splitlines()]
    # The first line that starts with GPU0 is the header naming the columns; row GPU0 follows it.
    start = next((i for i, line in enumerate(lines) if line.split()[:1] == ["GPU0"]), None)
    if start is None:
        return []
    columns: list[int | None] = []
    for name in lines[start].split():
        if name == "CPU":  # "CPU Affinity": the device columns have ended
            break
        device = _DEVICE.match(name)
        columns.append(int(device.group(1)) if device else None)
    pairs = []
    for line in lines[start + 1 :]:
        cells = line.split()
        row = _DEVICE.match(cells[0]) if cells else None
        if row is None:
            continue
        a = int(row.group(1))
        for b, link in zip(columns, cells[1 : 1 + len(columns)], strict=False):
            if b is not None and b > a:
                pairs.append({"a": a, "b": b, "link": link})
    return pairs


def summarise_links(pairs: list[dict[str, Any]]) -> str | None:
    """The links between a node's GPUs in a few words: "NVLink (NV18)", "PCIe (PHB)", or both
    kinds where some pairs have NVLink and some do not; None with fewer than two GPUs."""
    links = sorted({p["link"] for p in pairs}, key=lambda link: (len(link), link))
    if not links:
        return None
    nvlink = [link for link in links if link.startswith("NV")]
    pcie = [link for link in links if link in PCIE_LINKS]
    other = [link for link in links if link not in nvlink and link not in pcie]
    parts = [f"NVLink ({', '.join(nvlink)})"] if nvlink else []
    parts += [f"PCIe ({', '.join(sorted(pcie, key=PCIE_LINKS.index))})"] if pcie else []
    return "; ".join(parts + other)


def describe() -> dict[str, Any]:
    """This node's GPUs, their driver and CUDA versions and the links between them (empty where
    nvidia-smi is missing or fails)."""
    listed = nvidia_smi(f"--query-gpu={QUERY}", "--format=csv,noheader,nounits")
    gpus = parse_gpus(listed or "")
    if not gpus:
        return {"gpus": [], "links": [], "interconnect": None}
    cuda = parse_cuda_version(nvidia_smi() or "")
    for gpu in gpus:
        gpu["cuda_version"] = cuda
    links = parse_topology(nvidia_smi("topo", "-m") or "") if len(gpus) > 1 else []
    return {"gpus": gpus, "links": links, "interconnect": summarise_links(links)}
