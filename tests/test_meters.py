"""A node's energy meters (aiperf.system.meters) and what a run says of its energy without one
(aiperf.results.energy): never a number it did not measure, always why."""

from __future__ import annotations

from dataclasses import replace
from importlib.util import find_spec
from pathlib import Path

from aiperf.results.energy import Energy, NodeMeters, energy
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
    line = Energy(None, None, None, (bare,)).line()
    assert line == "not measured: no node had a meter (vm: bmc: none given; rapl: no powercap)"
    metered = NodeMeters("n1", ({"kind": "rapl", "zone": "package-0"},), {"bmc": "none given"})
    found = Energy(None, None, None, (bare, metered))
    assert found.line() == (
        "not measured: meters found (n1: RAPL package-0), which this version does not read over "
        "the window"
    )
    assert found.to_dict()["measured"] is False
    assert Energy(None, None, None, None).line() == (
        "not measured: the run's nodes were not described"
    )


def test_a_node_described_before_meters_were_says_so(short_real_run):
    from aiperf.store import Store

    with Store.open_existing(short_real_run.config.db) as store:
        run = store.get_run(short_real_run.run_id)
    node = dict(run.system_description["nodes"][0])
    node.pop("energy_meters")
    older = energy(replace(run, system_description={"nodes": [node]}))
    assert older.line().endswith("meters: not recorded by the version that ran it)")
