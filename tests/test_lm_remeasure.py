"""verify's re-measure of a language-model run (aiperf.results.remeasure): the run keeps the
weights of its lowest-loss trial and epoch, evaluating them again gives the recorded validation
loss within the ruleset's loss_tolerance, and weights or records changed after the run fail the
check. Also verify's recount of a transformer's operations (aiperf.results.verify).

The run is one real LM trial (aiperf.train.trial.run_trial) on tiny staged synthetic text; its
records are built from what the trial reported, as the store would hold them. The parts of the
evidence the check does not read for an LM (the score, the config beyond train and data) are
plain namespaces."""

from __future__ import annotations

import os
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path
from types import SimpleNamespace

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import h5py  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402
from test_lm_trial import TINY_TEXT, lm_request, tiny_spec  # noqa: E402

from aiperf import paths  # noqa: E402
from aiperf.arch.transformer import build_transformer  # noqa: E402
from aiperf.config import DataConfig  # noqa: E402
from aiperf.data.manifest import sha256_file  # noqa: E402
from aiperf.data.staging_tokens import stage_tokens  # noqa: E402
from aiperf.ops import count_all  # noqa: E402
from aiperf.results import remeasure  # noqa: E402
from aiperf.results.evidence import Evidence  # noqa: E402
from aiperf.results.verify import count_architecture  # noqa: E402
from aiperf.status import TrialStatus  # noqa: E402
from aiperf.store import EpochRecord, TrialRecord  # noqa: E402
from aiperf.train.trial import run_trial  # noqa: E402

TOLERANCE = 1e-3  # nats per token: float32 evaluated again on the same CPU, same batches
NOW = datetime.now(UTC)


def _record(result, number: int) -> TrialRecord:
    """The trial as the store records it."""
    epochs = tuple(
        EpochRecord(
            epoch=e.epoch,
            started_at=NOW,
            ended_at=NOW,
            samples_trained=e.samples_trained,
            samples_evaluated=e.samples_evaluated,
            loss=e.loss,
            accuracy=e.accuracy,
            val_loss=e.val_loss,
            val_accuracy=e.val_accuracy,
            complete=e.complete,
        )
        for e in result.epochs
    )
    return TrialRecord(
        id=number + 1,
        run_id=1,
        trial_key=result.trial_key,
        number=number,
        parent_trial_id=None,
        operator=None,
        architecture=tiny_spec().to_dict(),
        hyperparameters={"batch_size": 32, "dropout": 0.0, "learning_rate": 0.01},
        status=result.status,
        worker="here",
        started_at=NOW,
        ended_at=NOW,
        parameters=result.built.parameters,
        train_ops_per_sample=result.built.train_ops,
        eval_ops_per_sample=result.built.eval_ops,
        tensor_train_ops_per_sample=result.built.tensor_train_ops,
        tensor_eval_ops_per_sample=result.built.tensor_eval_ops,
        best_val_accuracy=max(e.val_accuracy for e in epochs if e.val_accuracy is not None),
        message=None,
        epochs=epochs,
    )


@pytest.fixture(scope="module")
def lm_run(tmp_path_factory):
    """Two trials of one LM run (the second's learning rate too small to reach the first's loss),
    trained for real into the run's folder, their weights kept as the run keeps them."""
    root = tmp_path_factory.mktemp("lm-run")
    manifest = stage_tokens(DataConfig(**TINY_TEXT), 0, root / "data")
    folder = root / "run"
    trials = []
    for number, rate in ((0, 0.0003), (1, 0.01)):
        request = lm_request(
            manifest.path,
            folder / paths.weights_file(number),
            trial_key=f"lm{number}",
            learning_rate=rate,
            epochs=2,
        )
        result = run_trial(request, lambda _m: None)
        assert result.status == TrialStatus.COMPLETED, result.message
        trials.append(_record(result, number))
    run = SimpleNamespace(
        trials=tuple(trials), best_weights=None, precision="float32", data_feed=None
    )
    run.best_weights = remeasure.keep_best_weights(run, folder)  # type: ignore[arg-type]
    return run, folder, root / "data"


def _evidence(run, folder: Path, data: Path) -> Evidence:
    config = SimpleNamespace(
        train=SimpleNamespace(trainer="keras", label_smoothing=0.0, precision="float32"),
        data=DataConfig(**TINY_TEXT),
        seed=0,
    )
    return Evidence(
        run=run,
        config=config,  # type: ignore[arg-type]
        dataset=None,
        counts={},
        elapsed_s=1.0,
        # best_val_loss None: the check takes the records' lowest, as for a run scored without one
        recomputed=SimpleNamespace(best_val_accuracy=None, best_val_loss=None),  # type: ignore[arg-type]
        folder=folder,
        data_folder=data,
    )


def _rules(tolerance: float | None = TOLERANCE):
    return SimpleNamespace(name="lm-test", loss_tolerance=tolerance, accuracy_tolerance=0.5)


def test_the_run_keeps_its_lowest_loss_trial_and_epoch(lm_run):
    run, folder, _data = lm_run
    lowest = min(
        ((e.val_loss, t.number, e.epoch) for t in run.trials for e in t.epochs),
        key=lambda x: x[0],
    )
    kept = run.best_weights
    assert kept is not None and (kept["val_loss"], kept["trial"], kept["epoch"]) == lowest
    # Only the kept trial's file is left in the run's weights folder.
    assert [p.name for p in (folder / paths.WEIGHTS_FOLDER).iterdir()] == [Path(kept["file"]).name]


def test_the_kept_weights_give_the_recorded_loss(lm_run):
    run, folder, data = lm_run
    check = remeasure.check_accuracy_remeasured(_evidence(run, folder, data), _rules())
    assert check.passed, check.detail
    assert "val_loss" in check.detail and f"recorded {run.best_weights['val_loss']!r}" in (
        check.detail
    )


def test_tampered_weights_fail_even_with_their_digest_recorded(lm_run, tmp_path):
    """Weights changed after the run, and their new sha256 written into the records too: the loss
    they give is not the recorded one. Without the new digest, the digest check refuses them."""
    run, folder, data = lm_run
    copy = tmp_path / "run"
    target = copy / run.best_weights["file"]
    target.parent.mkdir(parents=True)
    target.write_bytes((folder / run.best_weights["file"]).read_bytes())
    with h5py.File(target, "r+") as f:
        tampered = []
        f.visititems(
            lambda name, item: (
                tampered.append(name)
                if isinstance(item, h5py.Dataset) and "embedding" in name
                else None
            )
        )
        assert tampered, "the token embedding is in the file"
        for name in tampered:
            f[name][...] = np.asarray(f[name]) * 0.5
    edited = replace_kept(run, sha256=sha256_file(target))
    check = remeasure.check_accuracy_remeasured(_evidence(edited, copy, data), _rules())
    assert not check.passed and "tolerance" in check.detail, check.detail
    stale = remeasure.check_accuracy_remeasured(_evidence(run, copy, data), _rules())
    assert not stale.passed and "sha256" in stale.detail, stale.detail


def test_a_better_loss_written_into_the_records_fails(lm_run):
    """The kept epoch's loss lowered in the epoch and the kept weights' record together: the
    weights give the loss they earned, not the edited one."""
    run, folder, data = lm_run
    kept = run.best_weights
    better = kept["val_loss"] - 0.2
    trials = tuple(
        replace(
            t,
            epochs=tuple(
                replace(e, val_loss=better) if e.epoch == kept["epoch"] else e for e in t.epochs
            ),
        )
        if t.number == kept["trial"]
        else t
        for t in run.trials
    )
    edited = SimpleNamespace(**{**vars(run), "trials": trials, "best_weights": None})
    edited.best_weights = {**kept, "val_loss": better}
    check = remeasure.check_accuracy_remeasured(_evidence(edited, folder, data), _rules())
    assert not check.passed and "tolerance" in check.detail, check.detail


def test_a_ruleset_without_a_loss_tolerance_keeps_no_check(lm_run):
    run, folder, data = lm_run
    check = remeasure.check_accuracy_remeasured(_evidence(run, folder, data), _rules(None))
    assert check.passed and "no loss tolerance" in check.detail


def test_verify_recounts_a_transformers_operations_per_sequence():
    counts = count_all(build_transformer(tiny_spec(), seed=3))
    assert count_architecture(tiny_spec().to_dict()) == (
        counts["aiperf"].train_per_sample,
        counts["aiperf"].eval_per_sample,
        counts["tensor"].train_per_sample,
        counts["tensor"].eval_per_sample,
    )


def replace_kept(run, **changes):
    """The run with its kept weights' record changed."""
    return SimpleNamespace(**{**vars(run), "best_weights": {**run.best_weights, **changes}})
