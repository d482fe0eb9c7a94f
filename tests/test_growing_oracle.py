"""The growing oracles' shared base (aiperf/search/growing.py) changed no stored state: a run's
database holds the oracle's state from every proposal, and `aiperf run --resume` gives it to the
code of the day. The data below are what the code before the base stored (taken on the commit
before it, with this file's scenario), and the trial it proposed next; each oracle must store the
same state in the same scenario, and, given that state and the trials, propose the same trial."""

from __future__ import annotations

import hashlib
import json
import random
from types import SimpleNamespace
from typing import Any

import keras_tuner as kt
import pytest

from aiperf.config import load_config
from aiperf.search import space
from aiperf.search.oracles import make_oracle
from aiperf.search.resume import PER_TRIAL, restore, stored_state
from aiperf.status import TrialStatus


def _mersenne(seed: int, words: int) -> list[Any]:
    """random.Random(seed)'s state after `words` 32-bit outputs, as get_state() stores it: the
    stored state's 625 numbers, written short (they were checked equal when the data were taken;
    a Mersenne Twister's state depends only on how many words it gave)."""
    rng = random.Random(seed)
    for _ in range(words):
        rng.getrandbits(32)
    version, internal, gauss = rng.getstate()
    return [version, list(internal), gauss]


# Taken on 229631a, the commit before the base: stored_state() after _searched(kind, steps), its
# random state written as _mersenne(), and the next trial's _proposal().
MORPHISM_BEFORE = {
    "hyperparameters": {
        "space": [
            {
                "class_name": "Float",
                "config": {
                    "name": "learning_rate",
                    "default": 0.005,
                    "conditions": [],
                    "min_value": 0.005,
                    "max_value": 0.1,
                    "step": None,
                    "sampling": "log",
                },
            },
            {
                "class_name": "Choice",
                "config": {
                    "name": "batch_size",
                    "default": 32,
                    "conditions": [],
                    "values": [32, 64, 128],
                    "ordered": True,
                },
            },
            {
                "class_name": "Choice",
                "config": {
                    "name": "kernel_size",
                    "default": 3,
                    "conditions": [],
                    "values": [3, 5],
                    "ordered": True,
                },
            },
            {
                "class_name": "Choice",
                "config": {
                    "name": "dropout",
                    "default": 0.0,
                    "conditions": [],
                    "values": [0.0, 0.2, 0.4],
                    "ordered": True,
                },
            },
        ],
        "values": {"learning_rate": 0.005, "batch_size": 32, "kernel_size": 3, "dropout": 0.0},
    },
    "retry_queue": [],
    "seed": 6,
    "seed_state": 6,
    "display": {"search_start": None, "trial_start": {}, "trial_number": {}},
    "morphism": {"rng": _mersenne(6, 1018)},
    "newest_trial": "000006",
}
MORPHISM_NEXT = {
    "learning_rate": 0.00848580011250577,
    "batch_size": 64,
    "kernel_size": 5,
    "dropout": 0.0,
    "architecture": "fbc9ad4876f087727e8ae5becf043cdf1915628b36321f98adaf110762700e5b",
    "parent": "000004",
    "operator": "skip(source=stem_relu,target=stage1_block1_1_relu)",
}
GROWTH_BEFORE = {
    "hyperparameters": {
        "space": [
            {
                "class_name": "Float",
                "config": {
                    "name": "learning_rate",
                    "default": 0.0001,
                    "conditions": [],
                    "min_value": 0.0001,
                    "max_value": 0.01,
                    "step": None,
                    "sampling": "log",
                },
            },
            {
                "class_name": "Choice",
                "config": {
                    "name": "batch_size",
                    "default": 3,
                    "conditions": [],
                    "values": [3, 16, 32],
                    "ordered": True,
                },
            },
            {
                "class_name": "Choice",
                "config": {
                    "name": "dropout",
                    "default": 0.0,
                    "conditions": [],
                    "values": [0.0, 0.1],
                    "ordered": True,
                },
            },
            {
                "class_name": "Choice",
                "config": {
                    "name": "batch_tokens",
                    "default": 100,
                    "conditions": [],
                    "values": [100, 512, 1024],
                    "ordered": True,
                },
            },
            {
                "class_name": "Choice",
                "config": {
                    "name": "warmup_epochs",
                    "default": 0.0,
                    "conditions": [],
                    "values": [0.0, 0.5],
                    "ordered": True,
                },
            },
            {
                "class_name": "Choice",
                "config": {
                    "name": "weight_decay",
                    "default": 0.0,
                    "conditions": [],
                    "values": [0.0, 0.01, 0.1],
                    "ordered": True,
                },
            },
        ],
        "values": {
            "learning_rate": 0.0001,
            "batch_size": 3,
            "dropout": 0.0,
            "batch_tokens": 100,
            "warmup_epochs": 0.0,
            "weight_decay": 0.0,
        },
    },
    "retry_queue": [],
    "seed": 6,
    "seed_state": 6,
    "display": {"search_start": None, "trial_start": {}, "trial_number": {}},
    "growth": {"rng": _mersenne(6, 187)},
    "newest_trial": "000009",
}
GROWTH_NEXT = {
    "learning_rate": 0.003088660361017726,
    "batch_tokens": 100,
    "dropout": 0.1,
    "warmup_epochs": 0.5,
    "weight_decay": 0.0,
    "batch_size": 3,
    "architecture": "46b77aae139eaefd62d64141474a5759d1253869ada895a8d6e5cada7bf958bd",
    "parent": "000009",
    "operator": "deepen",
}

DATA = {"morphism": (MORPHISM_BEFORE, MORPHISM_NEXT), "growth": (GROWTH_BEFORE, GROWTH_NEXT)}

LM_SPACE = {
    "learning_rate": [1e-4, 1e-2],
    "batch_tokens": [512, 1024, 100],
    "warmup_epochs": [0.0, 0.5],
    "weight_decay": [0.0, 0.01, 0.1],
    "dropout": [0.0, 0.1],
}


def _oracle(kind: str, seed: int) -> kt.Oracle:
    """The scenario's oracle: the CNN track's quick profile, or the LM track's with inherit."""
    if kind == "morphism":
        return make_oracle(load_config("quick", workers=2, seed=seed), (16, 16, 3), 10)
    search = {
        "oracle": "morphism",
        "seed_architecture": "lm-tiny",
        "objective": "val_loss",
        "space": LM_SPACE,
        "inherit": True,
    }
    config = load_config("lm-quick", workers=2, seed=seed, overrides={"search": search})
    return make_oracle(config, (32, 1, 1), 256)


def _searched(kind: str, steps: int) -> kt.Oracle:
    """The oracle after `steps` trials, each proposed, scored and ended, as the flow does."""
    oracle = _oracle(kind, seed=5)
    rng = random.Random(3)
    for i in range(steps):
        trial = oracle.create_trial(f"s{i}")
        score = rng.random() if kind == "morphism" else rng.uniform(1.0, 5.0)
        oracle.update_trial(trial.trial_id, {oracle.objective.name: score}, step=0)
        trial.status = "COMPLETED"
        oracle.end_trial(trial)
    return oracle


def _records(oracle: kt.Oracle) -> list[Any]:
    """The trials as the run's records hold them: TrialRecord's fields that restore reads."""
    lower = oracle.objective.direction == "min"
    records = []
    for number, trial in enumerate(oracle.trials.values()):
        values = dict(trial.hyperparameters.values)
        records.append(
            SimpleNamespace(
                number=number,
                trial_key=trial.trial_id,
                hyperparameters=values,
                architecture=json.loads(values.pop(space.ARCHITECTURE)),
                status=TrialStatus.COMPLETED,
                ended_at=float(number),
                best_val_accuracy=None if lower else trial.score,
                best_val_loss=trial.score if lower else None,
            )
        )
    return records


def _timeless(state: dict[str, Any]) -> dict[str, Any]:
    """The state without keras-tuner's display clock (when each trial started, wall time)."""
    display = {
        k: v for k, v in state["display"].items() if k not in ("search_start", "trial_start")
    }
    return {**state, "display": display}


def _proposal(trial: kt.engine.trial.Trial) -> dict[str, Any]:
    """The trial's values, its architecture's JSON as its SHA-256 (a ResNet's is kilobytes)."""
    values = dict(trial.hyperparameters.values)
    values[space.ARCHITECTURE] = hashlib.sha256(values[space.ARCHITECTURE].encode()).hexdigest()
    return values


@pytest.mark.parametrize("kind, steps", [("morphism", 7), ("growth", 10)])
def test_a_state_stored_before_the_base_resumes_the_same_search(kind: str, steps: int) -> None:
    before, proposed = DATA[kind]
    oracle = _searched(kind, steps)
    state, records = stored_state(oracle), _records(oracle)
    assert set(oracle.get_state()) == set(before) - {"newest_trial"} | set(PER_TRIAL)
    assert _timeless(state) == _timeless(before), "the same state, in the same format"
    assert _proposal(oracle.create_trial("next")) == proposed
    resumed = restore(_oracle(kind, seed=98), before, records, oracle.objective.name)
    assert _proposal(resumed.create_trial("next")) == proposed, "the stored state, read"
