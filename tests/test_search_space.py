"""Every searched hyperparameter changes the built model or its training (in AIPerf, kernel size
and dropout changed nothing). Each comparison is made against a rerun of the same request, which
must give identical numbers, so a difference is the hyperparameter's doing and not noise."""

import dataclasses
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import TINY

from aiperf.arch import build_model, seed_spec
from aiperf.arch.morph import deepen
from aiperf.config import load_config
from aiperf.data.staging_npz import stage_synthetic
from aiperf.ops import count_model
from aiperf.search import space
from aiperf.train.messages import TrialRequest
from aiperf.train.trial import CORES_ENV


@pytest.fixture(scope="module")
def request_base(tmp_path_factory):
    config = load_config("quick", workers=1, overrides=TINY)
    manifest = stage_synthetic(config.data, 0, Path(tmp_path_factory.mktemp("data")))
    net = seed_spec("resnet-mini", manifest.image_shape, manifest.classes)
    return TrialRequest(
        run_id=1,
        trial_key="t",
        architecture=net.to_dict(),
        learning_rate=0.02,
        batch_size=32,
        epochs=1,
        deadline=time.time() + 3600,
        data_path=manifest.path,
        seed=7,
    )


CHANGES = [{"learning_rate": 0.08}, {"batch_size": 64}, {"dropout": 0.4}]

# Trains the base request twice, then each change, in a fresh process with one thread per kernel, as a
# worker with one core trains: with more threads, TensorFlow's kernels may sum in another order from
# one call to the next, and the losses differ in their last digits (seen once in `make test`).
TRAIN = """
import dataclasses, json, sys
from aiperf.train.messages import TrialRequest
from aiperf.train.trial import run_trial
base = TrialRequest(**json.loads(sys.argv[1]))
losses = []
for change in [{}, {}] + json.loads(sys.argv[2]):
    result = run_trial(dataclasses.replace(base, **change), lambda _m: None)
    assert result.status == "completed", result.message
    losses.append([[e.loss, e.val_loss] for e in result.epochs])
print(json.dumps(losses))
"""


@pytest.fixture(scope="module")
def trained(request_base) -> dict:
    done = subprocess.run(
        [
            sys.executable,
            "-c",
            TRAIN,
            json.dumps(dataclasses.asdict(request_base)),
            json.dumps(CHANGES),
        ],
        capture_output=True,
        text=True,
        timeout=600,
        env={**os.environ, CORES_ENV: "1"},
    )
    assert done.returncode == 0, done.stderr[-3000:]
    first, again, *changed = json.loads(done.stdout.splitlines()[-1])
    return {"baseline": first, "again": again, "changed": changed}


def test_training_is_reproducible(trained):
    assert trained["again"] == trained["baseline"]


@pytest.mark.parametrize("index", range(len(CHANGES)), ids=[next(iter(c)) for c in CHANGES])
def test_training_hyperparameters_change_training(trained, index):
    assert trained["changed"][index] != trained["baseline"]


def test_dropout_puts_a_dropout_layer_before_the_head():
    net = seed_spec("resnet-mini", (16, 16, 3), 10)
    model = build_model(net, dropout=0.4)
    assert model.layers[-2].name == "head_dropout" and model.layers[-2].rate == 0.4
    assert "head_dropout" not in [layer.name for layer in build_model(net).layers]


def test_kernel_size_sets_the_kernel_of_added_convolutions():
    net = seed_spec("resnet-mini", (16, 16, 3), 10)
    k3, k5 = deepen(net, "stem_relu", 3), deepen(net, "stem_relu", 5)
    assert build_model(k3).get_layer("m1_conv").kernel.shape[:2] == (3, 3)
    assert build_model(k5).get_layer("m1_conv").kernel.shape[:2] == (5, 5)
    assert count_model(build_model(k5)).forward > count_model(build_model(k3)).forward


def test_oracle_values_reach_the_trial():
    net = seed_spec("resnet-mini", (16, 16, 3), 10)
    values = {
        space.ARCHITECTURE: net.to_json(),
        space.LEARNING_RATE: 0.03,
        space.BATCH_SIZE: 64,
        space.KERNEL_SIZE: 5,
        space.DROPOUT: 0.2,
        space.PARENT: "000001",
        space.OPERATOR: "seed",
    }
    proposal = space.decode(values, (16, 16, 3), 10)
    assert (proposal.learning_rate, proposal.batch_size, proposal.dropout) == (0.03, 64, 0.2)
    assert proposal.network == net and proposal.parent_key == "000001"
    family = space.decode(
        {
            space.STAGES: 2,
            space.BLOCKS_PER_STAGE: 1,
            space.BASE_FILTERS: 8,
            space.KERNEL_SIZE: 5,
            space.LEARNING_RATE: 0.01,
            space.BATCH_SIZE: 32,
            space.DROPOUT: 0.0,
        },
        (16, 16, 3),
        10,
    )
    kernels = {
        n.params["kernel"]
        for n in family.network.nodes
        if n.kind == "conv" and "block" in n.id and "proj" not in n.id
    }
    assert kernels == {5}
