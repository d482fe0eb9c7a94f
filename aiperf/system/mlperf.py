"""The system description in MLPerf's form: the file MLCommons' system-description checker reads.

MLPerf's checker (mlperf_logging.system_desc_checker) requires REQUIRED_FIELDS, and MLPerf's
published results give every value as a string ("1", "2.60 GHz", "N/A"). `mlperf_description`
makes that form from two sources:

- what the run's workers read on their nodes as the run started (aiperf.system.description, stored
  as runs.system_description, with aiperf.system.hostfacts' readings), so a package written later,
  or on another machine, still describes the nodes that ran;
- what only the machine's owner knows (config.SystemConfig: name, submitter, status, cooling and
  notes), taken when the package is written: `aiperf package --submitter/--status` first, then the
  run's config (its site file, profile and --set as the run started), then the site file now.

It is made when the package is written, not recorded at run time, because the owner's facts are
often settled after the run (who submits it, under which status) and never change what ran; the
measured facts it uses were recorded at run time. The stored description keeps aiperf's own shape
(the report, verify and the results list read it), and its fields that MLPerf does not name stay
beside MLPerf's in the package's file (`nodes`, `workers`, `precision`, the CUDA versions, ...).

A node without accelerators says so as MLPerf's results do: accelerators_per_node "0" and "N/A" in
every accelerator field. Facts nothing can read (the CPU sockets' interconnect, the network's
topology, GPU on-chip memories) are "N/A" unless the owner's notes say more.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from aiperf.config import MLPERF_STATUS, SystemConfig, mlperf_status, site_system
from aiperf.errors import UserError
from aiperf.system.description import system_name
from aiperf.system.hostfacts import NA

# mlperf_logging.system_desc_checker's required fields, in its order.
REQUIRED_FIELDS = (
    "submitter",
    "division",
    "status",
    "system_name",
    "number_of_nodes",
    "host_processors_per_node",
    "host_processor_model_name",
    "host_processor_core_count",
    "host_processor_vcpu_count",
    "host_processor_frequency",
    "host_processor_caches",
    "host_processor_interconnect",
    "host_memory_capacity",
    "host_storage_type",
    "host_storage_capacity",
    "host_networking",
    "host_networking_topology",
    "host_memory_configuration",
    "accelerators_per_node",
    "accelerator_model_name",
    "accelerator_host_interconnect",
    "accelerator_frequency",
    "accelerator_on-chip_memories",
    "accelerator_memory_configuration",
    "accelerator_memory_capacity",
    "accelerator_interconnect",
    "accelerator_interconnect_topology",
    "cooling",
    "hw_notes",
    "framework",
    "other_software_stack",
    "operating_system",
    "sw_notes",
)
# A run's status when nobody says: an aiperf run on one's own machine is research, development or
# internal (RDI) until its owner says the system is available.
DEFAULT_STATUS = MLPERF_STATUS["rdi"]
ACCELERATOR_FIELDS = tuple(f for f in REQUIRED_FIELDS if f.startswith("accelerator_"))
_UNKNOWN = {"", "n/a", "none", "unknown", "null"}  # how aiperf's own fields say "not known"


def owner_facts(
    config: Mapping[str, Any] | None,
    *,
    submitter: str | None = None,
    status: str | None = None,
) -> dict[str, str | None]:
    """The owner's facts for a package: the arguments, else the run's config's system section, else
    the site file now; a bad status (or site file) is a UserError naming the choices."""
    stored = (config or {}).get("system") or {}
    site = site_system()
    facts: dict[str, str | None] = {}
    for field in SystemConfig.model_fields:
        value = stored.get(field) if isinstance(stored, Mapping) else None
        facts[field] = None if value is None else str(value)
        if facts[field] is None and site.get(field) is not None:
            facts[field] = str(site[field])
    if submitter is not None:
        facts["submitter"] = submitter
    if status is not None:
        facts["status"] = status
    if facts["status"] is not None:
        try:
            facts["status"] = mlperf_status(facts["status"])
        except ValueError as exc:
            raise UserError(f"--status: {exc}") from None
    return facts


def _text(value: Any) -> str:
    """A value as MLPerf writes it: a string, "N/A" for what aiperf's own fields leave unknown."""
    if value is None or (isinstance(value, str) and value.strip().lower() in _UNKNOWN):
        return NA
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value)


def _interconnect_topology(description: Mapping[str, Any]) -> str:
    """How a node's GPUs are linked, from the pairs `nvidia-smi topo -m` gave: "all-to-all NVLink
    (8 GPUs)" when every pair has NVLink, else the kinds of link between them."""
    nodes = description.get("nodes") or []
    shapes = set()
    for node in nodes:
        links = [link.get("link", "") for link in node.get("accelerator_links") or []]
        gpus = len(node.get("accelerators") or [])
        if gpus < 2 or not links:
            continue
        if all(link.startswith("NV") for link in links):
            shapes.add(f"all-to-all NVLink ({gpus} GPUs)")
        else:
            shapes.add(f"{node.get('accelerator_interconnect') or 'mixed links'} ({gpus} GPUs)")
    return "; ".join(sorted(shapes)) or NA


def mlperf_description(
    description: Mapping[str, Any],
    config: Mapping[str, Any] | None,
    *,
    division: str | None = None,
    submitter: str | None = None,
    status: str | None = None,
) -> dict[str, Any]:
    """MLPerf's system description of a run: every field of REQUIRED_FIELDS as a string, first and
    in MLPerf's order, then aiperf's own fields of `description` that MLPerf does not name."""
    facts = owner_facts(config, submitter=submitter, status=status)
    accelerators = _text(description.get("accelerators_per_node", 0))
    without = accelerators in ("0", NA)
    measured = {
        "submitter": facts["submitter"] or NA,
        "division": division or description.get("division") or "open",
        "status": facts["status"] or DEFAULT_STATUS,
        "system_name": system_name(description, config),
        "host_processor_interconnect": NA,  # between sockets: no kernel interface names it
        "host_networking_topology": NA,  # a fabric's shape is not readable from a node
        "accelerator_on-chip_memories": NA,
        "accelerator_memory_configuration": NA,
        "accelerator_interconnect_topology": _interconnect_topology(description),
        "cooling": facts["cooling"] or NA,
        "hw_notes": facts["hw_notes"] or NA,
        "sw_notes": facts["sw_notes"] or NA,
    }
    mlperf: dict[str, Any] = {}
    for field in REQUIRED_FIELDS:
        value = measured[field] if field in measured else _text(description.get(field))
        if field == "accelerators_per_node":
            value = "0" if without else value
        elif field in ACCELERATOR_FIELDS and without:
            value = NA
        mlperf[field] = value
    return {
        **mlperf,
        **{k: v for k, v in description.items() if k not in mlperf},
    }
