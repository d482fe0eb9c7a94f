"""A node's energy meters (aiperf.system.meters) and what a run says of its energy without one
(aiperf.results.energy): never a number it did not measure, always why."""

from __future__ import annotations

from dataclasses import replace
from importlib.util import find_spec
from pathlib import Path

import pytest
from records import run_record

from aiperf.results.energy import Energy, NodeMeters, energy
from aiperf.store.records import ScoreResult
from aiperf.system import meters
from aiperf.system.description import describe_node


def _zone(powercap: Path, folder: str, name: str, counter: str | None = "123456") -> None:
    zone = powercap / folder
    zone.mkdir(parents=True)
    (zone / "name").write_text(name + "\n")
    (zone / "max_energy_range_uj").write_text("262143328850\n")
    if counter is not None:
        (zone / "energy_uj").write_text(counter + "\n")


def test_rapl_zones_are_read_from_powercap_with_where_their_counter_wraps(tmp_path):
    _zone(tmp_path, "intel-rapl:0", "package-0")
    _zone(tmp_path, "intel-rapl:0:0", "dram")
    (tmp_path / "dtpm").mkdir()  # another powercap driver's zone: not RAPL
    zones, absent = meters.rapl_zones(tmp_path)
    assert absent is None
    assert [(z["kind"], z["zone"], z["wraps_at_uj"]) for z in zones] == [
        ("rapl", "package-0", 262143328850),
        ("rapl", "dram", 262143328850),
    ]
    assert zones[0]["path"] == str(tmp_path / "intel-rapl:0" / "energy_uj")


def test_a_node_without_rapl_says_why(tmp_path):
    assert meters.rapl_zones(tmp_path / "none") == (
        [],
        f"no {tmp_path / 'none'} (the kernel exposes no powercap zones here)",
    )
    assert meters.rapl_zones(tmp_path) == ([], f"no RAPL zone under {tmp_path}")
    _zone(tmp_path, "intel-rapl:0", "package-0", counter=None)  # a counter this user cannot read
    zones, absent = meters.rapl_zones(tmp_path)
    assert zones == [] and absent is not None
    assert absent.startswith("RAPL zones intel-rapl:0 cannot be read by this user")


def test_gpus_are_metered_only_where_nvml_serves_them():
    assert meters.nvml_devices(0) == ([], "no NVIDIA GPU")
    if find_spec("pynvml") is None:
        assert meters.nvml_devices(8) == (
            [],
            "nvidia-ml-py is not installed (pip install nvidia-ml-py)",
        )


def test_this_node_describes_its_meters_and_why_it_lacks_each_kind():
    found = describe_node()["energy_meters"]
    kinds = {m["kind"] for m in found["meters"]}
    assert set(found["absent"]) | kinds >= set(meters.KINDS)  # every kind: found, or why not
    assert "bmc" in found["absent"]  # this version is given no BMC
    assert all(found["absent"][kind] for kind in found["absent"])
    if not meters.POWERCAP.is_dir():  # a VM, like the machines these tests run on
        assert "powercap" in found["absent"]["rapl"]


def test_energy_is_never_a_number_it_did_not_measure():
    bare = NodeMeters("vm", (), {"bmc": "none given", "rapl": "no powercap"})
    line = Energy(None, None, None, None, (bare,)).line()
    assert line == "not measured: no node had a meter (vm: bmc: none given; rapl: no powercap)"
    metered = NodeMeters("n1", ({"kind": "rapl", "zone": "package-0"},), {"bmc": "none given"})
    found = Energy(None, None, None, None, (bare, metered))
    assert found.line() == (
        "not measured: meters found (n1: RAPL package-0), but the window was not sampled"
    )
    assert found.to_dict()["measured"] is False
    assert Energy(None, None, None, None, None).line() == (
        "not measured: the run's nodes were not described"
    )


PACKAGE = {"kind": "rapl", "zone": "package-0", "path": "/x", "wraps_at_uj": 10**9}
DRAM = {**PACKAGE, "zone": "dram"}


def _measured(meter, joules, *, seconds=100.0, stopped=None):
    return {
        **meter,
        "joules": joules,
        "seconds": seconds,
        "mean_w": None if joules is None else joules / seconds,
        "peak_w": 80.0,
        "samples": 101,
        "idle_w": 20.0,
        "stopped": stopped,
    }


def _node(host, listed):
    return {"hostname": host, "workers": [f"tcp://{host}:1"], "energy_meters": {"meters": listed}}


def _scored_run(nodes, windows):
    score = ScoreResult(
        elapsed_s=100.0,
        total_ops=10**12,
        ops=1e10,
        tensor_ops=1e10,
        best_val_accuracy=0.5,
        val_samples=10,
        regulated_score=6.9e9,
        trials_completed=3,
        samples_trained=1,
        samples_evaluated=1,
        valid=True,
    )
    return run_record(
        system_description={"nodes": nodes}, energy_windows=tuple(windows), score=score
    )


def test_a_fully_metered_window_gives_joules_operations_per_joule_and_its_level():
    window = {
        "nodes": [{"node": "n1", "meters": [_measured(PACKAGE, 5000.0), _measured(DRAM, 1000.0)]}]
    }
    found = energy(_scored_run([_node("n1", [PACKAGE, DRAM])], [window]))
    assert found.joules == 6000.0
    assert found.ops_per_watt == pytest.approx(10**12 / 6000.0)  # operations per joule
    assert found.regulated_per_watt == pytest.approx(6.9e9 / 60.0)  # over the mean 60 W
    assert found.level == "below L1"  # parts of the node, not the node at its power input
    assert found.line() == (
        "6 kJ in the window, 167 MOPS/W, below L1 (n1: 6 kJ, mean 60 W, peak 160 W, idle 40 W, "
        "from CPU packages and DRAM (RAPL))"
    )
    # a resumed run's second segment adds its joules
    twice = energy(_scored_run([_node("n1", [PACKAGE, DRAM])], [window, window]))
    assert twice.joules == 12000.0


def test_a_node_that_missed_part_of_the_window_leaves_the_run_s_energy_unmeasured():
    nodes = [_node("n1", [PACKAGE]), _node("n2", [PACKAGE])]
    stopped = {
        "nodes": [
            {"node": "n1", "meters": [_measured(PACKAGE, 5000.0)]},
            {
                "node": "n2",
                "meters": [_measured(PACKAGE, 900.0, stopped="stopped answering 9 s in")],
            },
        ]
    }
    found = energy(_scored_run(nodes, [stopped]))
    assert found.joules is None and found.ops_per_watt is None and found.level is None
    assert found.line() == "not measured: n2: RAPL package-0 stopped answering 9 s in"
    left = {"nodes": [{"node": "n1", "missing": "its sampling worker left before the end"}]}
    assert energy(_scored_run(nodes[:1], [left])).line() == (
        "not measured: n1: its sampling worker left before the end"
    )
    unmetered = [
        _node("n1", [PACKAGE]),
        {"hostname": "n2", "energy_meters": {"absent": {"rapl": "none"}}},
    ]
    one = {"nodes": [{"node": "n1", "meters": [_measured(PACKAGE, 5000.0)]}]}
    assert (
        energy(_scored_run(unmetered, [one])).line() == "not measured: no meter on n2: rapl: none"
    )


def test_a_node_described_before_meters_were_says_so(short_real_run):
    from aiperf.store import Store

    with Store.open_existing(short_real_run.config.db) as store:
        run = store.get_run(short_real_run.run_id)
    node = dict(run.system_description["nodes"][0])
    node.pop("energy_meters")
    older = energy(replace(run, system_description={"nodes": [node]}))
    assert older.line().endswith("meters: not recorded by the version that ran it)")
