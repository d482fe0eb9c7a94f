"""The energy meters a node has, as the node itself finds them: read on every worker with the rest of
its description (aiperf.system.description.describe_node), so a run records, per node, which meters
its energy could come from and, for each kind it lacks, why.

Three kinds, from the node's whole draw to its parts (the Energy Efficient HPC Working Group's
methodology ranks a measurement by how much of the machine it covers and where in the power path):

- `bmc`: the node at its power supplies, through its baseboard management controller over IPMI
  (aiperf.system.bmc). A BMC is reached over the network with a password, so a node has one only
  where the run is given it (cluster.bmc), and only if it gives a reading as the run starts.
- `nvml`: each NVIDIA GPU's energy counter (`nvmlDeviceGetTotalEnergyConsumption`, Volta and
  later) through nvidia-ml-py, the driver's own Python binding.
- `rapl`: the CPU packages' and DRAM's energy counters, Intel's and AMD Zen's alike, as Linux
  exposes them under /sys/class/powercap. Since Linux 5.10 only root may read them (CVE-2020-8694),
  and a virtual machine usually has none.

Nothing here imports a framework or starts a meter: finding them costs the node milliseconds.
"""

from __future__ import annotations

import socket
from collections.abc import Mapping
from pathlib import Path
from typing import Any

POWERCAP = Path("/sys/class/powercap")
RAPL_PREFIX = "intel-rapl:"  # AMD's RAPL driver registers its zones under the same name
KINDS = ("bmc", "nvml", "rapl")
NO_BMC_GIVEN = "no BMC given to the run"


def describe_meters(
    gpus: int, powercap: Path = POWERCAP, bmc: Mapping[str, Any] | None = None
) -> dict[str, Any]:
    """The node's meters (`meters`: one entry per counter it can read) and, for each kind it has
    none of, why (`absent`: kind -> reason). `gpus`: the NVIDIA GPUs nvidia-smi listed; `bmc`:
    the run's cluster.bmc settings, if given."""
    zones, rapl_absent = rapl_zones(powercap)
    devices, nvml_absent = nvml_devices(gpus)
    node, bmc_absent = bmc_meter(bmc)
    absent = {"bmc": bmc_absent, "nvml": nvml_absent, "rapl": rapl_absent}
    return {
        "meters": node + devices + zones,
        "absent": {kind: why for kind, why in absent.items() if why is not None},
    }


def bmc_meter(settings: Mapping[str, Any] | None) -> tuple[list[dict[str, Any]], str | None]:
    """This node's BMC as a meter, if the run was given one and it gives a power reading now;
    or none and why. "{node}" in the host is this node's hostname."""
    if settings is None:
        return [], NO_BMC_GIVEN + " (cluster.bmc)"
    from aiperf.system.bmc import Bmc, BmcError

    given = {**settings, "host": str(settings["host"]).replace("{node}", socket.gethostname())}
    try:
        watts = Bmc(**given).watts()
    except BmcError as exc:
        return [], f"the BMC at {given['host']} gave no power reading: {exc}"
    return [{"kind": "bmc", **given, "watts_at_start": watts}], None


def rapl_zones(powercap: Path = POWERCAP) -> tuple[list[dict[str, Any]], str | None]:
    """The RAPL zones whose energy counter this process can read, each with its name
    ("package-0", "dram", ...) and the value at which its counter wraps; or none and why."""
    if not powercap.is_dir():
        return [], f"no {powercap} (the kernel exposes no powercap zones here)"
    found = sorted(p for p in powercap.iterdir() if p.name.startswith(RAPL_PREFIX))
    if not found:
        return [], f"no RAPL zone under {powercap}"
    zones, unreadable = [], []
    for zone in found:
        counter = zone / "energy_uj"
        try:
            counter.read_text()
            wraps_at = int((zone / "max_energy_range_uj").read_text())
            name = (zone / "name").read_text().strip()
        except (OSError, ValueError):
            unreadable.append(zone.name)
            continue
        zones.append({"kind": "rapl", "zone": name, "path": str(counter), "wraps_at_uj": wraps_at})
    if zones:
        return zones, None
    return [], (
        f"RAPL zones {', '.join(unreadable)} cannot be read by this user "
        "(root only since Linux 5.10)"
    )


def nvml_devices(gpus: int) -> tuple[list[dict[str, Any]], str | None]:
    """Each NVIDIA GPU whose energy counter the driver serves, through nvidia-ml-py; or none and
    why. Not tried on a node whose nvidia-smi listed no GPU."""
    if gpus == 0:
        return [], "no NVIDIA GPU"
    try:
        import pynvml  # nvidia-ml-py
    except ImportError:
        return [], "nvidia-ml-py is not installed (pip install nvidia-ml-py)"
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError as exc:
        return [], f"NVML did not start: {exc}"
    try:
        devices, refused = [], []
        for index in range(pynvml.nvmlDeviceGetCount()):
            handle = pynvml.nvmlDeviceGetHandleByIndex(index)
            try:
                pynvml.nvmlDeviceGetTotalEnergyConsumption(handle)
            except pynvml.NVMLError as exc:
                refused.append(f"GPU {index}: {exc}")
                continue
            devices.append({"kind": "nvml", "gpu": index, "model": _text(pynvml, handle)})
    finally:
        pynvml.nvmlShutdown()
    if devices:
        return devices, None
    return [], f"no GPU serves its energy counter ({'; '.join(refused)})"


def _text(pynvml: Any, handle: Any) -> str:
    name = pynvml.nvmlDeviceGetName(handle)
    return name.decode() if isinstance(name, bytes) else str(name)
