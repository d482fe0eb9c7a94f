"""End to end: a small ImageNet-layout folder of real JPEGs is staged by the benchmark flow on its
Dask workers (converted to shards, copied node-local, checksums verified), a benchmark runs on
it, and the run's records hold the dataset manifest and the staging's time, which `aiperf show`
and the event log show beside the window."""

from __future__ import annotations

import json
import sqlite3

import pytest
from conftest import TINY, scored

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def folder_run(prefect_api, make_image_folder, tmp_path_factory):
    from aiperf_flows.benchmark import benchmark

    folder = tmp_path_factory.mktemp("folder-run")
    images = make_image_folder(folder / "images", train_per_class=30, val_per_class=10, seed=5)
    db = f"sqlite:///{folder / 'aiperf.db'}"
    overrides = {
        **TINY,
        "data.kind": "folder",
        "data.source": str(images),
        "data.image_size": 16,
        "data.shard_images": 16,
        "data.stage_to": str(folder / "node-local"),
    }
    result = scored(
        benchmark,
        profile="quick",
        budget="12s",
        workers=2,
        db=db,
        seed=4,
        out=str(folder / "out"),
        overrides=overrides,
    )
    return result, folder


def test_run_records_the_dataset_manifest(folder_run):
    result, folder = folder_run
    with sqlite3.connect(folder / "aiperf.db") as sql:
        status = sql.execute(
            "SELECT status FROM runs WHERE id = ?", (result["run_id"],)
        ).fetchone()[0]
        name, kind, sha, train, val, classes, manifest = sql.execute(
            "SELECT name, kind, sha256, train_samples, val_samples, classes, manifest FROM datasets "
            "WHERE run_id = ?",
            (result["run_id"],),
        ).fetchone()
    assert status == "completed"
    manifest = json.loads(manifest)
    assert (kind, train, val, classes) == ("folder", 90, 30, 3)
    assert manifest["images_per_class"] == {"cat": 30, "dog": 30, "fish": 30}
    assert manifest["val_images_per_class"] == {"cat": 10, "dog": 10, "fish": 10}
    assert [s["name"] for s in manifest["shards"]][:2] == [
        "train-00000-of-00006",
        "train-00001-of-00006",
    ]
    assert all(len(s["sha256"]) == 64 and s["size_bytes"] > 0 for s in manifest["shards"])
    assert manifest["sha256"] == sha and name == manifest["name"]
    # Copied node-local once for the node of both Dask workers (the trials read that copy),
    # checksums verified there.
    assert len(manifest["copies"]) == 1 and manifest["stage_to"] == str(folder / "node-local")
    local = folder / "node-local" / name
    copy = json.loads((local / "manifest.json").read_text())
    assert copy["path"] == str(local) and copy["sha256"] == sha
    assert {s["name"] for s in copy["shards"]} == {s["name"] for s in manifest["shards"]}


def test_the_staging_time_is_recorded_and_shown_beside_the_window(folder_run):
    from typer.testing import CliRunner

    from aiperf.cli.main import app
    from aiperf.paths import event_log_path
    from aiperf.results.mllog import STAGING_START, STAGING_STOP, read_events, read_run

    result, folder = folder_run
    db = f"sqlite:///{folder / 'aiperf.db'}"
    with sqlite3.connect(folder / "aiperf.db") as sql:
        (staging_s,) = sql.execute(
            "SELECT staging_s FROM runs WHERE id = ?", (result["run_id"],)
        ).fetchone()
    assert staging_s > 0
    shown = CliRunner().invoke(app, ["show", str(result["run_id"]), "--db", db])
    assert shown.exit_code == 0, shown.output
    line = next(line for line in shown.output.splitlines() if "data staging" in line)
    assert f"{staging_s:.1f} s" in line and "before the window" in line
    log = event_log_path(str(folder / "out"), db, result["run_id"])
    keys = [e.key for e in read_events(log)]
    assert keys.index(STAGING_START) < keys.index(STAGING_STOP) < keys.index("search_start")
    assert read_run(log).run.staging_s == staging_s


def test_trials_trained_on_the_shards_with_exact_counts(folder_run):
    result, folder = folder_run
    with sqlite3.connect(folder / "aiperf.db") as sql:
        rows = sql.execute(
            """SELECT t.hyperparameters, e.samples_trained, e.samples_evaluated, e.complete,
                                     e.val_accuracy
                              FROM epochs e JOIN trials t ON t.id = e.trial_id WHERE t.run_id = ?""",
            (result["run_id"],),
        ).fetchall()
    complete = [r for r in rows if r[3]]
    assert complete, "at least one epoch completed within the budget"
    for hyperparameters, trained, evaluated, _complete, val_accuracy in complete:
        batch = json.loads(hyperparameters)["batch_size"]
        assert trained == 90 // batch * batch and evaluated == 30
        assert val_accuracy is not None
    assert result["ops"] > 0


def test_a_broken_folder_fails_the_run_before_anything_is_recorded(
    prefect_api, make_image_folder, tmp_path
):
    import time

    from aiperf.data.problems import DataError
    from aiperf_flows.benchmark import benchmark

    images = make_image_folder(tmp_path / "images", train_per_class=2, val_per_class=1)
    for f in (images / "val" / "fish").iterdir():
        f.unlink()
    db = tmp_path / "aiperf.db"
    started = time.time()
    with pytest.raises(DataError, match="class folder val/fish is empty"):
        benchmark(
            profile="quick",
            budget="20s",
            workers=1,
            db=f"sqlite:///{db}",
            out=str(tmp_path / "out"),
            overrides={**TINY, "data.kind": "folder", "data.source": str(images)},
        )
    assert time.time() - started < 15, "no cluster was started for a folder that cannot be staged"
    # Checked with the rest of the run's input, before its row exists (aiperf.lifecycle.preflight).
    assert not db.exists() and not (tmp_path / "out").exists(), "nothing was recorded"
