"""A run on metered nodes measures its window's energy, as a user's run would: the workers find
the node's meters, one samples them from its idle seconds to the window's end, and the run records
what they measured in its database and its event log alike, then shows the joules, operations per
watt and the level in `show` and `show --json`.

The node here has both kinds a server has: a BMC (OpenIPMI's simulator, infra/bmc/ctl.sh, given to
the run as cluster.bmc) and RAPL counters. The machines these tests run on are virtual and expose
no counters, so the RAPL tree is a stand-in (tests/rapl_standin.py) through AIPERF_POWERCAP, the
one seam; the run, its workers, the sampler and the records are the product's own. The trials are
the simulated trainer's: energy does not depend on what a trial trains."""

from __future__ import annotations

import json

import pytest
from bmc_standin import simulated_bmc
from conftest import TINY_SIMULATED, scored
from in_process import aiperf_here
from rapl_standin import RaplStandIn

from aiperf.config import load_config
from aiperf.results import mllog
from aiperf.results.energy import energy
from aiperf.store import Store

pytestmark = pytest.mark.slow
BMC_WATTS = 350


def test_a_run_on_a_metered_node_records_and_shows_its_window_s_energy(
    prefect_api, tmp_path, monkeypatch
):
    from aiperf_flows.benchmark import benchmark_config

    monkeypatch.setenv("AIPERF_POWERCAP", str(tmp_path / "powercap"))
    monkeypatch.setenv("AIPERF_IDLE_POWER_S", "1")
    db = f"sqlite:///{tmp_path / 'aiperf.db'}"
    with simulated_bmc(tmp_path / "bmc", BMC_WATTS) as bmc, RaplStandIn(tmp_path / "powercap"):
        password = bmc.password_file.read_text().strip()
        config = load_config(  # cluster.bmc: from a profile or --set, never a flow parameter
            "quick",
            budget="8s",
            workers=1,
            db=db,
            seed=1,
            out=str(tmp_path / "out"),
            overrides={**TINY_SIMULATED, **bmc.overrides()},
        )
        result = scored(benchmark_config, config=config)
    assert result["total_ops"] > 0
    with Store.open_existing(db) as store:
        record = store.get_run(1)
    (window,) = record.energy_windows
    assert window["idle_s"] == 1.0 and window["closed"] > window["opened"]
    (node,) = window["nodes"]
    node_meter, package, dram = node["meters"]
    assert (node_meter["kind"], package["zone"], dram["zone"]) == ("bmc", "package-0", "dram")
    for meter, watts in ((node_meter, BMC_WATTS), (package, 40.0), (dram, 5.0)):
        assert meter["stopped"] is None and meter["samples"] >= 5, meter
        assert meter["mean_w"] == pytest.approx(watts, rel=0.3), meter
        assert meter["idle_w"] == pytest.approx(watts, rel=0.5), meter
    assert package["seconds"] > 200 / 40.0, "the package's counter wrapped in the window"

    found = energy(record)  # the node's own meter, its BMC, stands for the node: L1
    assert found.joules == pytest.approx(node_meter["joules"])
    assert found.joules == pytest.approx(BMC_WATTS * node_meter["seconds"], rel=0.1)
    assert found.ops_per_watt == pytest.approx(record.score.total_ops / found.joules)
    assert found.level == "L1"

    (log,) = (tmp_path / "out").glob("run-*-1/events.log")
    assert list(mllog.read_run(log).run.energy_windows) == list(record.energy_windows)
    figures = json.loads(aiperf_here("show", "1", "--db", db, "--json").stdout)
    assert figures["energy_joules"] == pytest.approx(found.joules)
    assert figures["ops_per_watt"] == pytest.approx(found.ops_per_watt)
    assert figures["energy_level"] == "L1"
    assert "J in the window" in aiperf_here("show", "1", "--db", db).stdout

    written = [tmp_path / "aiperf.db", *(p for p in (tmp_path / "out").rglob("*") if p.is_file())]
    assert not [p for p in written if password.encode() in p.read_bytes()], "the BMC's password"
