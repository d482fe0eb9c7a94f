"""What a run can say about its energy: the joules its nodes drew in the timed window, operations per
watt, and the measurement's quality level; or, where it measured none, why, node by node.

Each node says which meters it has (aiperf.system.meters, recorded in the system description as
the run starts). This version reads none over the window, so a run's energy is never a number yet:
it is "not measured", never zero or guessed, with each node's reason, so a result without a meter
says so in `show`, its JSON, the report and the package, and its verdict and score are those of
its speed alone. The keys a script reads (`energy_joules`, `ops_per_watt`, `energy_level`) are
already stable: null until a window is metered.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from aiperf.store import RunRecord


@dataclass(frozen=True)
class NodeMeters:
    """One node's meters (`meters`: the counters it can read) and, per kind it lacks, why."""

    node: str
    meters: tuple[dict[str, Any], ...]
    absent: dict[str, str]

    def line(self) -> str:
        if self.meters:
            return f"{self.node}: " + ", ".join(_meter(m) for m in self.meters)
        reasons = "; ".join(f"{kind}: {why}" for kind, why in sorted(self.absent.items()))
        return f"{self.node}: {reasons}"


@dataclass(frozen=True)
class Energy:
    """The run's energy: `joules` in the window over every node, `ops_per_watt` (operations per
    joule), `level` (the methodology's L1-L3, or "below L1"); each None while nothing was metered.
    `nodes`: each described node's meters; None for a run whose nodes were not described."""

    joules: float | None
    ops_per_watt: float | None
    level: str | None
    nodes: tuple[NodeMeters, ...] | None

    def line(self) -> str:
        if self.nodes is None:
            return "not measured: the run's nodes were not described"
        if not self.nodes:
            return "not measured: the run described no node"
        metered = [n for n in self.nodes if n.meters]
        if not metered:
            return (
                "not measured: no node had a meter ("
                + " | ".join(n.line() for n in self.nodes)
                + ")"
            )
        return (
            "not measured: meters found ("
            + " | ".join(n.line() for n in metered)
            + "), which this version does not read over the window"
        )

    def to_dict(self) -> dict[str, Any]:
        return {
            "measured": self.joules is not None,
            "line": self.line(),
            "nodes": None
            if self.nodes is None
            else [
                {"node": n.node, "meters": [dict(m) for m in n.meters], "absent": dict(n.absent)}
                for n in self.nodes
            ],
        }


def energy(run: RunRecord) -> Energy:
    """The run's energy, from what its nodes said of their meters."""
    nodes = (run.system_description or {}).get("nodes")
    if not isinstance(nodes, list):
        return Energy(None, None, None, None)
    return Energy(None, None, None, tuple(_node_meters(n) for n in nodes))


def _node_meters(node: Mapping[str, Any]) -> NodeMeters:
    name = str(node.get("hostname") or "unknown node")
    found = node.get("energy_meters")
    if not isinstance(found, Mapping):  # described before nodes named their meters
        return NodeMeters(name, (), {"meters": "not recorded by the version that ran it"})
    return NodeMeters(
        name,
        tuple(dict(m) for m in found.get("meters") or ()),
        {str(k): str(v) for k, v in (found.get("absent") or {}).items()},
    )


def _meter(meter: Mapping[str, Any]) -> str:
    if meter.get("kind") == "rapl":
        return f"RAPL {meter.get('zone')}"
    if meter.get("kind") == "nvml":
        return f"GPU {meter.get('gpu')} ({meter.get('model')})"
    return str(meter.get("kind"))
