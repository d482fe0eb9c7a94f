"""The keras-tuner oracle a run uses. The flow is the oracle's only client (the "chief"): it
calls create_trial / update_trial / end_trial itself, with no gRPC and no Tuner.search().
"""

from __future__ import annotations

from pathlib import Path

import keras_tuner as kt

from aiperf.config import BenchmarkConfig
from aiperf.search import space

# Large enough never to stop a run; the wall-clock budget is what ends the search.
MAX_TRIALS = 100_000


def make_oracle(config: BenchmarkConfig, state_dir: Path) -> kt.Oracle:
    """An oracle for the profile's `search.oracle`, saving its state under `state_dir`."""
    hp = space.hyperparameters(config.search.space)
    objective = kt.Objective(config.search.objective, direction="max")
    if config.search.oracle == "random":
        oracle = kt.oracles.RandomSearchOracle(objective=objective, max_trials=MAX_TRIALS,
                                               hyperparameters=hp, seed=config.seed + 1,
                                               max_consecutive_failed_trials=MAX_TRIALS)
    else:  # pragma: no cover - config validation admits only the oracles above
        raise ValueError(f"unknown oracle {config.search.oracle!r}")
    state_dir.mkdir(parents=True, exist_ok=True)
    oracle._set_project_dir(str(state_dir), "oracle")
    oracle.verbose = 0
    return oracle
