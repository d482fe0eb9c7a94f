"""ENERGY_READINGS: each meter's recorded energy agrees with its own readings.

A metered node's sampler records, for each meter and window segment, its joules, the seconds they
cover, its mean and peak power, and its readings: [seconds, joules] since the window opened, a
second apart (aiperf.system.power; a long window keeps evenly spaced ones, its last always). The
run's energy and OPS per watt are computed from the joules (aiperf.results.energy), and a package's
power logs from the readings (aiperf.report.power_logs); this holds the two together, as the other
checks hold the score to its epochs: the joules and seconds are the last reading's, the readings
never go back, the mean is the joules over the seconds, and the peak is at least the power of
every interval between two readings. The readings are kept to the millisecond and the millijoule,
so each comparison allows for that rounding and no more. A meter that stopped answering, or a run
recorded before readings were kept, has none to compare: its energy is left unmeasured anyway.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from aiperf.store import CheckRecord

if TYPE_CHECKING:
    from aiperf.results.evidence import Evidence

ENERGY_READINGS = "energy_readings"
ROUNDING = 0.001  # the readings' seconds and joules are kept to this


def check_energy_readings(ev: Evidence) -> CheckRecord:
    problems: list[str] = []
    meters = 0
    for segment, window in enumerate(ev.run.energy_windows):
        for entry in window.get("nodes") or ():
            for meter in entry.get("meters") or ():
                if not meter.get("readings") or meter.get("joules") is None:
                    continue
                meters += 1
                where = f"segment {segment}, {entry.get('node')} {_name(meter)}"
                problems += [f"{where}: {p}" for p in _problems(meter, meter["readings"])]
    if problems:
        shown = "; ".join(problems[:3]) + (
            f"; and {len(problems) - 3} more" if len(problems) > 3 else ""
        )
        return CheckRecord(ENERGY_READINGS, False, shown)
    if not meters:
        return CheckRecord(ENERGY_READINGS, True, "no meter's readings recorded: nothing to hold")
    return CheckRecord(
        ENERGY_READINGS,
        True,
        f"{meters} meter(s): joules, seconds, mean and peak power agree with their readings",
    )


def _problems(meter: Mapping[str, Any], readings: Sequence[Sequence[float]]) -> list[str]:
    joules, seconds = float(meter["joules"]), float(meter.get("seconds") or 0.0)
    last_s, last_j = float(readings[-1][0]), float(readings[-1][1])
    found = []
    if abs(last_j - joules) > ROUNDING:
        found.append(f"records {joules:.3f} J, its readings {last_j:.3f} J")
    if abs(last_s - seconds) > ROUNDING:
        found.append(f"covers {seconds:.3f} s, its readings {last_s:.3f} s")
    steps = list(zip(readings, readings[1:], strict=False))
    if any(b[0] <= a[0] or b[1] < a[1] - ROUNDING for a, b in steps):
        found.append("its readings go back in time or in energy")
        return found
    mean = meter.get("mean_w")
    if seconds > 0 and (
        mean is None or abs(float(mean) - joules / seconds) > 1e-9 * (joules / seconds) + 1e-12
    ):
        found.append(f"mean {mean} W, not its {joules / seconds:.6g} W (joules over seconds)")
    # Each interval's power is at least (its joules - rounding) / (its seconds + rounding).
    least = max(
        ((b[1] - a[1] - ROUNDING) / (b[0] - a[0] + ROUNDING) for a, b in steps), default=0.0
    )
    peak = meter.get("peak_w")
    if steps and (peak is None or float(peak) < least):
        found.append(f"peak {peak} W, under an interval of its readings at {least:.3f} W or more")
    return found


def _name(meter: Mapping[str, Any]) -> str:
    label = meter.get("zone") or meter.get("gpu") or meter.get("host") or ""
    return f"{meter.get('kind')} {label}".strip()
