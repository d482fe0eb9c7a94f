"""A node's power from its BMC over IPMI (aiperf.system.bmc), against OpenIPMI's BMC simulator:
the reading, a node that lists its BMC as a meter, and each way a BMC fails said in one line that
never holds the password."""

from __future__ import annotations

import time

import pytest
from bmc_standin import simulated_bmc

from aiperf.config import load_config
from aiperf.errors import UserError
from aiperf.lifecycle.parameters import check_parameters
from aiperf.results.division import classify
from aiperf.system import meters, power
from aiperf.system.bmc import Bmc, BmcError, parse


def test_the_dcmi_and_sensor_answers_are_read_as_watts():
    dcmi = "    Instantaneous power reading:                   412 Watts\n    Minimum during ..."
    assert parse(dcmi, "dcmi") == 412.0
    assert parse("Power,350\n", "sensor:Power") == 350.0
    with pytest.raises(BmcError, match="sensor Power gave no number"):
        parse("Power,\n", "sensor:Power")
    with pytest.raises(BmcError, match="no DCMI power reading"):
        parse("Error", "dcmi")


@pytest.mark.slow
def test_a_simulated_bmc_s_power_is_read_and_integrated_and_its_failures_named(tmp_path):
    with simulated_bmc(tmp_path / "bmc", watts=350) as sim:
        bmc = Bmc("127.0.0.1", "aiperf", str(sim.password_file), sim.port, "sensor:Power")
        assert bmc.watts() == 350.0
        sim.draw(120)
        time.sleep(0.5)  # the simulator polls its file every 200 ms
        assert bmc.watts() == 120.0
        password = sim.password_file.read_text().strip()

        listed, absent = meters.bmc_meter(sim.settings_fields())
        assert absent is None
        (meter,) = listed
        assert meter["kind"] == "bmc" and meter["watts_at_start"] == 120.0
        counter = power.counters(listed)[0][0]
        assert counter.joules(100.0) == 0.0
        assert counter.joules(101.5) == 180.0  # 120 W for the 1.5 s of the reader's clock

        wrong = Bmc("127.0.0.1", "aiperf", str(sim.folder / "lan.conf"), sim.port, "sensor:Power")
        with pytest.raises(BmcError) as refused:
            wrong.watts()
        assert "session" in str(refused.value) and password not in str(refused.value)
        dcmi = Bmc("127.0.0.1", "aiperf", str(sim.password_file), sim.port, "dcmi")
        with pytest.raises(BmcError, match="Invalid command"):  # ipmi_sim serves no DCMI
            dcmi.watts()
    with pytest.raises(BmcError, match=f"127.0.0.1:{sim.port}"):
        bmc.watts()  # stopped answering
    listed, absent = meters.bmc_meter(sim.settings_fields())
    assert listed == [] and absent.startswith("the BMC at 127.0.0.1 gave no power reading")
    assert meters.bmc_meter(None) == ([], "no BMC given to the run (cluster.bmc)")


BMC = {"host": "{node}-ipmi", "user": "aiperf", "password_file": "/etc/aiperf/bmc-password"}


def test_a_bmc_is_where_a_run_runs_so_a_closed_run_stays_closed():
    overrides = {f"cluster.bmc.{k}": v for k, v in BMC.items()}
    config = load_config("quick", workers=1, overrides=overrides, runs_here=False)
    assert config.cluster.bmc is not None and config.cluster.bmc.reading == "dcmi"
    assert classify(config).name == "closed"


def test_a_flow_parameter_cannot_point_the_workers_at_a_bmc():
    with pytest.raises(UserError) as refused:
        check_parameters(overrides={"cluster.bmc.host": "elsewhere"})
    assert str(refused.value).startswith("flow parameter overrides may not set cluster.bmc:")
    assert "\n" not in str(refused.value)
