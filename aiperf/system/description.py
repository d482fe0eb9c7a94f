"""The system description: the compute nodes as they describe themselves, in MLPerf's field style.

The fingerprint (aiperf.system.fingerprint) is the submitting host, where the flow runs; the work runs on the
workers, which on a job queue are other machines. So `describe_node` runs on every Dask worker once
the workers are up (`collect`: client.run), and `describe_system` groups what they say by host into
nodes: per node the CPU model, sockets, cores, memory, accelerators with model, count, memory,
driver and CUDA version and the links between them (aiperf.system.nvidia_gpus), the network
interconnect where it can be read, the OS, Python, framework versions and Keras backend, the
energy meters it has (aiperf.system.meters), and the batch job each worker is. Stored with the
run (runs.system_description), written as system_description.json in the run's folder, and shown
in the report.

Nothing here imports a framework: versions are read from package metadata, accelerators from
nvidia-smi, so describing a node costs milliseconds.
"""

from __future__ import annotations

import os
import platform
import re
import socket
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import psutil

from aiperf.cluster.broadcast import on_every_worker
from aiperf.system import hostfacts, meters, nvidia_gpus, power
from aiperf.system.fingerprint import cpu_model, keras_backend, package_version

FILE_NAME = "system_description.json"
FRAMEWORKS = ("keras", "tensorflow", "jax", "torch", "numpy", "keras-tuner", "dask", "distributed")
# Where a job queue tells a process which job and node it runs in.
JOB_VARIABLES = {
    "slurm": ("SLURM_JOB_ID", "SLURMD_NODENAME"),
    "pbs": ("PBS_JOBID", "PBS_NODENUM"),
    "lsf": ("LSB_JOBID", "LSB_HOSTS"),
    "sge": ("JOB_ID", "HOSTNAME"),
}


# The facts aiperf.system.hostfacts reads on each node, summarised over the nodes like the others.
HOSTFACTS = (
    "host_processor_frequency",
    "host_processor_caches",
    "host_memory_configuration",
    "host_storage_type",
    "host_storage_capacity",
    "accelerator_frequency",
    "accelerator_host_interconnect",
)


def _gb(size: int | float) -> str:
    return f"{size / 2**30:.0f} GB" if size >= 2**30 else f"{size / 2**20:.0f} MB"


def _sockets() -> int:
    """Physical CPU packages, from /proc/cpuinfo's physical ids (1 where it does not say)."""
    try:
        with open("/proc/cpuinfo") as handle:
            ids = {
                line.split(":", 1)[1].strip() for line in handle if line.startswith("physical id")
            }
    except OSError:
        ids = set()
    return max(1, len(ids))


def _read(path: Path) -> str | None:
    try:
        return path.read_text().strip()
    except OSError:
        return None


def _interconnect() -> list[dict[str, Any]]:
    """InfiniBand (or RoCE) ports from /sys/class/infiniband, else the up, non-loopback network
    interfaces with the speed the kernel reports."""
    links: list[dict[str, Any]] = []
    ib = Path("/sys/class/infiniband")
    if ib.is_dir():
        for port in sorted(ib.glob("*/ports/*")):
            links.append(
                {
                    "kind": _read(port / "link_layer") or "InfiniBand",
                    "device": port.parent.parent.name,
                    "port": port.name,
                    "rate": _read(port / "rate"),
                    "state": _read(port / "state"),
                }
            )
    if links:
        return links
    try:
        stats = psutil.net_if_stats()
    except OSError:
        return []
    for name, stat in sorted(stats.items()):
        if stat.isup and name != "lo" and not name.startswith(("docker", "veth", "br-", "virbr")):
            links.append(
                {
                    "kind": "Ethernet"
                    if _read(Path(f"/sys/class/net/{name}/type")) in ("1", None)
                    else "other",
                    "device": name,
                    "speed_mbps": stat.speed or None,
                    "mtu": stat.mtu,
                }
            )
    return links


def _operating_system() -> str:
    release = Path("/etc/os-release")
    pretty = None
    if release.is_file():
        for line in release.read_text().splitlines():
            if line.startswith("PRETTY_NAME="):
                pretty = line.split("=", 1)[1].strip().strip('"')
    return (
        f"{pretty} ({platform.system()} {platform.release()})" if pretty else platform.platform()
    )


def _job() -> dict[str, str] | None:
    """The batch job this process runs in, if any: its scheduler, id and node name."""
    for scheduler, (job, node) in JOB_VARIABLES.items():
        if scheduler == "sge" and "SGE_ROOT" not in os.environ:
            continue
        if os.environ.get(job):
            return {
                "scheduler": scheduler,
                "job_id": os.environ[job],
                "node": os.environ.get(node) or socket.gethostname(),
            }
    return None


def describe_node(
    dask_worker: Any = None, folder: str | None = None, bmc: dict[str, Any] | None = None
) -> dict[str, Any]:
    """This machine, as the process that runs on it sees it (run on every worker by `collect`).
    `dask_worker` (Client.run passes it): the worker, named as its trials record their worker, so
    verify can find every trial's worker in the description (aiperf.results.physical). `folder`:
    the run's out folder, whose storage is described (the working folder when not given); `bmc`:
    the run's cluster.bmc settings, whose reading says whether the node has that meter. The
    facts only the kernel and driver of each node can give (CPU frequency and caches, memory
    fitting, storage, GPU clocks and host links: aiperf.system.hostfacts) are read here, on the
    node, as the run starts, so a package written later on another machine still says them."""
    memory = int(psutil.virtual_memory().total)
    logical = psutil.cpu_count(logical=True) or os.cpu_count() or 1
    physical, sockets = psutil.cpu_count(logical=False) or logical, _sockets()
    found = nvidia_gpus.describe()
    gpus = found["gpus"]
    gpu_facts = hostfacts.gpu_facts() if gpus else []
    storage_type, storage_capacity = hostfacts.storage(folder or os.getcwd())
    return {
        "hostname": socket.gethostname(),
        "host_processor_model_name": cpu_model(),
        "host_processors_per_node": sockets,
        "host_processor_core_count": max(1, physical // sockets),  # per socket, as MLPerf counts
        "host_processor_vcpu_count": logical,
        "host_processor_frequency": hostfacts.cpu_frequency(),
        "host_processor_caches": hostfacts.cpu_caches(),
        "host_cores_total": physical,
        "host_cores_usable": len(os.sched_getaffinity(0))
        if hasattr(os, "sched_getaffinity")
        else logical,
        "host_memory_capacity": _gb(memory),
        "host_memory_bytes": memory,
        "host_memory_configuration": hostfacts.memory_configuration(),
        "host_storage_type": storage_type,
        "host_storage_capacity": storage_capacity,
        "accelerators_per_node": len(gpus),
        "accelerator_model_name": ", ".join(sorted({g["model"] for g in gpus})) or "none",
        "accelerator_memory_capacity": ", ".join(
            sorted({_gb(g["memory_bytes"]) for g in gpus if g["memory_bytes"]})
        )
        or "n/a",
        "accelerators": gpus,
        "accelerator_interconnect": found["interconnect"] or "n/a",
        "accelerator_frequency": hostfacts.accelerator_frequency(gpu_facts),
        "accelerator_host_interconnect": hostfacts.accelerator_host_interconnect(gpu_facts),
        "accelerator_links": found["links"],
        "cuda_driver_version": _joined(g["driver_version"] for g in gpus),
        "cuda_version": _joined(g["cuda_version"] for g in gpus),
        "host_networking": _interconnect(),
        "operating_system": _operating_system(),
        "python_version": platform.python_version(),
        "framework_versions": {
            name: v for name in FRAMEWORKS if (v := package_version(name)) is not None
        },
        "keras_backend": keras_backend(),
        "energy_meters": meters.describe_meters(len(gpus), power.powercap(), bmc),
        "job": _job(),
        "worker": _worker_name(dask_worker),
    }


def _worker_name(dask_worker: Any) -> str | None:
    """The worker's name as its trials record it (aiperf.cluster.environment.worker_label)."""
    if dask_worker is None:
        return None
    from aiperf.cluster.environment import worker_label

    return worker_label(str(dask_worker.name))


def _joined(values: Iterable[str | None]) -> str:
    """A node's distinct values of one accelerator field, "n/a" where none says."""
    return ", ".join(sorted({v for v in values if v})) or "n/a"


def collect(
    client: Any, folder: str | None = None, bmc: dict[str, Any] | None = None
) -> dict[str, dict[str, Any]]:
    """Every worker's description of its node: worker address -> describe_node(); `folder`: the
    run's out folder, whose storage each node describes; `bmc`: the run's cluster.bmc settings."""
    return on_every_worker(client, describe_node, folder=folder, bmc=bmc)


def _summary(values: list[Any]) -> Any:
    """One value when the nodes agree, else every distinct one joined."""
    distinct = list(dict.fromkeys(str(v) for v in values))
    return values[0] if len(distinct) == 1 else "; ".join(distinct)


def describe_system(
    by_worker: Mapping[str, Mapping[str, Any]],
    *,
    division: str | None = None,
    precision: str = "float32",
) -> dict[str, Any]:
    """The system description: MLPerf's top-level fields (one value when the nodes agree) and one
    entry per node with its own, its workers and its jobs."""
    nodes = _nodes(by_worker)
    listed = list(nodes.values())
    if not listed:
        return {"number_of_nodes": 0, "nodes": []}
    backend = _summary([n["keras_backend"] for n in listed])
    versions = listed[0]["framework_versions"]
    framework = f"Keras {versions.get('keras', '?')} ({backend}" + (
        f" {versions[backend]})" if isinstance(backend, str) and backend in versions else ")"
    )
    return {
        "system_name": ", ".join(nodes),
        "division": division,
        "number_of_nodes": len(listed),
        **_host_fields(listed),
        **_accelerator_fields(listed),
        "host_networking": _summary(
            [", ".join(_link(link) for link in n["host_networking"]) or "unknown" for n in listed]
        ),
        "operating_system": _summary([n["operating_system"] for n in listed]),
        "python_version": _summary([n["python_version"] for n in listed]),
        "framework": framework,
        "keras_backend": backend,
        "other_software_stack": ", ".join(f"{k} {v}" for k, v in versions.items()),
        "precision": precision,
        "workers": sum(len(n["workers"]) for n in listed),
        "nodes": listed,
    }


def _nodes(by_worker: Mapping[str, Mapping[str, Any]]) -> dict[str, dict[str, Any]]:
    """The workers' descriptions gathered per node (by hostname): the node's own fields, then its
    workers' addresses and names and the jobs they run in."""
    nodes: dict[str, dict[str, Any]] = {}
    for worker, node in sorted(by_worker.items()):
        entry = nodes.setdefault(
            node["hostname"],
            {
                **{k: v for k, v in node.items() if k not in ("job", "worker")},
                "workers": [],
                "worker_names": [],  # as the trials name them
                "jobs": [],
            },
        )
        entry["workers"].append(worker)
        if node.get("worker"):
            entry["worker_names"].append(node["worker"])
        job = node.get("job")
        if job and job not in entry["jobs"]:
            entry["jobs"].append(job)
    return nodes


def _host_fields(listed: list[dict[str, Any]]) -> dict[str, Any]:
    """MLPerf's host processor and memory fields, then the host facts aiperf adds (HOSTFACTS)."""
    return {
        "host_processors_per_node": _summary([n["host_processors_per_node"] for n in listed]),
        "host_processor_model_name": _summary([n["host_processor_model_name"] for n in listed]),
        "host_processor_core_count": _summary([n["host_processor_core_count"] for n in listed]),
        "host_processor_vcpu_count": _summary([n["host_processor_vcpu_count"] for n in listed]),
        "host_memory_capacity": _summary([n["host_memory_capacity"] for n in listed]),
        **{field: _summary([n.get(field, hostfacts.NA) for n in listed]) for field in HOSTFACTS},
    }


def _accelerator_fields(listed: list[dict[str, Any]]) -> dict[str, Any]:
    """MLPerf's accelerator fields, and the CUDA driver and toolkit ("n/a" where a node has none)."""
    return {
        "accelerators_per_node": _summary([n["accelerators_per_node"] for n in listed]),
        "accelerator_model_name": _summary([n["accelerator_model_name"] for n in listed]),
        "accelerator_memory_capacity": _summary(
            [n["accelerator_memory_capacity"] for n in listed]
        ),
        "accelerator_interconnect": _summary(
            [n.get("accelerator_interconnect", "n/a") for n in listed]
        ),
        "cuda_driver_version": _summary([n.get("cuda_driver_version", "n/a") for n in listed]),
        "cuda_version": _summary([n.get("cuda_version", "n/a") for n in listed]),
    }


def system_name(description: Mapping[str, Any] | None, config: Any = None) -> str:
    """The name a result shows its machine by: the user's (the config's system.name, from the site
    file, a profile or --set) when set, else its nodes' hostnames: "node1", "node1+node2" (up to
    three), "node1..node8 (8 nodes)" beyond. `config`: the run's config as stored (a mapping) or a
    BenchmarkConfig. A run recorded before nodes were described falls back to the description's own
    system_name, then to "unknown system"."""
    if config is not None and not isinstance(config, Mapping):
        config = config.model_dump(mode="json")
    system = (config or {}).get("system") or {}
    if isinstance(system, Mapping) and system.get("name"):
        return str(system["name"])
    nodes = (description or {}).get("nodes") or []
    hosts = sorted(
        {str(n["hostname"]) for n in nodes if isinstance(n, Mapping) and n.get("hostname")},
        key=_natural,
    )
    if not hosts:
        return str((description or {}).get("system_name") or "unknown system")
    if len(hosts) <= 3:
        return "+".join(hosts)
    return f"{hosts[0]}..{hosts[-1]} ({len(hosts)} nodes)"


def _natural(name: str) -> list[Any]:
    """node2 before node10: digits compare as numbers."""
    return [
        (0, int(part), "") if part.isdigit() else (1, 0, part) for part in re.split(r"(\d+)", name)
    ]


def _link(link: Mapping[str, Any]) -> str:
    if "rate" in link:
        return f"{link['kind']} {link['device']}/{link['port']} {link.get('rate') or ''}".strip()
    speed = link.get("speed_mbps")
    return f"{link['kind']} {link['device']}" + (f" {speed} Mb/s" if speed else "")
