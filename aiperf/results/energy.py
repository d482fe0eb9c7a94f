"""What a run can say about its energy: the joules its nodes drew in the timed window, operations per
joule (= OPS per watt), and the measurement's quality level; or, where it measured none, why.

Each node says which meters it has (aiperf.system.meters, in the system description) and one of
its workers reads them over the window (aiperf.lifecycle.metering: runs.energy_windows). A node's
energy is its best meter's: the whole node at its power supply (a BMC) where it has one, else the
sum of its parts' counters (its GPUs through NVML, its CPU packages and DRAM through RAPL), which
leaves out the rest of the node (fans, disks, network cards, the supplies' losses).

The run's energy is a number only when every node of the run measured every second of the window:
a node without a meter, a meter that stopped answering, a sampling worker that left, each leaves
it None with the reason named, never zero or filled in. The level follows the Energy Efficient HPC
Working Group's methodology, judged by its aspects (docs/rules.md, "Energy"): L1 needs every node
measured at its power input over the whole window; anything less is "below L1", and aiperf never
claims L2 or L3, which need the interconnect and storage measured too.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from aiperf.store import RunRecord
from aiperf.units import si

PARTS = {"rapl": "CPU packages and DRAM (RAPL)", "nvml": "GPUs (NVML)", "bmc": "the node's BMC"}


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
class NodeEnergy:
    """One node's energy over the window: `joules` (None if any part of it is missing, `missing`
    saying why), the meter kinds it came from, its mean and idle power, and its peak: for parts,
    the sum of their peaks, a bound (they need not have coincided)."""

    node: str
    joules: float | None
    kinds: tuple[str, ...]
    mean_w: float | None
    idle_w: float | None
    peak_w: float | None
    missing: str | None

    def line(self) -> str:
        if self.joules is None:
            return f"{self.node}: {self.missing}"
        return (
            f"{self.node}: {si(self.joules, 'J')}, mean {_watts(self.mean_w)}, "
            f"peak {_watts(self.peak_w)}, idle {_watts(self.idle_w)}, from "
            + ", ".join(PARTS.get(k, k) for k in self.kinds)
        )


@dataclass(frozen=True)
class Energy:
    """The run's energy: `joules` in the window over every node, `ops_per_watt` (operations per
    joule), `regulated_per_watt` (the regulated score per mean watt), `level` ("L1" or "below L1");
    each None while the window is not fully metered. `nodes`: each described node's meters (None
    for a run whose nodes were not described); `measured`: each metered node's energy."""

    joules: float | None
    ops_per_watt: float | None
    regulated_per_watt: float | None
    level: str | None
    nodes: tuple[NodeMeters, ...] | None
    measured: tuple[NodeEnergy, ...] = ()

    def line(self) -> str:
        if self.joules is not None and self.ops_per_watt is not None:
            return (
                f"{si(self.joules, 'J')} in the window, {si(self.ops_per_watt, 'OPS/W')}, {self.level} ("
                + " | ".join(n.line() for n in self.measured)
                + ")"
            )
        return "not measured: " + self._why_not()

    def _why_not(self) -> str:
        if self.nodes is None:
            return "the run's nodes were not described"
        if not self.nodes:
            return "the run described no node"
        if not any(n.meters for n in self.nodes):
            return "no node had a meter (" + " | ".join(n.line() for n in self.nodes) + ")"
        unmetered = [n.line() for n in self.nodes if not n.meters]
        incomplete = [n.line() for n in self.measured if n.joules is None]
        if not self.measured:
            found = " | ".join(n.line() for n in self.nodes if n.meters)
            return f"meters found ({found}), but the window was not sampled"
        return " | ".join([*(f"no meter on {u}" for u in unmetered), *incomplete])

    def to_dict(self) -> dict[str, Any]:
        return {
            "measured": self.joules is not None,
            "line": self.line(),
            "regulated_per_watt": self.regulated_per_watt,
            "nodes": None
            if self.nodes is None
            else [
                {"node": n.node, "meters": [dict(m) for m in n.meters], "absent": dict(n.absent)}
                for n in self.nodes
            ],
            "measured_nodes": [
                {
                    "node": n.node,
                    "joules": n.joules,
                    "kinds": list(n.kinds),
                    "mean_w": n.mean_w,
                    "peak_w": n.peak_w,
                    "idle_w": n.idle_w,
                    "missing": n.missing,
                }
                for n in self.measured
            ],
        }


def energy(run: RunRecord) -> Energy:
    """The run's energy, from what its nodes said of their meters and what they measured."""
    nodes = (run.system_description or {}).get("nodes")
    if not isinstance(nodes, list):
        return Energy(None, None, None, None, None)
    described = tuple(_node_meters(n) for n in nodes)
    windows = run.energy_windows
    if any(n.meters for n in described) and len(windows) < len(run.windows):
        unmetered = len(run.windows) - len(windows)
        missing = f"{unmetered} of the window's {len(run.windows)} segments not metered"
        measured = tuple(
            NodeEnergy(n.node, None, (), None, None, None, missing) for n in described if n.meters
        )
        return Energy(None, None, None, None, described, measured)
    measured = tuple(_node_energy(n.node, windows) for n in described if n.meters)
    if not measured or len(measured) < len(described) or any(n.joules is None for n in measured):
        return Energy(None, None, None, None, described, measured)
    joules = sum(n.joules or 0.0 for n in measured)
    score = run.score
    if score is None or joules <= 0:
        return Energy(joules, None, None, None, described, measured)
    mean_w = joules / score.elapsed_s if score.elapsed_s > 0 else None
    return Energy(
        joules,
        score.total_ops / joules,
        score.regulated_score / mean_w if mean_w else None,
        level(measured),
        described,
        measured,
    )


def level(measured: Iterable[NodeEnergy]) -> str:
    """L1 if every node was measured at its power input (a BMC) over the whole window; otherwise
    below L1: parts of nodes (GPUs, CPU packages, DRAM) leave the rest of the node out."""
    return "L1" if all(n.kinds == ("bmc",) for n in measured) else "below L1"


def _node_energy(node: str, windows: Iterable[Mapping[str, Any]]) -> NodeEnergy:
    """A node's energy over every window segment, from its best meter kind in each."""
    joules = seconds = idle = 0.0
    peak: float | None = None
    kinds: set[str] = set()
    segments = [e for w in windows for e in w.get("nodes") or () if e.get("node") == node]
    if not segments:
        return NodeEnergy(node, None, (), None, None, None, "its meters were not sampled")
    for entry in segments:
        if entry.get("missing"):
            return NodeEnergy(node, None, (), None, None, None, str(entry["missing"]))
        chosen = best_meters(entry.get("meters") or [])
        broken = [m for m in chosen if m.get("joules") is None or m.get("stopped")]
        if not chosen or broken:
            why = "; ".join(
                f"{_meter(m)} {m.get('stopped') or 'measured nothing'}" for m in broken
            )
            return NodeEnergy(node, None, (), None, None, None, why or "no meter answered")
        joules += sum(float(m["joules"]) for m in chosen)
        seconds = max(seconds, max(float(m["seconds"] or 0) for m in chosen))
        idle += sum(float(m.get("idle_w") or 0) for m in chosen)
        peaks = [float(m["peak_w"]) for m in chosen if m.get("peak_w") is not None]
        peak = max([*([peak] if peak is not None else []), sum(peaks)]) if peaks else peak
        kinds |= {str(m.get("kind")) for m in chosen}
    mean = joules / seconds if seconds > 0 else None
    return NodeEnergy(node, joules, tuple(sorted(kinds)), mean, idle / len(segments), peak, None)


def best_meters(meters: list[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    """The whole node's meter where it has one, else every part's."""
    node = [m for m in meters if m.get("kind") == "bmc"]
    return node or [m for m in meters if m.get("kind") in ("nvml", "rapl")]


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
    if meter.get("kind") == "bmc":
        return f"BMC {meter.get('host')}"
    return str(meter.get("kind"))


def _watts(value: float | None) -> str:
    return "n/a" if value is None else si(value, "W")
