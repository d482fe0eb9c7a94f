"""The system description section of the HTML report: the compute nodes as the workers described
them (aiperf.system.description), stored with the run: the system in MLPerf's fields, then each node."""

from __future__ import annotations

import html
from collections.abc import Sequence
from typing import Any

from aiperf.store import RunRecord

# MLPerf's system fields, in the order the section lists them, with the label shown.
FIELDS = (
    ("number_of_nodes", "nodes"),
    ("host_processor_model_name", "CPU model"),
    ("host_processors_per_node", "CPU sockets per node"),
    ("host_processor_core_count", "cores per socket"),
    ("host_processor_vcpu_count", "logical CPUs per node"),
    ("host_memory_capacity", "memory per node"),
    ("accelerators_per_node", "accelerators per node"),
    ("accelerator_model_name", "accelerator model"),
    ("accelerator_memory_capacity", "accelerator memory"),
    ("host_networking", "interconnect"),
    ("operating_system", "operating system"),
    ("python_version", "Python"),
    ("framework", "framework"),
    ("keras_backend", "Keras backend"),
    ("precision", "precision"),
    ("other_software_stack", "software"),
    ("workers", "workers"),
)


def _esc(value: object) -> str:
    return html.escape(str(value), quote=True)


def _table(headers: Sequence[str], rows: Sequence[Sequence[object]]) -> str:
    head = "".join(f"<th>{_esc(h)}</th>" for h in headers)
    body = "".join("<tr>" + "".join(f"<td>{_esc(c)}</td>" for c in row) + "</tr>" for row in rows)
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def _accelerators(node: dict[str, Any]) -> str:
    count = node.get("accelerators_per_node") or 0
    if not count:
        return "none"
    return f"{count} \u00d7 {node.get('accelerator_model_name', '?')} ({node.get('accelerator_memory_capacity', '?')})"


def _links(node: dict[str, Any]) -> str:
    shown = []
    for link in node.get("host_networking") or []:
        if "rate" in link:
            shown.append(
                f"{link.get('kind')} {link.get('device')}/{link.get('port')} {link.get('rate') or ''}".strip()
            )
        else:
            speed = link.get("speed_mbps")
            shown.append(
                f"{link.get('kind')} {link.get('device')}" + (f" {speed} Mb/s" if speed else "")
            )
    return ", ".join(shown) or "unknown"


def _jobs(node: dict[str, Any]) -> str:
    return (
        ", ".join(
            f"{j.get('scheduler')} job {j.get('job_id')} on {j.get('node')}"
            for j in node.get("jobs") or []
        )
        or "-"
    )


def system_section(run: RunRecord) -> str:
    """The section's HTML; a note for a run recorded without a description."""
    description = run.system_description
    if not description:
        return (
            "<p class=note>No system description was recorded with this run (runs before aiperf asked the "
            "workers to describe their nodes); the submitting host is named above.</p>"
        )
    rows = [
        [label, description[key]]
        for key, label in FIELDS
        if description.get(key) not in (None, "")
    ]
    nodes = description.get("nodes") or []
    per_node = _table(
        [
            "node",
            "CPU",
            "sockets \u00d7 cores (logical)",
            "memory",
            "accelerators",
            "interconnect",
            "OS",
            "workers",
            "jobs",
        ],
        [
            [
                n.get("hostname"),
                n.get("host_processor_model_name"),
                f"{n.get('host_processors_per_node')} \u00d7 {n.get('host_processor_core_count')} "
                f"({n.get('host_processor_vcpu_count')})",
                n.get("host_memory_capacity"),
                _accelerators(n),
                _links(n),
                n.get("operating_system"),
                len(n.get("workers") or []),
                _jobs(n),
            ]
            for n in nodes
        ],
    )
    return (
        f'<div class="system-description">{_table(["field", "value"], rows)}{per_node}</div>'
        "<p class=note>As the compute nodes described themselves when the workers started (not the host "
        "that submitted the run), in MLPerf's system-description fields; the run's folder and its result "
        "package hold it as system_description.json.</p>"
    )
