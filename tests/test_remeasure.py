"""The weights a trial keeps for `aiperf verify` to evaluate again (aiperf.train.kept.BestWeights,
aiperf.results.remeasure), and a user's model file loaded without running its code (issue 25 items
2 and 10). The checks on a real run's kept weights are in tests/test_verify.py (the database) and
tests/test_package.py (a package), on those files' real runs."""

from __future__ import annotations

import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

from pathlib import Path  # noqa: E402

import keras  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402
import typer  # noqa: E402
from typer.testing import CliRunner  # noqa: E402

from aiperf import paths  # noqa: E402
from aiperf.cli import flops as ops_cli  # noqa: E402
from aiperf.results import remeasure  # noqa: E402
from aiperf.train.kept import BestWeights  # noqa: E402
from aiperf.train.messages import EpochReport  # noqa: E402


def _model() -> keras.Model:
    inputs = keras.Input((4,))
    return keras.Model(inputs, keras.layers.Dense(3)(inputs))


def _epoch(number: int, accuracy: float | None, complete: bool = True) -> EpochReport:
    return EpochReport(
        trial_key="t",
        epoch=number,
        started_at=0.0,
        ended_at=1.0,
        samples_trained=32,
        samples_evaluated=32 if complete else 0,
        loss=1.0,
        accuracy=0.5,
        val_loss=1.0,
        val_accuracy=accuracy,
        complete=complete,
    )


def test_a_trial_writes_the_weights_of_each_new_best_complete_epoch_at_once(
    tmp_path: Path,
) -> None:
    """Weights set to the epoch's number before each offer: the file is written at each new best,
    and holds epoch 1's in the end, the first of the best accuracy (epoch 2 ties it, epoch 3 is
    incomplete, epoch 4 is worse)."""
    model = _model()
    kept = BestWeights(str(tmp_path / paths.weights_file(7)))
    path = tmp_path / "weights" / "trial-7.weights.h5"
    written = []
    for number, accuracy, complete in [
        (0, 0.5, True),
        (1, 0.75, True),
        (2, 0.75, True),
        (3, None, False),
        (4, 0.6, True),
    ]:
        model.set_weights([np.full_like(w, number) for w in model.get_weights()])
        if kept.offer(model, _epoch(number, accuracy, complete)):
            written.append(number)
            assert path.is_file(), "written before the epoch is reported"
    assert written == [0, 1]
    assert [p.name for p in path.parent.iterdir()] == [path.name], "no partial file left"
    again = _model()
    again.load_weights(str(path))
    assert all(np.all(w == 1) for w in again.get_weights())
    assert (kept.epoch, kept.value) == (1, 0.75)


def test_a_trial_without_a_path_or_a_complete_epoch_writes_nothing(tmp_path: Path) -> None:
    model = _model()
    assert not BestWeights(None).offer(model, _epoch(0, 0.9))
    unfinished = BestWeights(str(tmp_path / "w.weights.h5"))
    assert not unfinished.offer(model, _epoch(0, None, complete=False))
    assert not any(tmp_path.iterdir())


@pytest.mark.parametrize(
    "relative, inside",
    [
        ("weights/trial-0.weights.h5", True),
        ("../weights/trial-0.weights.h5", False),
        ("/etc/passwd", False),
        ("", False),
    ],
)
def test_a_recorded_weights_path_must_stay_inside_the_runs_folder(
    tmp_path: Path, relative: str, inside: bool
) -> None:
    assert (remeasure.inside_folder(tmp_path, relative) is not None) is inside


# --- aiperf flops on a user's file: keras' safe mode ---------------------------------------------


def test_flops_refuses_a_keras_file_with_python_code_in_one_line(tmp_path: Path) -> None:
    """A Lambda layer carries Python code; loading it would run the file's code. Refused (Keras'
    safe_mode), in one line, exit 2."""
    inputs = keras.Input((4,))
    outputs = keras.layers.Dense(2)(keras.layers.Lambda(lambda t: t * 2.0)(inputs))
    path = tmp_path / "lambda.keras"
    keras.Model(inputs, outputs).save(path)
    app = typer.Typer()
    app.command("flops")(ops_cli.flops)
    app.command("other")(lambda: None)
    result = CliRunner().invoke(app, ["flops", str(path)])
    assert result.exit_code == 2, result.output
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "holds Python code" in lines[0], result.stderr
    assert "Traceback" not in result.output


def test_sharded_data_still_staged_is_read_where_it_is(tmp_path: Path) -> None:
    """A staged folder whose manifest.json carries the recorded digest is evaluated on as it is
    (staging it again would re-read every shard); one with another digest is not, and without a
    folder to stage into that is an error naming it."""
    import json
    from types import SimpleNamespace

    from aiperf.store import DatasetRecord

    staged = tmp_path / "digits"
    staged.mkdir()
    (staged / "manifest.json").write_text(json.dumps({"sha256": "d" * 64}))

    def evidence(sha256: str) -> object:
        dataset = DatasetRecord(
            name="digits",
            kind="digits",
            sha256=sha256,
            train_samples=1,
            val_samples=1,
            classes=10,
            manifest={"path": str(staged)},
        )
        return SimpleNamespace(dataset=dataset, data_folder=None, config=None)

    assert remeasure._staged_data(evidence("d" * 64)) == str(staged)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="no folder to stage"):
        remeasure._staged_data(evidence("e" * 64))  # type: ignore[arg-type]
