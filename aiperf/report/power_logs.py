"""A package's power logs: each metered node's power over each window segment, in MLPerf's power
log format, made from the readings its meters recorded and held to the joules the event log
records (`aiperf verify --package`'s POWER_LOGS check).

`power/result_<segment>/node_<host>.txt` holds `:::MLLOG` lines as MLCommons' result summarizer
reads a node's power: `power_measurement_start`, one `power_reading` (watts) a sample, then
`power_measurement_stop`; its rule holds each reading's power over the interval before it, so the
node's energy is the sum of reading x interval. A node's power is its best meters' (aiperf.results
.energy: its BMC, else the sum of its parts), each reading the mean power since the one before:
the step of its recorded joules over the step of its time, both as the log writes them
(milliseconds), so the sum gives back exactly the joules recorded, whatever the rounding of the
times. A log edited to claim less (or more) energy then disagrees with the event log, which the
check names.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from aiperf.results.energy import best_meters
from aiperf.results.mllog import LoggedRun
from aiperf.store import CheckRecord

POWER_LOGS = "power_logs"  # the check's name
FOLDER = "power"
TOKEN = ":::MLLOG "
MAX_LOG_BYTES = 4 * 1024 * 1024  # 600 readings a node and segment are some 100 KiB
TOLERANCE_J = 0.01  # the readings are kept to the millijoule; a node sums a few meters'
DESCRIBED = (
    "a metered node's power over a window segment in MLPerf's power log format "
    "(power_measurement_start, a power_reading in watts a sample, power_measurement_stop), from "
    "the readings its meters recorded; `aiperf verify --package` holds its energy to `events.log`."
)


def log_name(segment: int, node: str) -> str:
    """The package path of `node`'s log for window segment `segment` (MLCommons globs node_*.txt)."""
    return f"{FOLDER}/result_{segment}/node_{re.sub(r'[^A-Za-z0-9._-]', '_', node)}.txt"


def node_logs(energy_windows: Sequence[Mapping[str, Any]]) -> dict[str, tuple[float, str]]:
    """Each metered node's log for each segment: package path -> (its recorded joules, the log's
    text). A node without readings (a run before they were kept, a meter that stopped) has none."""
    logs: dict[str, tuple[float, str]] = {}
    for segment, window in enumerate(energy_windows):
        for entry in window.get("nodes") or ():
            chosen = best_meters(entry.get("meters") or [])
            series = _node_series(chosen)
            if series is not None:
                joules = sum(float(m["joules"]) for m in chosen)
                logs[log_name(segment, str(entry["node"]))] = (
                    joules,
                    _text(entry["node"], series),
                )
    return logs


def _node_series(chosen: Sequence[Mapping[str, Any]]) -> list[tuple[int, float]] | None:
    """(time in ms, joules since the first) of the node's meters summed, sample by sample; None
    unless every meter answered to the end with readings taken at the same times (one sampler)."""
    if not chosen or any(m.get("stopped") or m.get("joules") is None for m in chosen):
        return None
    readings = [m.get("readings") or [] for m in chosen]
    times = [r[0] for r in readings[0]]
    if len(times) < 2 or any([r[0] for r in other] != times for other in readings[1:]):
        return None
    opened = float(chosen[0]["opened_at"])
    return [
        (round((opened + t) * 1000), sum(float(r[i][1]) for r in readings))
        for i, t in enumerate(times)
    ]


def _text(node: str, series: list[tuple[int, float]]) -> str:
    lines = [_line("power_measurement_start", series[0][0], None, node)]
    (at, joules) = series[0]
    for time_ms, total in series[1:]:
        if time_ms > at:  # two readings in one millisecond: the next carries both steps
            lines.append(
                _line("power_reading", time_ms, (total - joules) * 1000 / (time_ms - at), node)
            )
            at, joules = time_ms, total
    lines.append(_line("power_measurement_stop", series[-1][0], None, node))
    return "\n".join(lines) + "\n"


def _line(key: str, time_ms: int, value: float | None, node: str) -> str:
    event = {
        "namespace": "",
        "time_ms": time_ms,
        "event_type": "POINT_IN_TIME",
        "key": key,
        "value": value,
        "metadata": {"host": node, "unit": "W"} if value is not None else {"host": node},
    }
    return TOKEN + json.dumps(event)


def joules_of(text: str) -> float:
    """A power log's energy by MLCommons' rule: from the start, each reading's watts held over the
    interval before it, until the stop (its time to train taken as the measurement's own span)."""
    events = sorted(
        (json.loads(line[len(TOKEN) :]) for line in text.splitlines() if line.startswith(TOKEN)),
        key=lambda e: float(e["time_ms"]),
    )
    total, previous, started, stopped = 0.0, 0.0, False, False
    for event in events:
        key, at = event["key"], float(event["time_ms"])
        if key == "power_measurement_start":
            started, previous = True, at
        elif key == "power_reading" and started and not stopped:
            total += float(event["value"]) * (at - previous)
            previous = at
        elif key == "power_measurement_stop":
            stopped = True
    if not started:
        raise ValueError("it has no power_measurement_start")
    return total / 1000


def write_power_logs(to: Path, logged: LoggedRun) -> list[str]:
    """Write the run's node logs under the package folder `to`; their package paths."""
    written = []
    for name, (_joules, text) in node_logs(logged.run.energy_windows).items():
        (to / name).parent.mkdir(parents=True, exist_ok=True)
        (to / name).write_text(text, encoding="utf-8")
        written.append(name)
    return written


def check_power_logs(folder: Path, logged: LoggedRun) -> CheckRecord:
    """POWER_LOGS: every node log the event log's readings call for is in the package and gives
    back, by MLCommons' rule, the joules the event log records for that node; no other is there."""
    expected = node_logs(logged.run.energy_windows)
    found = {p.relative_to(folder).as_posix() for p in Path(folder).glob(f"{FOLDER}/*/*.txt")}
    problems = [
        f"{name} is not a node the event log metered" for name in sorted(found - set(expected))
    ]
    for name, (joules, _text) in sorted(expected.items()):
        path = Path(folder) / name
        if not path.is_file():
            problems.append(f"{name} is missing")
            continue
        if path.stat().st_size > MAX_LOG_BYTES:
            problems.append(f"{name} is over {MAX_LOG_BYTES} bytes")
            continue
        try:
            logged_j = joules_of(path.read_text(encoding="utf-8"))
        except (ValueError, KeyError, TypeError) as exc:  # JSONDecodeError is a ValueError
            problems.append(f"{name} cannot be read: {str(exc).splitlines()[0]}")
            continue
        if abs(logged_j - joules) > max(TOLERANCE_J, 1e-6 * abs(joules)):
            problems.append(f"{name} gives {logged_j:.3f} J, the event log {joules:.3f} J")
    if problems:
        return CheckRecord(POWER_LOGS, False, "; ".join(problems[:5]))
    if not expected:
        return CheckRecord(POWER_LOGS, True, "no power log: no node's readings were recorded")
    return CheckRecord(
        POWER_LOGS,
        True,
        f"{len(expected)} node log(s) give back the joules the event log records, by MLCommons' rule",
    )
