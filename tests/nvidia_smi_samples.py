"""What nvidia-smi prints on two kinds of GPU node, and a stand-in nvidia-smi that prints it.

No test machine has a GPU: the stand-in is a bash script put first on PATH, answering the calls
aiperf makes (`-L`, the `--query-gpu` line, `topo -m`, and the plain header) from these samples,
or failing as nvidia-smi does where no driver is loaded. It writes every call it gets to
calls.log beside itself, so a test can tell whether it was spawned at all. It uses bash builtins
only, so it also runs on a PATH that holds nothing else.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

QUERY_ARGS = "--query-gpu=name,memory.total,driver_version --format=csv,noheader,nounits"

# A DGX H100: eight H100 SXM on NVSwitch (18 NVLinks each), two NUMA nodes, four NICs.
H100_NODE = {
    "list": "\n".join(
        f"GPU {i}: NVIDIA H100 80GB HBM3 (UUID: GPU-{i}f1c2d3e-4b5a-6978-8a9b-0c1d2e3f4a5{i})"
        for i in range(8)
    ),
    "query": "\n".join("NVIDIA H100 80GB HBM3, 81559, 550.54.15" for _ in range(8)),
    "header": (
        "Tue Jun 11 10:12:03 2024       \n"
        "+-----------------------------------------------------------------------------------------+\n"
        "| NVIDIA-SMI 550.54.15              Driver Version: 550.54.15      CUDA Version: 12.4     |\n"
        "|-----------------------------------------+------------------------+----------------------+\n"
        "| GPU  Name                 Persistence-M | Bus-Id          Disp.A | Volatile Uncorr. ECC |\n"
    ),
    "topo": "\n".join(
        [
            "\t"
            + "\t".join(f"GPU{j}" for j in range(8))
            + "\tNIC0\tNIC1\tNIC2\tNIC3\tCPU Affinity\tNUMA Affinity\tGPU NUMA ID",
            *(
                f"GPU{i}\t"
                + "\t".join(" X " if i == j else "NV18" for j in range(8))
                + ("\tPIX\tPXB\tSYS\tSYS" if i < 4 else "\tSYS\tSYS\tPIX\tPXB")
                + ("\t0-55,112-167\t0\t\tN/A" if i < 4 else "\t56-111,168-223\t1\t\tN/A")
                for i in range(8)
            ),
            "NIC0\tPIX\tPIX\tPXB\tPXB\tSYS\tSYS\tSYS\tSYS\t X \tPXB\tSYS\tSYS",
            "NIC1\tPXB\tPXB\tPIX\tPIX\tSYS\tSYS\tSYS\tSYS\tPXB\t X \tSYS\tSYS",
            "NIC2\tSYS\tSYS\tSYS\tSYS\tPIX\tPIX\tPXB\tPXB\tSYS\tSYS\t X \tPXB",
            "NIC3\tSYS\tSYS\tSYS\tSYS\tPXB\tPXB\tPIX\tPIX\tSYS\tSYS\tPXB\t X ",
            "",
            "Legend:",
            "",
            "  X    = Self",
            "  SYS  = Connection traversing PCIe as well as the SMP interconnect between NUMA nodes (e.g., QPI/UPI)",
            "  NODE = Connection traversing PCIe as well as the interconnect between PCIe Host Bridges"
            " within a NUMA node",
            "  PHB  = Connection traversing PCIe as well as a PCIe Host Bridge (typically the CPU)",
            "  PXB  = Connection traversing multiple PCIe bridges (without traversing the PCIe Host Bridge)",
            "  PIX  = Connection traversing at most a single PCIe bridge",
            "  NV#  = Connection traversing a bonded set of # NVLinks",
            "",
            "NIC Legend:",
            "",
            "  NIC0: mlx5_0",
            "  NIC1: mlx5_1",
            "  NIC2: mlx5_2",
            "  NIC3: mlx5_3",
        ]
    ),
}

# A workstation: two L40S on PCIe, one per CPU socket, no NVLink.
L40S_NODE = {
    "list": (
        "GPU 0: NVIDIA L40S (UUID: GPU-0a1b2c3d-1111-2222-3333-444455556666)\n"
        "GPU 1: NVIDIA L40S (UUID: GPU-9f8e7d6c-aaaa-bbbb-cccc-ddddeeeeffff)"
    ),
    "query": "NVIDIA L40S, 46068, 535.161.08\nNVIDIA L40S, 46068, 535.161.08",
    "header": (
        "+---------------------------------------------------------------------------------------+\n"
        "| NVIDIA-SMI 535.161.08             Driver Version: 535.161.08   CUDA Version: 12.2     |\n"
        "|-----------------------------------------+----------------------+----------------------+\n"
    ),
    "topo": (
        "\tGPU0\tGPU1\tCPU Affinity\tNUMA Affinity\tGPU NUMA ID\n"
        "GPU0\t X \tSYS\t0-31\t0\t\tN/A\n"
        "GPU1\tSYS\t X \t32-63\t1\t\tN/A\n"
        "\n"
        "Legend:\n"
        "\n"
        "  X    = Self\n"
        "  SYS  = Connection traversing PCIe as well as the SMP interconnect between NUMA nodes (e.g., QPI/UPI)\n"
        "  PIX  = Connection traversing at most a single PCIe bridge\n"
        "  NV#  = Connection traversing a bonded set of # NVLinks\n"
    ),
}

NO_DRIVER = (
    "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver. Make sure that "
    "the latest NVIDIA driver is installed and running."
)

_SCRIPT = f"""#!/bin/bash
here="${{0%/*}}"
printf '%s\\n' "$*" >> "$here/calls.log"
if [[ -e "$here/fail" ]]; then printf '%s\\n' "{NO_DRIVER}"; exit 1; fi
case "$*" in
  -L) f=list ;;
  "{QUERY_ARGS}") f=query ;;
  "topo -m") f=topo ;;
  "") f=header ;;
  *) printf 'Invalid combination of input arguments. Please run nvidia-smi -h for help.\\n'; exit 2 ;;
esac
printf '%s\\n' "$(<"$here/$f.txt")"
"""


def stand_in(folder: Path, node: dict[str, str] | None = None, *, fail: bool = False) -> Path:
    """A folder holding an executable `nvidia-smi` that prints `node`'s samples (or fails as
    without a driver); put it on PATH. Returns the folder (its calls.log lists the calls)."""
    folder.mkdir(parents=True, exist_ok=True)
    for name, text in (node or H100_NODE).items():
        (folder / f"{name}.txt").write_text(text)
    if fail:
        (folder / "fail").touch()
    script = folder / "nvidia-smi"
    script.write_text(_SCRIPT)
    script.chmod(0o755)
    return folder


def calls(folder: Path) -> list[str]:
    """The argument lines the stand-in in `folder` was called with."""
    log = folder / "calls.log"
    return log.read_text().splitlines() if log.exists() else []


def put_first_on_path(monkeypatch: pytest.MonkeyPatch, folder: Path) -> None:
    monkeypatch.setenv("PATH", f"{folder}{os.pathsep}{os.environ.get('PATH', os.defpath)}")
