"""Each oracle a profile can choose runs in the real flow: Prefect, Dask workers, the orchestrator and
SQL as a run has them, with the simulated trainer's modelled trials (aiperf.train.simulated), since
what differs between oracles is what they propose, not how a trial trains. (The morphism oracle,
the default, is covered end to end, trained with Keras, by test_benchmark_flow.py.) One worker:
these tests ask that each oracle drives the flow, not how it fares with several workers asking at
once, and each worker is a process to start (make test's CPU: docs/performance.md)."""

import sqlite3

import pytest
from conftest import TINY_SIMULATED, scored

pytestmark = pytest.mark.slow


@pytest.mark.parametrize("oracle", ["random", "bayesian", "hyperband"])
def test_keras_tuner_oracles_drive_the_flow(prefect_api, tmp_path, oracle):
    from aiperf_flows.benchmark import benchmark

    db = tmp_path / "aiperf.db"
    result = scored(
        benchmark,
        profile="quick",
        budget="10s",
        workers=1,
        db=f"sqlite:///{db}",
        seed=1,
        out=str(tmp_path / "out"),
        overrides={**TINY_SIMULATED, "search.oracle": oracle},
    )
    with sqlite3.connect(db) as sql:
        trials = sql.execute("SELECT hyperparameters, status FROM trials").fetchall()
        epochs = sql.execute("SELECT COUNT(*) FROM epochs").fetchone()[0]
        config = sql.execute("SELECT config FROM runs").fetchone()[0]
    assert f'"oracle": "{oracle}"' in config
    assert len(trials) >= 2 and epochs >= 1
    assert all('"stages"' in hp for hp, _status in trials), (
        "keras-tuner searched the ResNet family"
    )
    assert result["total_ops"] > 0
