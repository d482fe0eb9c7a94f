"""A run on metered nodes measures its window's energy, as a user's run would: the workers find
the node's meters, one samples them from its idle seconds to the window's end, and the run records
what they measured in its database and its event log alike, then shows the joules, operations per
watt and the level in `show`, `show --json` and its package, which `verify --package` accepts.

It runs benchmarks/bmc_standin.sh, as a user would try the energy path without a BMC: the node has
both kinds a server has, a BMC (OpenIPMI's simulator, infra/bmc/ctl.sh, given to the run as
cluster.bmc) and RAPL counters. The machines these tests run on are virtual and expose no counters,
so the RAPL tree is a stand-in (tests/rapl_standin.py) through AIPERF_POWERCAP, the one seam; the
CLI, its workers, the sampler, the records and the package are the product's own. The trials are
the simulated trainer's: energy does not depend on what a trial trains."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest
from conftest import TINY_SIMULATED
from in_process import aiperf_here
from rapl_standin import RaplStandIn

from aiperf.report.power_logs import log_name
from aiperf.results import mllog
from aiperf.results.energy import energy
from aiperf.store import Store

pytestmark = pytest.mark.slow
REPO = Path(__file__).resolve().parents[1]
WATTS = 350


def test_a_run_on_a_metered_node_records_shows_and_packages_its_window_s_energy(tmp_path):
    db = f"sqlite:///{tmp_path / 'aiperf.db'}"
    sets = [a for k, v in TINY_SIMULATED.items() for a in ("--set", f"{k}={json.dumps(v)}")]
    environment = {
        **os.environ,
        "AIPERF_POWERCAP": str(tmp_path / "powercap"),
        "AIPERF_IDLE_POWER_S": "1",
        "BMC_STANDIN_BUDGET": "8s",
        "BMC_STANDIN_DIR": str(tmp_path / "bmc"),
    }
    with RaplStandIn(tmp_path / "powercap"):
        done = subprocess.run(
            ["bash", "benchmarks/bmc_standin.sh", db, str(tmp_path / "package"), str(WATTS)]
            + [*sets, "--workers", "1", "--out", str(tmp_path / "out")],
            cwd=REPO,
            env=environment,
            capture_output=True,
            text=True,
        )
    assert done.returncode == 3, done.stderr  # invalid by its rules: 8 s is under quick's 60
    assert "J in the window" in done.stdout and "OPS/W, L1" in done.stdout

    with Store.open_existing(db) as store:
        record = store.get_run(1)
    (window,) = record.energy_windows
    assert window["idle_s"] == 1.0 and window["closed"] > window["opened"]
    (node,) = window["nodes"]
    node_meter, package, dram = node["meters"]
    assert (node_meter["kind"], package["zone"], dram["zone"]) == ("bmc", "package-0", "dram")
    for meter, watts in ((node_meter, WATTS), (package, 40.0), (dram, 5.0)):
        assert meter["stopped"] is None and meter["samples"] >= 5, meter
        assert meter["mean_w"] == pytest.approx(watts, rel=0.3), meter
        assert meter["idle_w"] == pytest.approx(watts, rel=0.5), meter
    assert package["seconds"] > 200 / 40.0, "the package's counter wrapped in the window"

    found = energy(record)  # the node's own meter, its BMC, stands for the node: L1
    assert found.joules == pytest.approx(node_meter["joules"])
    assert found.joules == pytest.approx(WATTS * node_meter["seconds"], rel=0.05)
    assert found.ops_per_watt == pytest.approx(record.score.total_ops / found.joules)
    assert found.level == "L1"
    figures = json.loads(aiperf_here("show", "1", "--db", db, "--json").stdout)
    assert figures["energy_joules"] == pytest.approx(found.joules)
    assert figures["ops_per_watt"] == pytest.approx(found.ops_per_watt)
    assert figures["energy_level"] == "L1"

    (log,) = (tmp_path / "out").glob("run-*-1/events.log")
    assert list(mllog.read_run(log).run.energy_windows) == list(record.energy_windows)
    assert f"- energy: {found.line()}" in (tmp_path / "package" / "README.md").read_text()
    checked = aiperf_here("verify", "--package", str(tmp_path / "package"))
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert "power_logs" in checked.stdout and "energy_readings" in checked.stdout
    _power_log_gives_the_joules(tmp_path / "package", window, node_meter["joules"])

    password = (tmp_path / "bmc" / "password").read_text().strip()
    written = [p for p in tmp_path.rglob("*") if p.is_file() and p.parent.name != "bmc"]
    assert not [p for p in written if password.encode() in p.read_bytes()], "the BMC's password"
    assert password not in done.stdout + done.stderr


def _power_log_gives_the_joules(package: Path, window: dict, joules: float) -> None:
    """The node's power log in the package, read by MLCommons' own result summarizer, gives the
    joules the run recorded for the node (its BMC's); edited, it fails `verify --package`."""
    from mlperf_logging.compliance_checker.mlp_parser import parse_file
    from mlperf_logging.result_summarizer.result_summarizer import _compute_power_node

    log = package / log_name(0, window["nodes"][0]["node"])
    lines, errors = parse_file(str(log), ruleset="5.1.0")
    assert not errors and len(lines) >= 7, errors
    span_ms = lines[-1].timestamp - lines[0].timestamp
    # Over the log's own span (MLCommons scales a node's mean power by the time to train) ...
    assert _compute_power_node(lines, span_ms) == pytest.approx(joules, rel=1e-6)
    # ... and over the window the run metered, as MLCommons scales it to a result's time to train.
    window_ms = (window["closed"] - window["opened"]) * 1000
    assert _compute_power_node(lines, window_ms) == pytest.approx(joules, rel=0.05)

    edited = Path(shutil.copytree(package, package.parent / "edited"))
    text = (edited / log.relative_to(package)).read_text().splitlines()
    reading = next(i for i, line in enumerate(text) if '"power_reading"' in line)
    event = json.loads(text[reading].removeprefix(":::MLLOG "))
    event["value"] = event["value"] / 2  # a second at half the power it drew
    text[reading] = ":::MLLOG " + json.dumps(event)
    (edited / log.relative_to(package)).write_text("\n".join(text) + "\n")
    refused = aiperf_here("verify", "--package", str(edited))
    assert refused.returncode == 1 and "power_logs" in refused.stdout, refused.stdout
