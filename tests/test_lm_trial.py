"""A language-model trial (aiperf.train.lm inside aiperf.train.trial.run_trial) on tiny staged
synthetic text: it completes, learns (validation loss in nats per token under a uniform guess's
ln 256), counts operations per sequence as aiperf.ops.count_all does, keeps the weights of its
lowest-loss epoch, and runs on JAX with jit, mixed_bfloat16 and two logical devices."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
import time
from pathlib import Path

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import keras  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402

from aiperf import quality  # noqa: E402
from aiperf.arch import grow  # noqa: E402
from aiperf.arch.transformer import build_transformer, transformer_seed  # noqa: E402
from aiperf.config import DataConfig  # noqa: E402
from aiperf.data.staging_tokens import stage_tokens  # noqa: E402
from aiperf.ops import count_all  # noqa: E402
from aiperf.status import TrialStatus  # noqa: E402
from aiperf.train import lm  # noqa: E402
from aiperf.train.kept import BestWeights, inherited_lm  # noqa: E402
from aiperf.train.messages import EpochReport, TrialBuilt, TrialRequest  # noqa: E402
from aiperf.train.trial import run_trial  # noqa: E402

# 251 validation windows: an odd number, so that the JAX trial on two devices evaluates 250 of
# them (Keras' DataParallel shards every batch evenly: aiperf.data.tokens.open_token_feed).
TINY_TEXT = {"kind": "synthetic-text", "train_tokens": 20_000, "val_tokens": 4_017, "seq_len": 16}
SHRUNK = {"layers": 1, "d_model": 16, "heads": 2, "mlp_width": 32, "seq_len": 16}


def tiny_spec():
    """lm-tiny shrunk to one block of width 16 over 16 positions (byte vocabulary)."""
    return transformer_seed("lm-tiny", **SHRUNK)


def lm_request(data_path: str, weights: Path | None, **changes) -> TrialRequest:
    values = {
        "run_id": 1,
        "trial_key": "lm0",
        "architecture": tiny_spec().to_dict(),
        "learning_rate": 0.01,
        "batch_size": 32,
        "epochs": 3,
        # Far off: the trial trains every epoch however slow the machine.
        "deadline": time.time() + 600,
        "data_path": data_path,
        "seed": 1,
        "optimizer": "adam",
        "weights_path": None if weights is None else str(weights),
        **changes,
    }
    return TrialRequest(**values)


@pytest.fixture(scope="module")
def tokens(tmp_path_factory):
    return stage_tokens(DataConfig(**TINY_TEXT), 0, tmp_path_factory.mktemp("tokens"))


@pytest.fixture(scope="module")
def trained(tokens, tmp_path_factory):
    """One LM trial of three epochs, its reports and its kept weights."""
    weights = tmp_path_factory.mktemp("run") / "weights" / "trial-0.weights.h5"
    reports: list = []
    result = run_trial(lm_request(tokens.path, weights), reports.append)
    return result, reports, weights


def test_an_lm_trial_completes_and_learns(trained, tokens):
    result, reports, _weights = trained
    assert result.status == TrialStatus.COMPLETED, result.message
    epochs = [r for r in reports if isinstance(r, EpochReport)]
    assert [e.epoch for e in epochs] == [0, 1, 2] and result.epochs == epochs
    sequences = (20_000 - 1) // 16
    for e in epochs:
        # Samples are sequences: whole batches of windows trained, every validation window once.
        assert e.complete and e.samples_trained == sequences // 32 * 32
        assert e.samples_evaluated == tokens.val_samples == (4_017 - 1) // 16
        assert e.val_loss is not None and math.isfinite(e.val_loss)
        assert e.val_accuracy is not None and 0.0 <= e.val_accuracy <= 1.0
    # Nats per token, below the uniform guess over 256 bytes: the model learnt the text's bytes.
    assert min(e.val_loss for e in epochs) < math.log(256) - 1.0, [e.val_loss for e in epochs]


def test_its_operations_are_count_alls_per_sequence(trained):
    result, reports, _weights = trained
    built = reports[0]
    assert isinstance(built, TrialBuilt) and result.built == built
    counts = count_all(build_transformer(tiny_spec(), seed=0))
    assert (built.train_ops, built.eval_ops) == (
        counts["aiperf"].train_per_sample,
        counts["aiperf"].eval_per_sample,
    )
    assert (built.tensor_train_ops, built.tensor_eval_ops) == (
        counts["tensor"].train_per_sample,
        counts["tensor"].eval_per_sample,
    )
    spec = tiny_spec()
    assert built.parameters == spec.param_count
    # A sample is a whole sequence: its forward pass does at least one multiply-add per weight
    # of the blocks for each of its 16 positions.
    assert built.eval_ops > 2 * (spec.param_count - spec.vocab_size * spec.d_model) * spec.seq_len


def test_the_kept_weights_are_the_lowest_loss_epochs(trained, tokens):
    """The file holds the weights that give the lowest recorded val_loss: evaluated again here
    they give that epoch's loss, not another epoch's."""
    from aiperf.data.tokens import open_token_feed

    result, _reports, weights = trained
    losses = [e.val_loss for e in result.epochs]
    model = build_transformer(tiny_spec(), seed=5)
    model.load_weights(str(weights))
    model.compile(loss=lm.lm_loss(), metrics=lm.lm_metrics())
    feed = open_token_feed(tokens.path, batch_size=32, seq_len=16, seed=0)
    again = model.evaluate(**feed.val, verbose=0, return_dict=True)["loss"]
    assert abs(again - min(losses)) < 1e-4, (again, losses)


def test_best_weights_of_a_language_model_follow_the_lowest_loss(tmp_path):
    """Losses 3.0, 2.5, 2.5 (a tie: no new best), an incomplete epoch, 2.7: written at epochs 0
    and 1, whatever their accuracies say (epoch 4's is the highest)."""
    inputs = keras.Input((4,))
    model = keras.Model(inputs, keras.layers.Dense(3)(inputs))
    kept = BestWeights(str(tmp_path / "w.weights.h5"), quality.LOSS)
    written = []
    for number, loss, accuracy, complete in [
        (0, 3.0, 0.1, True),
        (1, 2.5, 0.2, True),
        (2, 2.5, 0.3, True),
        (3, 1.0, None, False),
        (4, 2.7, 0.9, True),
    ]:
        model.set_weights([np.full_like(w, number) for w in model.get_weights()])
        report = EpochReport("t", number, 0.0, 1.0, 32, 32, 1.0, 0.5, loss, accuracy, complete)
        if kept.offer(model, report):
            written.append(number)
    assert written == [0, 1] and (kept.epoch, kept.value) == (1, 2.5)
    model.load_weights(str(tmp_path / "w.weights.h5"))
    assert all(np.all(w == 1) for w in model.get_weights())


def _grown(operator: str):
    spec = tiny_spec()
    if operator == "deepen":
        return grow.deepen(spec, 1)
    if operator == "widen_mlp":
        return grow.widen_mlp(spec, 2)
    if operator == "widen_model":
        return grow.widen_model(spec, 2)
    return grow.widen_heads(spec, spec.heads)


@pytest.mark.parametrize("operator", grow.PRESERVING)
def test_a_grown_child_starts_at_its_parent_s_kept_loss(trained, tokens, operator):
    """search.inherit's promise, in a real trial as a worker runs it: a child grown by a
    function-preserving step from the trained parent's kept weights, trained at a rate of 0 (its
    weights stay what it started from), has a first validation loss equal to the parent's kept
    one, and records which of the parent's epochs it grew from. (From fresh weights it would start
    near ln 256, nats above the parent's.)"""
    result, _reports, weights = trained
    kept = min(result.epochs, key=lambda e: e.val_loss)
    child = {
        "trial_key": f"child-{operator}",
        "architecture": _grown(operator).to_dict(),
        "learning_rate": 0.0,
        "epochs": 1,
        "seed": 7,
    }
    inherited = run_trial(
        lm_request(
            tokens.path,
            None,
            parent_architecture=tiny_spec().to_dict(),
            parent_weights=str(weights),
            **child,
        ),
        lambda _m: None,
    )
    assert inherited.status == TrialStatus.COMPLETED, inherited.message
    assert inherited.built is not None and inherited.built.inherited_epoch == kept.epoch
    assert abs(inherited.epochs[0].val_loss - kept.val_loss) < 1e-3, (inherited.epochs, kept)


def test_a_child_whose_parent_kept_nothing_starts_fresh(tokens, tmp_path):
    """A parent's weights this worker cannot read (a run folder it does not share, or a parent
    that kept none) leave the child to train from fresh weights, recorded as inheriting nothing."""
    request = lm_request(
        tokens.path,
        None,
        architecture=_grown("widen_mlp").to_dict(),
        parent_architecture=tiny_spec().to_dict(),
        parent_weights=str(tmp_path / "weights" / "trial-0.weights.h5"),
        epochs=1,
    )
    model, epoch = inherited_lm(request)
    assert epoch is None and model.count_params() == _grown("widen_mlp").param_count


JAX_TRIAL = """
import json, sys, time
from aiperf.train.trial import configure_threads, run_trial, worker_cores
sys.path.insert(0, sys.argv[2])
from test_lm_trial import lm_request

configure_threads(worker_cores())
r = run_trial(lm_request(sys.argv[1], None, epochs=1, devices=2, jit_compile=True,
                         precision="mixed_bfloat16", batch_size=16), lambda _m: None)
print(json.dumps({"status": r.status, "message": r.message, "devices": r.built and r.built.devices,
                  "placement": r.built and list(r.built.placement),
                  "val_loss": [e.val_loss for e in r.epochs],
                  "samples": [e.samples_trained for e in r.epochs],
                  "evaluated": [e.samples_evaluated for e in r.epochs]}))
"""


@pytest.mark.slow
def test_on_jax_with_jit_bfloat16_and_two_devices(tokens):
    """One epoch on JAX, jitted, in mixed_bfloat16, data-parallel across two logical CPU devices
    (XLA_FLAGS makes them, as a worker's environment does): it completes with a finite loss, each
    step a global batch of 2 x 16 sequences."""
    from aiperf import settings

    env = {
        **os.environ,
        "KERAS_BACKEND": "jax",
        "XLA_FLAGS": "--xla_force_host_platform_device_count=2",
        "JAX_PLATFORMS": "cpu",
        settings.WORKER_DEVICES.name: "2",
    }
    done = subprocess.run(
        [sys.executable, "-c", JAX_TRIAL, tokens.path, str(Path(__file__).parent)],
        capture_output=True,
        text=True,
        env=env,
        cwd=Path(__file__).resolve().parents[1],
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    found = json.loads(done.stdout.strip().splitlines()[-1])
    assert found["status"] == "completed", found["message"]
    assert found["devices"] == 2 and len(set(found["placement"])) == 2, found
    assert found["samples"] == [(20_000 - 1) // 16 // 32 * 32]
    assert found["evaluated"] == [250]  # 251 windows, evenly over two devices
    assert math.isfinite(found["val_loss"][0]) and found["val_loss"][0] < math.log(256) + 0.5
