"""What the kernel and the driver say of a node's hardware, in the words MLPerf's system descriptions
use: the CPU's frequency and caches, how its memory is fitted, what the run's folder is stored on,
and each GPU's clock and link to its host.

Each reader takes `root` (the file system the kernel's /sys and /proc are read under, "/" on a node;
a folder of sample files in tests) and says "N/A" where nothing can be read (a VM without cpufreq, a
container without SMBIOS tables): MLPerf's word for a fact not known, never a guess. Nothing here
needs root privileges or spawns a program, but `gpu_facts`, which runs nvidia-smi only where it is
on PATH.
"""

from __future__ import annotations

import os
import re
import shutil
import struct
from collections import Counter
from pathlib import Path
from typing import Any

from aiperf.config.host import nvidia_smi

NA = "N/A"  # MLPerf's published results' word for a fact not known
ROOT = Path("/")
CPU0 = "sys/devices/system/cpu/cpu0"
CPUS = "sys/devices/system/cpu"
SMBIOS_MEMORY_DEVICES = "sys/firmware/dmi/entries"  # 17-*/raw: SMBIOS type 17, one per slot
NUMA_NODES = "sys/devices/system/node"
# SMBIOS 3.x, type 17 "Memory Type" byte -> its name (DSP0134 table 76), the kinds a server fits.
MEMORY_TYPES = {
    0x12: "DDR",
    0x13: "DDR2",
    0x18: "DDR3",
    0x1A: "DDR4",
    0x1B: "LPDDR",
    0x1C: "LPDDR2",
    0x1D: "LPDDR3",
    0x1E: "LPDDR4",
    0x20: "HBM",
    0x21: "HBM2",
    0x22: "DDR5",
    0x23: "LPDDR5",
    0x24: "HBM3",
}
# File systems whose files are on another machine, by the name /proc/self/mountinfo gives them.
NETWORK_FILE_SYSTEMS = {
    "nfs": "NFS",
    "nfs4": "NFS",
    "lustre": "Lustre",
    "gpfs": "GPFS",
    "beegfs": "BeeGFS",
    "cifs": "SMB",
    "smb3": "SMB",
    "cephfs": "CephFS",
    "ceph": "CephFS",
    "fuse.glusterfs": "GlusterFS",
    "wekafs": "WekaFS",
}
GPU_QUERY = "clocks.max.sm,pcie.link.gen.max,pcie.link.width.max"
_AT_GHZ = re.compile(r"@\s*([0-9.]+)\s*GHz", re.IGNORECASE)


def _text(path: Path) -> str | None:
    try:
        return path.read_text(encoding="utf-8", errors="replace").strip()
    except OSError:
        return None


def _cpuinfo_field(cpuinfo: str, name: str) -> str | None:
    """The first `name : value` of /proc/cpuinfo."""
    for line in cpuinfo.splitlines():
        key, sep, value = line.partition(":")
        if sep and key.strip() == name:
            return value.strip()
    return None


def cpu_frequency(root: Path = ROOT) -> str:
    """The CPU's highest frequency, "3.70 GHz": cpufreq's cpuinfo_max_freq (kHz) where the kernel
    has cpufreq; else the frequency in the model's name ("... @ 2.10GHz"); else the clock
    /proc/cpuinfo reports now ("cpu MHz", a VM's only figure); else N/A."""
    khz = _text(root / CPU0 / "cpufreq" / "cpuinfo_max_freq")
    if khz and khz.isdigit() and int(khz) > 0:
        return f"{int(khz) / 1e6:.2f} GHz"
    cpuinfo = _text(root / "proc" / "cpuinfo") or ""
    named = _AT_GHZ.search(_cpuinfo_field(cpuinfo, "model name") or "")
    if named:
        return f"{float(named.group(1)):.2f} GHz"
    mhz = _cpuinfo_field(cpuinfo, "cpu MHz")
    try:
        return f"{float(mhz or '') / 1000:.2f} GHz"
    except ValueError:
        return NA


def _size(text: str) -> int | None:
    """A cache size as sysfs or /proc/cpuinfo writes it ("48K", "1024 KB", "32M") in bytes."""
    found = re.fullmatch(r"\s*([0-9]+)\s*([KMG]?)B?\s*", text or "", re.IGNORECASE)
    if not found:
        return None
    return int(found.group(1)) * 1024 ** " KMG".index((found.group(2) or " ").upper())


def binary_size(size: int) -> str:
    """Bytes in whole KiB, MiB or GiB where they divide evenly ("48 KiB", "1 MiB", "1.5 MiB")."""
    for unit, scale in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if size >= scale:
            return f"{size / scale:g} {unit}"
    return f"{size} B"


def cpu_caches(root: Path = ROOT) -> str:
    """Each cache level's size and how many there are, "L1d 48 KiB x 8, L1i 32 KiB x 8, L2 1 MiB
    x 8, L3 32 MiB x 1", from every CPU's /sys/devices/system/cpu/cpu*/cache/index*/ (a cache shared
    by several CPUs counted once); else /proc/cpuinfo's "cache size" (one figure, per core); else
    N/A."""
    levels: dict[str, set[tuple[int, str]]] = {}
    for index in sorted((root / CPUS).glob("cpu[0-9]*/cache/index[0-9]*")):
        level, kind = _text(index / "level"), _text(index / "type")
        size = _size(_text(index / "size") or "")
        if not level or not kind or size is None:
            continue
        name = f"L{level}" + {"Data": "d", "Instruction": "i"}.get(kind, "")
        shared = _text(index / "shared_cpu_list") or str(index.parent.parent.name)
        levels.setdefault(name, set()).add((size, shared))
    if levels:
        parts = []
        for name in sorted(levels, key=lambda n: (n[:2], n[2:])):
            sizes = Counter(size for size, _ in levels[name])
            parts.append(
                ", ".join(
                    f"{name} {binary_size(s)} x {count}" for s, count in sorted(sizes.items())
                )
            )
        return ", ".join(parts)
    size = _size(_cpuinfo_field(_text(root / "proc" / "cpuinfo") or "", "cache size") or "")
    return f"{binary_size(size)} per core (/proc/cpuinfo)" if size else NA


def memory_devices(raw_entries: list[bytes]) -> list[dict[str, Any]]:
    """The fitted DIMMs of SMBIOS type-17 structures (sysfs' dmi/entries/17-*/raw): size in bytes,
    kind (DDR5 ...) and rated speed in MT/s. An empty slot (size 0) or an unknown size is left out."""
    dimms = []
    for raw in raw_entries:
        if len(raw) < 0x15 or raw[0] != 17:
            continue
        length = raw[1]
        (size,) = struct.unpack_from("<H", raw, 0x0C)
        if size in (0, 0xFFFF):
            continue
        if size == 0x7FFF and length >= 0x20:
            (extended,) = struct.unpack_from("<I", raw, 0x1C)
            size_bytes = (extended & 0x7FFFFFFF) * 2**20
        else:
            size_bytes = (size & 0x7FFF) * (2**10 if size & 0x8000 else 2**20)
        speed = struct.unpack_from("<H", raw, 0x15)[0] if length >= 0x17 else 0
        dimms.append(
            {
                "bytes": size_bytes,
                "kind": MEMORY_TYPES.get(raw[0x12]),
                "speed_mts": speed if speed not in (0, 0xFFFF) else None,
            }
        )
    return dimms


def _gb(size: int) -> str:
    return f"{size / 2**30:.0f} GB" if size >= 2**30 else f"{size / 2**20:.0f} MB"


def memory_configuration(root: Path = ROOT) -> str:
    """How the memory is fitted, as MLPerf writes it: "16x 64 GB DDR5 4800 MT/s" from the SMBIOS
    tables (readable where the firmware gives them to the kernel, not in most VMs); else the number
    of NUMA nodes, saying the DIMMs could not be read; else N/A."""
    raws = []
    for entry in sorted((root / SMBIOS_MEMORY_DEVICES).glob("17-*/raw")):
        try:
            raws.append(entry.read_bytes())
        except OSError:
            continue
    dimms = Counter(
        (d["bytes"], d["kind"] or "", d["speed_mts"] or 0) for d in memory_devices(raws)
    )
    if dimms:
        return ", ".join(
            f"{count}x {_gb(size)}"
            + (f" {kind}" if kind else "")
            + (f" {speed} MT/s" if speed else "")
            for (size, kind, speed), count in sorted(dimms.items(), reverse=True)
        )
    numa = len(list((root / NUMA_NODES).glob("node[0-9]*")))
    return f"{numa} NUMA node{'s' if numa > 1 else ''} (DIMMs not readable here)" if numa else NA


def _mount(path: Path, mountinfo: str) -> tuple[str, str, str] | None:
    """The mount holding `path`: (its device's major:minor, its file system type, its source),
    from /proc/self/mountinfo's lines (the longest mount point that contains the path)."""
    best: tuple[int, tuple[str, str, str]] | None = None
    where = str(path)
    for line in mountinfo.splitlines():
        fields = line.split()
        if " - " not in line or len(fields) < 5:
            continue
        point = fields[4].replace("\\040", " ")
        after = line.split(" - ", 1)[1].split()
        inside = where == point or where.startswith(point.rstrip("/") + "/")
        if inside and len(after) >= 2 and (best is None or len(point) > best[0]):
            best = (len(point), (fields[2], after[0], after[1]))
    return best[1] if best else None


def storage_type(fstype: str, device: str | None, rotational: str | None) -> str:
    """MLPerf's words for what a file system is on: a network file system by name ("Lustre
    (network)"), memory ("RAM (tmpfs)"), or a block device: "NVMe SSD", "SSD", "HDD", a VM's
    "virtual disk" (virtio and Xen disks report rotational whatever backs them)."""
    if fstype in NETWORK_FILE_SYSTEMS:
        return f"{NETWORK_FILE_SYSTEMS[fstype]} (network)"
    if fstype in ("tmpfs", "ramfs"):
        return "RAM (tmpfs)"
    if device is None:
        return fstype or NA  # overlay, zfs pool, ...: named by its file system
    if device.startswith("nvme"):
        return "NVMe SSD"
    if device.startswith(("vd", "xvd")):
        return "virtual disk"
    if rotational == "0":
        return "SSD"
    if rotational == "1":
        return "HDD"
    return NA


def _block_device(root: Path, numbers: str) -> tuple[str | None, str | None]:
    """The whole disk behind a device's major:minor and its rotational flag (a partition's parent)."""
    link = root / "sys" / "dev" / "block" / numbers
    try:
        real = link.resolve(strict=True)
    except OSError:
        return None, None
    disk = real if (real / "queue").is_dir() else real.parent
    return disk.name, _text(disk / "queue" / "rotational")


def storage(folder: str | os.PathLike[str], root: Path = ROOT) -> tuple[str, str]:
    """What `folder` (the run's out folder; its nearest existing parent while it does not exist) is
    stored on, and that file system's capacity: ("NVMe SSD", "3.8 TB"); N/A for what cannot be read."""
    path = Path(folder).absolute()
    while not path.exists() and path != path.parent:
        path = path.parent
    try:
        capacity = shutil.disk_usage(path).total
    except OSError:
        capacity = 0
    shown = (
        f"{capacity / 1e12:.1f} TB"
        if capacity >= 1e12
        else (f"{capacity / 1e9:.0f} GB" if capacity else NA)
    )
    mount = _mount(path.resolve(), _text(root / "proc" / "self" / "mountinfo") or "")
    if mount is None:
        return NA, shown
    numbers, fstype, _source = mount
    device, rotational = (
        _block_device(root, numbers) if not numbers.startswith("0:") else (None, None)
    )
    return storage_type(fstype, device, rotational), shown


def parse_gpu_facts(csv: str) -> list[dict[str, Any]]:
    """`nvidia-smi --query-gpu=clocks.max.sm,pcie.link.gen.max,pcie.link.width.max --format=csv,
    noheader,nounits` lines: each GPU's highest SM clock (MHz) and its PCIe link ("[N/A]" -> None)."""
    facts = []
    for line in csv.splitlines():
        cells = [cell.strip() for cell in line.split(",")]
        if len(cells) != 3:
            continue
        clock, gen, width = (int(c) if c.isdigit() else None for c in cells)
        facts.append({"max_sm_clock_mhz": clock, "pcie_gen": gen, "pcie_width": width})
    return facts


def gpu_facts() -> list[dict[str, Any]]:
    """This node's GPUs' clocks and host links, in nvidia-smi's order (none without nvidia-smi)."""
    out = nvidia_smi(f"--query-gpu={GPU_QUERY}", "--format=csv,noheader,nounits")
    return [] if out is None else parse_gpu_facts(out)


def accelerator_frequency(facts: list[dict[str, Any]]) -> str:
    """The GPUs' highest SM clock, "1980 MHz" (every distinct one, where they differ)."""
    clocks = sorted({f["max_sm_clock_mhz"] for f in facts if f.get("max_sm_clock_mhz")})
    return ", ".join(f"{c} MHz" for c in clocks) or NA


def accelerator_host_interconnect(facts: list[dict[str, Any]]) -> str:
    """The GPUs' link to their host, "PCIe Gen5 x16" (the link's highest generation and width)."""
    links = sorted(
        {
            f"PCIe Gen{f['pcie_gen']}" + (f" x{f['pcie_width']}" if f.get("pcie_width") else "")
            for f in facts
            if f.get("pcie_gen")
        }
    )
    return ", ".join(links) or NA
