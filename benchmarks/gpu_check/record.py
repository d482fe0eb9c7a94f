"""The GPU check's figures as they come: one JSON file a part, written when the part ends, and the
summary (gpu_check.json) and table (gpu_check.txt) of everything so far rewritten after each.

Why: a GPU machine is at hand for about 15 minutes, its start included, and the device tool
returns what is under $OUT even when the command runs past its time. A part that ends has its
figures on disk before the next begins, whoever kills the check afterwards.
"""

from __future__ import annotations

import functools
import json
import os
import textwrap
import time
from pathlib import Path
from typing import Any

# The parts, in the order they run: the most valuable figures first. part0-2, feed and fit run in
# the child process that holds the devices (compare.py); part3 is the `aiperf run` (run.py).
PARTS = ("part0", "part1", "feed", "fit", "part2", "part3")
# The node's energy meters (aiperf.system.meters), e.g. whether each GPU's driver serves its energy
# counter through NVML; part 3's run reads them over its window and its line says what they measured.
ENERGY = "the meters part 3's run reads over its window"
EXPECTED_GPU = "H200"  # the check is sized for one NVIDIA H200 (141 GB); docs/performance.md
SUMMARY, TABLE = "gpu_check.json", "gpu_check.txt"
RUN_DATA_WHY = "not the profile's TFRecord shards: decoding them needs TensorFlow"


class Record:
    """The check's folder: `save` a part's figures as the part ends."""

    def __init__(self, folder: Path, settings: dict[str, Any], began: float) -> None:
        self.folder, self.settings, self.began = Path(folder), settings, began
        self.folder.mkdir(parents=True, exist_ok=True)

    def save(self, name: str, figures: dict[str, Any]) -> dict[str, Any]:
        """Write part `name`'s figures (with the check's seconds so far), then the table."""
        figures = {**figures, "at_s": round(time.time() - self.began, 1)}
        _write(self.folder / f"{name}.json", json.dumps(figures, indent=2, default=str) + "\n")
        self.write()
        return figures

    def parts(self) -> dict[str, dict[str, Any]]:
        """The parts saved so far, in PARTS' order."""
        found = {}
        for name in PARTS:
            path = self.folder / f"{name}.json"
            if path.is_file():
                found[name] = json.loads(path.read_text())
        return found

    def summary(self, stopped: str | None = None) -> dict[str, Any]:
        return {
            "settings": self.settings,
            "parts": self.parts(),
            "energy": node_meters(),
            "stopped": stopped,
            "total_s": time.time() - self.began,
        }

    def write(self, stopped: str | None = None) -> str:
        """The summary and the table as they stand; returns the table."""
        summary = self.summary(stopped)
        text = table(summary)
        _write(self.folder / SUMMARY, json.dumps(summary, indent=2, default=str) + "\n")
        _write(self.folder / TABLE, text + "\n")
        return text


def _write(path: Path, text: str) -> None:
    """Whole or not at all: a kill mid-write leaves the previous version."""
    partial = path.with_name(f".{path.name}.partial")
    partial.write_text(text)
    os.replace(partial, path)


def guarded(name: str, measure: Any, *args: Any) -> dict[str, Any]:
    """`measure(*args)`'s figures, or {"failed": why}: one part's failure (an out-of-memory in
    part 1) must not cost the parts after it."""
    try:
        return dict(measure(*args))
    except Exception as exc:  # noqa: BLE001 - recorded, and the check goes on
        print(f"bench_gpu: {name} failed: {type(exc).__name__}: {exc}", flush=True)
        return {"failed": f"{type(exc).__name__}: {exc}"}


# --- the table ---------------------------------------------------------------------------------


def _percent(value: float | None) -> str:
    return "-" if value is None else f"{100 * value:.1f}%"


def _rate(path: dict[str, Any]) -> str:
    return f"{path['images_per_s']:,.1f}" if "images_per_s" in path else "-"


def _not_measured(part: dict[str, Any]) -> str | None:
    if "skipped" in part:
        return f"not measured: {part['skipped']}"
    if "failed" in part:
        return f"failed: {part['failed']}"
    return None


@functools.cache  # the node's meters do not change within a check; nvidia-smi runs once
def node_meters() -> str:
    """ENERGY, and the meters this node has, or why it has none of each kind."""
    from aiperf.system import meters, nvidia_gpus

    found = meters.describe_meters(len(nvidia_gpus.describe()["gpus"]))
    has = ", ".join(f"{m['kind']} {m.get('zone', m.get('gpu'))}" for m in found["meters"])
    lacks = "; ".join(f"{kind}: {why}" for kind, why in sorted(found["absent"].items()))
    return f"{ENERGY}; meters: {has or 'none'}" + (f" (none of {lacks})" if lacks else "")


def table(summary: dict[str, Any]) -> str:
    """The check's figures in a few lines of at most 100 columns, from the parts saved so far."""
    settings, parts = summary["settings"], summary["parts"]
    lines = _node_lines(parts.get("part0"))
    lines += _compare_lines(settings, parts)
    lines += _feed_lines(parts.get("feed"))
    lines += _fit_lines(parts.get("fit"))
    lines += _run_lines(parts.get("part3"))
    lines.append(f"energy: {summary.get('energy', ENERGY)}")
    missing = [name for name in PARTS if name not in parts]
    if missing:
        lines.append(f"not reached: {', '.join(missing)}")
    if summary.get("stopped"):
        lines.append(f"stopped: {summary['stopped']}")
    lines.append(f"total {summary['total_s']:.0f} s")
    return "\n".join(line for text in lines for line in _wrapped(text))


def _wrapped(text: str) -> list[str]:
    return textwrap.wrap(text, width=100, subsequent_indent="  ") or [""]


def _node_lines(node: dict[str, Any] | None) -> list[str]:
    if node is None:
        return []
    if "peak" not in node:
        return [f"part 0, the node: {_not_measured(node)}"]
    from aiperf.units import format_ops

    peak, memory = node["peak"], node.get("memory_bytes")
    lines = [
        f"GPU check: {peak['device']} x{node.get('device_count', '?')}, peak "
        f"{format_ops(peak['flops'])}FLOP/s each (bf16 matmul, measured)"
        + ("" if memory is None else f", {memory / 2**30:.0f} GiB each")
    ]
    if node.get("expected"):
        lines.append(node["expected"])
    if node.get("imagenet"):
        lines.append(f"imagenet here: {node['imagenet']['said']}")
    return lines


def _compare_lines(settings: dict[str, Any], parts: dict[str, Any]) -> list[str]:
    measured = [parts[n] for n in ("part1", "part2") if n in parts and "devices" in parts[n]]
    lines = []
    keras = parts.get("part0", {}).get("keras", "?")
    lines.append(
        f"Keras {keras} on {settings['backend']}, {settings['precision']}, jit "
        f"{'on' if settings['jit'] else 'off'}; {settings['model']} {settings['image_size']} px, "
        f"{settings['classes']} classes, batch {settings['batch']}/device"
    )
    lines.append(
        f"{'devices':<10}{'bare img/s':>13}{'aiperf img/s':>15}{'aiperf/bare':>13}"
        f"{'MFU bare':>10}{'MFU aiperf':>12}"
    )
    for part in measured:
        bare, ours = part["bare"], part["aiperf"]
        name = str(part["devices"]) if part["devices"] == 1 else f"node {part['devices']}"
        ratio = "-" if part.get("ratio") is None else f"{part['ratio']:.3f}"
        lines.append(
            f"{name:<10}{_rate(bare):>13}{_rate(ours):>15}{ratio:>13}"
            f"{_percent(bare.get('mfu')):>10}{_percent(ours.get('mfu')):>12}"
        )
        for label, path in (("bare", bare), ("aiperf", ours)):
            said = _not_measured(path)
            if said:
                lines.append(f"  {label} on {part['devices']} devices: {said}")
    for number, name in (("1", "part1"), ("2", "part2")):
        said = _not_measured(parts.get(name, {}))
        if said:
            lines.append(f"part {number}: {said}")
    return lines


def _feed_lines(feed: dict[str, Any] | None) -> list[str]:
    if feed is None:
        return []
    said = _not_measured(feed)
    if said:
        return [f"feed as a trial gets it: {said}"]
    node = feed.get("node_images_per_s")
    each = feed.get("per_device_images_per_s")
    rates = (
        "in-memory arrays Keras slices itself, no pipeline to measure (no DALI pipeline ran on a "
        "GPU: --feed-data DIR measures staged shards)"
        if node is None
        else f"{node:,.0f} img/s for the node"
        + ("" if not each else " (" + ", ".join(f"{r:,.0f}" for r in each) + " a device)")
    )
    return [
        f"feed as a trial gets it: {feed.get('feed')}, {feed.get('pipelines')} pipeline(s) on "
        f"{len(feed.get('devices') or [])} device(s), global batch {feed.get('batch')}: {rates}"
    ]


def _fit_lines(fit: dict[str, Any] | None) -> list[str]:
    if fit is None:
        return []
    said = _not_measured(fit)
    if said:
        return [f"memory fit: {said}"]
    head = f"fit of {fit['model']} at {fit['batch']}/device"
    needed, available = fit["bytes_needed"], fit.get("bytes_available")
    against = "-" if available is None else f"{available / 2**30:.1f} GiB"
    verdict = "fits" if fit["fits"] else "does NOT fit"
    return [
        f"{head} x {fit['devices']} device(s), {fit['precision']}: XLA needs "
        f"{needed / 2**30:.1f} GiB a device, of {against} (headroom applied): {verdict}"
    ]


def _run_lines(run: dict[str, Any] | None) -> list[str]:
    if run is None:
        return []
    said = _not_measured(run)
    if said:
        return [f"aiperf run: {said}"]
    from aiperf.units import format_ops

    data = run["data"]
    lines = [
        f"aiperf run: --profile {run['profile']} --budget {run['budget_s']:g}s, "
        f"{run.get('workers', '?')} worker(s), {run.get('status')} in {run['seconds']:.0f} s",
        f"  data: {data['kind']}, {data['image_size']} px, {data['classes']} classes, "
        f"{data['train_samples']} + {data['val_samples']} images",
        f"  ({RUN_DATA_WHY})",
    ]
    if run.get("ops") is not None:
        staging, accuracy = run.get("staging_s"), run.get("best_val_accuracy")
        lines.append(
            f"  OPS {format_ops(run['ops'])}OPS   MFU {_percent(run.get('mfu'))}   window "
            f"utilisation {_percent(run.get('utilisation'))}   staging "
            + ("-" if staging is None else f"{staging:.1f} s")
        )
        lines.append(
            f"  trials completed {run['trials_completed']}   best val accuracy "
            + ("-" if accuracy is None else f"{accuracy:.3f}")
            + f"   {'valid' if run.get('valid') else 'invalid'}, {run.get('division')}"
        )
        if run.get("energy"):
            lines += textwrap.wrap(
                f"energy: {run['energy']}", 98, initial_indent="  ", subsequent_indent="    "
            )
    elif run.get("message"):
        lines.append(f"  {run['message']}")
    return lines
