"""Every searched hyperparameter changes the built model or its training (in AIPerf, kernel size
and dropout changed nothing). Each comparison is made against a rerun of the same request, which
must give identical numbers, so a difference is the hyperparameter's doing and not noise."""

import dataclasses
import time
from pathlib import Path

import pytest

from aiperf.arch import build_model, seed_spec
from aiperf.arch.morph import deepen
from aiperf.config import load_config
from aiperf.data.staging import stage_synthetic
from aiperf.ops import count_model
from aiperf.search import space
from aiperf.train.messages import TrialRequest
from aiperf.train.trial import run_trial

from conftest import TINY


@pytest.fixture(scope="module")
def request_base(tmp_path_factory):
    config = load_config("quick", workers=1, overrides=TINY)
    manifest = stage_synthetic(config.data, 0, Path(tmp_path_factory.mktemp("data")))
    net = seed_spec("resnet-mini", manifest.image_shape, manifest.classes)
    return TrialRequest(run_id=1, trial_key="t", architecture=net.to_dict(), learning_rate=0.02, batch_size=32,
                        epochs=1, deadline=time.time() + 3600, data_path=manifest.path, seed=7)


def losses(request):
    result = run_trial(request, lambda _m: None)
    assert result.status == "completed", result.message
    return [(e.loss, e.val_loss) for e in result.epochs]


@pytest.fixture(scope="module")
def baseline(request_base):
    return losses(request_base)


def test_training_is_reproducible(request_base, baseline):
    assert losses(request_base) == baseline


@pytest.mark.parametrize("change", [{"learning_rate": 0.08}, {"batch_size": 64}, {"dropout": 0.4}])
def test_training_hyperparameters_change_training(request_base, baseline, change):
    assert losses(dataclasses.replace(request_base, **change)) != baseline


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
    values = {space.ARCHITECTURE: net.to_json(), space.LEARNING_RATE: 0.03, space.BATCH_SIZE: 64,
              space.KERNEL_SIZE: 5, space.DROPOUT: 0.2, space.PARENT: "000001", space.OPERATOR: "seed"}
    proposal = space.decode(values, (16, 16, 3), 10)
    assert (proposal.learning_rate, proposal.batch_size, proposal.dropout) == (0.03, 64, 0.2)
    assert proposal.network == net and proposal.parent_key == "000001"
    family = space.decode({space.STAGES: 2, space.BLOCKS_PER_STAGE: 1, space.BASE_FILTERS: 8,
                           space.KERNEL_SIZE: 5, space.LEARNING_RATE: 0.01, space.BATCH_SIZE: 32,
                           space.DROPOUT: 0.0}, (16, 16, 3), 10)
    kernels = {n.params["kernel"] for n in family.network.nodes if n.kind == "conv" and "block" in n.id
               and "proj" not in n.id}
    assert kernels == {5}
