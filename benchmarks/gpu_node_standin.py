"""A stand-in `nvidia-smi`: a bash script that answers the calls aiperf makes as a GPU node's would.

No test machine has a GPU. Put the folder `write(...)` returns first on PATH and aiperf's device
discovery sees the node the samples describe: `-L` (the GPUs and their UUIDs), both `--query-gpu`
field lists aiperf asks for (the system description's `name,memory.total,driver_version` and the
device facts' `uuid,memory.total,compute_cap`), `topo -m` and the plain header. Where a node's
sample lacks an answer the script fails as nvidia-smi does for an unknown field; with `fail` it
fails as without a driver. Every call is written to calls.log beside it, so a test can tell
whether it was spawned at all. It uses bash builtins only, so it runs on a PATH that holds nothing
else.

One source for the tests (tests/nvidia_smi_samples.py re-exports it) and the stand-in 8-GPU node
(benchmarks/gpu_node_standin.sh, which runs `python benchmarks/gpu_node_standin.py FOLDER N`).
Nothing in aiperf/ knows it: it is a machine, not a mode (docs/performance.md, "The GPU node
stand-in").
"""

from __future__ import annotations

import argparse
from pathlib import Path

# The system description's query (aiperf.system.description) and the device facts' (aiperf.train.auto).
QUERY_ARGS = "--query-gpu=name,memory.total,driver_version --format=csv,noheader,nounits"
FACTS_ARGS = "--query-gpu=uuid,memory.total,compute_cap --format=csv,noheader,nounits"

H200_MIB = 143771  # what nvidia-smi prints as an H200's memory.total
DRIVER = "550.54.15"

LEGEND = [
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
]


def _uuid(i: int) -> str:
    return f"GPU-{i}f1c2d3e-4b5a-6978-8a9b-0c1d2e3f4a5{i % 10}"


def _header(driver: str, cuda: str) -> str:
    return (
        "Tue Jun 11 10:12:03 2024       \n"
        "+-----------------------------------------------------------------------------------------+\n"
        f"| NVIDIA-SMI {driver}              Driver Version: {driver}      CUDA Version: {cuda}     |\n"
        "|-----------------------------------------+------------------------+----------------------+\n"
        "| GPU  Name                 Persistence-M | Bus-Id          Disp.A | Volatile Uncorr. ECC |\n"
    )


def nvlink_node(
    name: str, gpus: int, memory_mib: int, capability: str, *, nics: bool = True
) -> dict[str, str]:
    """The samples of an HGX-style node: `gpus` GPUs called `name` on NVSwitch (NV18 between every
    pair), half on each of two NUMA nodes (with four NICs when `nics`), each of `memory_mib` MiB and
    compute capability `capability`."""
    half = max(1, gpus // 2)
    nic_names = [f"NIC{k}" for k in range(4)] if nics else []
    rows = []
    for i in range(gpus):
        links = "\t".join(" X " if i == j else "NV18" for j in range(gpus))
        near = i < half
        nic_cells = ("\tPIX\tPXB\tSYS\tSYS" if near else "\tSYS\tSYS\tPIX\tPXB") if nics else ""
        affinity = "\t0-55,112-167\t0\t\tN/A" if near else "\t56-111,168-223\t1\t\tN/A"
        rows.append(f"GPU{i}\t{links}{nic_cells}{affinity}")
    nic_rows = []
    for k, nic in enumerate(nic_names):
        to_gpus = "\t".join(
            ("PIX" if (i // 2) % 2 == k % 2 else "PXB") if (i < half) == (k < 2) else "SYS"
            for i in range(gpus)
        )
        to_nics = "\t".join(
            " X " if k == m else ("PXB" if (k < 2) == (m < 2) else "SYS") for m in range(4)
        )
        nic_rows.append(f"{nic}\t{to_gpus}\t{to_nics}")
    head = "\t" + "\t".join([*(f"GPU{j}" for j in range(gpus)), *nic_names])
    topo = [
        head + "\tCPU Affinity\tNUMA Affinity\tGPU NUMA ID",
        *rows,
        *nic_rows,
        *LEGEND,
    ]
    if nics:
        topo += ["", "NIC Legend:", "", *(f"  NIC{k}: mlx5_{k}" for k in range(4))]
    return {
        "list": "\n".join(f"GPU {i}: {name} (UUID: {_uuid(i)})" for i in range(gpus)),
        "query": "\n".join(f"{name}, {memory_mib}, {DRIVER}" for _ in range(gpus)),
        "facts": "\n".join(f"{_uuid(i)}, {memory_mib}, {capability}" for i in range(gpus)),
        "header": _header(DRIVER, "12.4"),
        "topo": "\n".join(topo),
    }


def h200_node(gpus: int = 8, memory_mib: int = H200_MIB) -> dict[str, str]:
    """An N x H200 SXM node (compute capability 9.0); a stand-in sets `memory_mib` small so the
    batch sizes it resolves (12, 13 and 14 per GiB) train on a CPU."""
    return nvlink_node("NVIDIA H200", gpus, memory_mib, "9.0")


# A DGX H100: eight H100 SXM on NVSwitch (18 NVLinks each), two NUMA nodes, four NICs.
H100_NODE = nvlink_node("NVIDIA H100 80GB HBM3", 8, 81559, "9.0")

# A workstation: two L40S on PCIe, one per CPU socket, no NVLink.
L40S_NODE = {
    "list": (
        "GPU 0: NVIDIA L40S (UUID: GPU-0a1b2c3d-1111-2222-3333-444455556666)\n"
        "GPU 1: NVIDIA L40S (UUID: GPU-9f8e7d6c-aaaa-bbbb-cccc-ddddeeeeffff)"
    ),
    "query": "NVIDIA L40S, 46068, 535.161.08\nNVIDIA L40S, 46068, 535.161.08",
    "facts": (
        "GPU-0a1b2c3d-1111-2222-3333-444455556666, 46068, 8.9\n"
        "GPU-9f8e7d6c-aaaa-bbbb-cccc-ddddeeeeffff, 46068, 8.9"
    ),
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
  "{FACTS_ARGS}") f=facts ;;
  "topo -m") f=topo ;;
  "") f=header ;;
  *) printf 'Invalid combination of input arguments. Please run nvidia-smi -h for help.\\n'; exit 2 ;;
esac
if [[ ! -e "$here/$f.txt" ]]; then printf 'Field is not a valid field to query.\\n'; exit 2; fi
printf '%s\\n' "$(<"$here/$f.txt")"
"""


def write(folder: Path, node: dict[str, str] | None = None, *, fail: bool = False) -> Path:
    """A folder holding an executable `nvidia-smi` that prints `node`'s samples (the H100 node's by
    default), or fails as without a driver; put it on PATH. Returns the folder (its calls.log lists
    the calls)."""
    folder.mkdir(parents=True, exist_ok=True)
    for name, text in (node or H100_NODE).items():
        (folder / f"{name}.txt").write_text(text)
    if fail:
        (folder / "fail").touch()
    script = folder / "nvidia-smi"
    script.write_text(_SCRIPT)
    script.chmod(0o755)
    return folder


def imagenet_shards(folder: Path, *, classes: int = 10, seed: int = 0) -> Path:
    """TFRecord shards in ImageNet's layout and format (train-*-of-* and validation-*-of-*, JPEGs,
    labels from 1) in `folder`, made once by aiperf's generated-imagenet staging at the stand-in's
    sizes (32 px, 224 + 112 images of `classes` classes, so every validation class is in the
    training shards) with its index files left behind, as a user's ImageNet folder holds them:
    the data a stand-in `--profile imagenet` run reads with `--set data.source=FOLDER`."""
    import shutil

    from aiperf.config import DataConfig
    from aiperf.data.staging import stage

    folder.mkdir(parents=True, exist_ok=True)
    if any(folder.glob("train-*")):
        return folder
    data = DataConfig(
        kind="generated-imagenet",
        image_size=32,
        channels=3,
        classes=classes,
        train_samples=224,
        val_samples=112,
        shard_images=112,
    )
    manifest = stage(data, seed, folder / ".generated")
    for shard in sorted(Path(manifest.path).iterdir()):
        if shard.name.startswith(("train-", "validation-")) and shard.suffix != ".json":
            shutil.copyfile(shard, folder / shard.name)
    shutil.rmtree(folder / ".generated")
    return folder


def main() -> None:
    parser = argparse.ArgumentParser(description="The stand-in GPU node's parts.")
    parts = parser.add_subparsers(dest="part", required=True)
    smi = parts.add_parser("nvidia-smi", help="write a stand-in nvidia-smi of an N x H200 node")
    smi.add_argument("folder", type=Path, help="where to write it (put it first on PATH)")
    smi.add_argument("gpus", type=int, nargs="?", default=8, help="GPUs it lists (default 8)")
    smi.add_argument(
        "--memory-mib", type=int, default=1024, help="each GPU's memory.total (default 1024)"
    )
    shards = parts.add_parser("shards", help="TFRecord shards in ImageNet's layout, once")
    shards.add_argument("folder", type=Path)
    args = parser.parse_args()
    if args.part == "shards":
        print(imagenet_shards(args.folder))
        return
    if args.gpus < 1 or args.memory_mib < 1024:
        parser.error("give at least 1 GPU and at least 1024 MiB (a whole GiB sizes the batch)")
    write(args.folder, h200_node(args.gpus, args.memory_mib))


if __name__ == "__main__":
    main()
