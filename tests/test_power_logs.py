"""A node's power log (aiperf.report.power_logs) and its meters' readings held to their joules
(aiperf.results.energy_checks): from a window segment as the sampler records it, the log gives back
the node's joules by MLCommons' own rule, and an edit to either is caught by name."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import pytest

from aiperf.report.power_logs import POWER_LOGS, check_power_logs, joules_of, log_name, node_logs
from aiperf.results.energy_checks import check_energy_readings
from aiperf.system import power

OPENED = 1_796_000_000.25


def _meter(zone: str, watts: list[float], step_s: float = 1.0) -> dict:
    """A RAPL zone's result as a sampler records it, drawing `watts` in each interval."""
    joules = [0.0]
    for w in watts:
        joules.append(joules[-1] + w * step_s)
    window = [(OPENED + i * step_s, j) for i, j in enumerate(joules)]
    seconds = step_s * len(watts)
    return {
        "kind": "rapl",
        "zone": zone,
        "joules": joules[-1],
        "seconds": seconds,
        "mean_w": joules[-1] / seconds,
        "peak_w": max(watts),
        "samples": len(window),
        "idle_w": 20.0,
        "stopped": None,
        "opened_at": OPENED,
        "readings": power.readings(window),
    }


def _windows(*meters: dict) -> list[dict]:
    return [
        {
            "opened": OPENED,
            "closed": OPENED + 9,
            "nodes": [{"node": "n/1", "meters": list(meters)}],
        }
    ]


def _logged(windows: list[dict]) -> SimpleNamespace:
    return SimpleNamespace(run=SimpleNamespace(energy_windows=windows))


def test_readings_keep_at_most_their_number_evenly_and_the_last():
    window = [(100.0 + i, 3.0 * i) for i in range(1001)]
    kept = power.readings(window, most=11)
    assert len(kept) == 11 and kept[0] == [0.0, 0.0] and kept[-1] == [1000.0, 3000.0]
    assert [t for t, _j in kept] == [100.0 * i for i in range(11)]
    assert power.readings(window[:5]) == [[float(i), 3.0 * i] for i in range(5)]


def test_a_node_s_log_sums_its_parts_and_gives_back_their_joules_by_mlcommons_rule(tmp_path):
    from mlperf_logging.compliance_checker.mlp_parser import parse_file
    from mlperf_logging.result_summarizer.result_summarizer import _compute_power_node

    package, dram = _meter("package-0", [40, 95, 60, 80]), _meter("dram", [5, 6, 5, 7])
    ((name, (joules, text)),) = node_logs(_windows(package, dram)).items()
    assert name == log_name(0, "n/1") == "power/result_0/node_n_1.txt"
    assert joules == package["joules"] + dram["joules"] == 298.0
    assert joules_of(text) == pytest.approx(joules, rel=1e-12)
    (tmp_path / "node_n_1.txt").write_text(text)
    lines, errors = parse_file(str(tmp_path / "node_n_1.txt"), ruleset="5.1.0")
    assert not errors
    assert [json.loads(line.full_string[9:])["value"] for line in lines[1:-1]] == [45, 101, 65, 87]
    assert _compute_power_node(lines, 4000.0) == pytest.approx(298.0, rel=1e-9)


def test_a_node_with_a_meter_that_stopped_or_without_readings_has_no_log():
    stopped = {**_meter("dram", [5, 6]), "stopped": "stopped answering 2 s in (OSError)"}
    assert node_logs(_windows(_meter("package-0", [40, 50]), stopped)) == {}
    older = {k: v for k, v in _meter("package-0", [40, 50]).items() if k != "readings"}
    assert node_logs(_windows(older)) == {}


def _package(tmp_path: Path, windows: list[dict]) -> Path:
    for name, (_joules, text) in node_logs(windows).items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    return tmp_path


def test_a_package_s_logs_are_held_to_the_event_log(tmp_path):
    windows = _windows(_meter("package-0", [40, 95, 60, 80]))
    folder = _package(tmp_path, windows)
    held = check_power_logs(folder, _logged(windows))
    assert held.check == POWER_LOGS and held.passed, held.detail
    log = folder / log_name(0, "n/1")
    lines = log.read_text().splitlines()
    event = json.loads(lines[2].removeprefix(":::MLLOG "))
    event["value"] = 190  # the second interval claimed at twice its power
    log.write_text("\n".join([*lines[:2], ":::MLLOG " + json.dumps(event), *lines[3:]]) + "\n")
    edited = check_power_logs(folder, _logged(windows))
    assert not edited.passed and "gives 370.000 J, the event log 275.000 J" in edited.detail
    log.unlink()
    (folder / "power" / "result_0" / "node_other.txt").write_text("")
    missing = check_power_logs(folder, _logged(windows))
    assert not missing.passed
    assert "node_n_1.txt is missing" in missing.detail
    assert "node_other.txt is not a node the event log metered" in missing.detail
    assert check_power_logs(tmp_path / "none", _logged([])).passed


@pytest.mark.parametrize(
    "edit, said",
    [
        (lambda m: m.update(joules=m["joules"] + 1), "records 276.000 J, its readings 275.000 J"),
        (lambda m: m.update(seconds=5.0), "covers 5.000 s, its readings 4.000 s"),
        (lambda m: m.update(mean_w=70.0), "mean 70.0 W, not its 68.75 W"),
        (lambda m: m.update(peak_w=90.0), "peak 90.0 W, under an interval of its readings"),
        (lambda m: m["readings"].reverse(), "go back in time or in energy"),
    ],
)
def test_a_meter_s_figures_are_held_to_its_readings(edit, said):
    meter = _meter("package-0", [40, 95, 60, 80])
    assert check_energy_readings(_logged(_windows(meter))).passed
    edit(meter)
    found = check_energy_readings(_logged(_windows(meter)))
    assert not found.passed and said in found.detail, found.detail
    assert found.detail.startswith("segment 0, n/1 rapl package-0: ")
