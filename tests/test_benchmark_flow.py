"""The whole benchmark through the real Prefect flow on real Dask workers, with a budget of seconds,
on a small ImageNet-layout folder of real JPEGs that the flow stages on its workers; then its score
recomputed from SQL alone, the CLI reading the records, and the dataset's manifest and staging time
recorded and shown beside the window."""

import json
import math
import re
import sqlite3
from datetime import datetime

import pytest
from conftest import TINY, scored
from typer.testing import CliRunner

from aiperf.arch import network_from_dict
from aiperf.arch.morph import Morphism, apply
from aiperf.cli.main import app
from aiperf.store import Store

pytestmark = pytest.mark.slow


FINAL_STATE: dict = {}  # the module's flow run's state, as the fixture got it


@pytest.fixture(scope="module")
def finished_run(prefect_api, make_image_folder, tmp_path_factory):
    """One run of the benchmark flow, on a small ImageNet-layout folder of real JPEGs, which the
    flow stages on its Dask workers (converted to shards, copied node-local, checksums verified):
    every test here reads it (one run's workers, window and report for the flow's and the folder
    data's tests, which ran one each: make test's CPU, docs/performance.md "The test suite")."""
    from aiperf_flows.benchmark import benchmark

    folder = tmp_path_factory.mktemp("run")
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
    state = benchmark(
        profile="quick",
        budget="20s",
        workers=2,
        db=db,
        seed=3,
        out=str(folder / "out"),
        overrides=overrides,
        return_state=True,
    )
    FINAL_STATE["run"] = state  # for the test of the run's final state, below
    return scored(state.result), db, folder / "aiperf.db"


@pytest.fixture(scope="module")
def folder_run(finished_run):
    """The run's result and its folder (database, `out`, the node-local copy of its data)."""
    result, _db, path = finished_run
    return result, path.parent


def test_a_scored_run_too_short_to_be_valid_ends_failed_named_invalid(finished_run):
    """Issue 26 item 2: a dashboard never counts an invalid result a success; whoever runs the
    flow still gets its score, with the exception its state carries."""
    from aiperf.lifecycle.run import ResultNotValid

    result, _db, _path = finished_run
    state = FINAL_STATE["run"]
    assert state.is_failed() and state.name == "Invalid", state
    assert state.message.startswith(f"run {result['run_id']}: invalid: too short: budget 20 s")
    with pytest.raises(ResultNotValid) as raised:
        state.result()
    assert raised.value.outcome == result and result["valid"] is False and result["ops"] > 0


def test_run_is_recorded_with_trials_and_epochs(finished_run):
    result, _db, path = finished_run
    with sqlite3.connect(path) as sql:
        status, profile = sql.execute(
            "SELECT status, profile FROM runs WHERE id = ?", (result["run_id"],)
        ).fetchone()
        assert (status, profile) == ("completed", "quick")
        trials = sql.execute(
            "SELECT status, worker, train_ops_per_sample, eval_ops_per_sample FROM trials"
        ).fetchall()
        epochs = sql.execute("SELECT COUNT(*) FROM epochs WHERE complete").fetchone()[0]
        dataset = sql.execute("SELECT kind, train_samples FROM datasets").fetchone()
    assert len(trials) >= 2
    assert all(t[1] for t in trials), "every trial records the Dask worker it ran on"
    assert all(t[2] > t[3] > 0 for t in trials if t[0] == "completed")
    assert sum(t[0] == "completed" for t in trials) >= 1
    assert epochs >= 2
    assert dataset == ("folder", 90)


def test_score_recomputed_from_sql(finished_run):
    result, _db, path = finished_run
    with sqlite3.connect(path) as sql:
        total = sql.execute(
            """
            SELECT SUM(e.samples_trained * t.train_ops_per_sample + e.samples_evaluated * t.eval_ops_per_sample)
            FROM epochs e JOIN trials t ON t.id = e.trial_id WHERE t.run_id = ?""",
            (result["run_id"],),
        ).fetchone()[0]
        start, end = sql.execute(
            "SELECT search_started_at, search_ended_at FROM runs WHERE id = ?", (result["run_id"],)
        ).fetchone()
        stored = sql.execute(
            "SELECT total_ops, ops, elapsed_s, regulated_score, best_val_accuracy, val_samples "
            "FROM scores WHERE run_id = ?",
            (result["run_id"],),
        ).fetchone()
        best = sql.execute("SELECT MAX(val_accuracy) FROM epochs WHERE complete").fetchone()[0]
    elapsed = (datetime.fromisoformat(end) - datetime.fromisoformat(start)).total_seconds()
    assert total > 0 and stored[0] == pytest.approx(total)
    assert stored[2] == pytest.approx(elapsed, abs=1e-3)
    assert stored[1] == pytest.approx(total / elapsed, rel=1e-6)
    assert stored[4] == pytest.approx(best)
    capped = min(best, 1 - 1 / stored[5])
    assert stored[3] == pytest.approx(stored[1] * abs(math.log(1 - capped)), rel=1e-6)
    assert result["ops"] == pytest.approx(stored[1])
    assert result["elapsed_s"] >= 20


def test_the_flow_verifies_its_own_score(finished_run):
    result, _db, path = finished_run
    assert result["verified"] is True
    with sqlite3.connect(path) as sql:
        verified, checks = sql.execute(
            "SELECT verified, verification FROM scores WHERE run_id = ?", (result["run_id"],)
        ).fetchone()
        division, deviations = sql.execute(
            "SELECT division, deviations FROM runs WHERE id = ?", (result["run_id"],)
        ).fetchone()
    from aiperf.results.verify import CHECKS

    assert verified == 1 and len(json.loads(checks)) == len(CHECKS)
    assert division == "open" and "data.image_size: 32 -> 16" in json.loads(deviations)


def test_score_published_as_artifacts(finished_run):
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import ArtifactFilter, ArtifactFilterKey

    with get_client(sync_client=True) as client:
        artifacts = client.read_artifacts(
            artifact_filter=ArtifactFilter(
                key=ArtifactFilterKey(
                    any_=["aiperf-score", "aiperf-score-summary", "aiperf-report-summary"]
                )
            )
        )
    assert {a.type for a in artifacts} >= {"table", "markdown"}
    table = next(a for a in artifacts if a.type == "table")
    figures = {
        row["figure"]
        for row in (json.loads(table.data) if isinstance(table.data, str) else table.data)
    }
    assert {"MFU", "window utilisation", "training"} <= figures, figures
    summary = next(a for a in artifacts if a.key == "aiperf-report-summary").data
    assert "Where each worker's window went" in summary and "| compile |" in summary, summary


def test_cli_lists_and_shows_the_run(finished_run):
    result, db, _path = finished_run
    listing = CliRunner().invoke(app, ["runs", "--db", db], env={"COLUMNS": "200"})
    assert listing.exit_code == 0, listing.output
    assert "completed" in listing.output
    shown = CliRunner().invoke(
        app, ["show", str(result["run_id"]), "--db", db], env={"COLUMNS": "200"}
    )
    assert shown.exit_code == 0, shown.output
    assert "regulated score" in shown.output and "trials of run" in shown.output
    # Whether the run was feed-bound, from the rates its workers measured before the window.
    assert "feed (before the window)" in shown.output and "tf.data" in shown.output
    assert "feed-bound" in shown.output
    as_json = CliRunner().invoke(
        app, ["show", str(result["run_id"]), "--db", db, "--json"], env={"COLUMNS": "200"}
    )
    assert as_json.exit_code == 0, as_json.output
    shown_json = json.loads(as_json.output)
    # Its figures' 95% intervals, from its trials' spread (two seeds at least: one a worker).
    low, high = shown_json["ops_interval"]
    assert low < shown_json["ops"] < high
    low, high = shown_json["regulated_score_interval"]
    assert low < shown_json["regulated_score"] < high
    assert "95% interval" in shown.output
    rates = shown_json["feed_rates"]
    assert shown_json["data_feed"] == "tf.data" and len(rates) == 2  # one per worker
    assert all(r["feed_images_per_s"] > 0 and r["device_images_per_s"] > 0 for r in rates)
    feed = shown_json["feed"]
    fed = sum(r["feed_images_per_s"] for r in rates)
    assert feed["feed_bound"] == (fed < sum(r["device_images_per_s"] for r in rates))
    tree = CliRunner().invoke(
        app, ["show", str(result["run_id"]), "--db", db, "--tree"], env={"COLUMNS": "200"}
    )
    assert tree.exit_code == 0, tree.output
    assert "search tree of run" in tree.output and "seed" in tree.output


def test_children_are_one_morphism_from_their_parents(finished_run):
    result, db, _path = finished_run
    store = Store.open(db)
    trials = store.get_run(result["run_id"]).trials
    by_id = {t.id: t for t in trials}
    seeds = [t for t in trials if t.operator == "seed"]
    children = [t for t in trials if t.operator != "seed"]
    assert len(seeds) == 2, "the first round trains the seed on both workers"
    assert all(t.parent_trial_id is None for t in seeds)
    for child in children:
        parent = network_from_dict(by_id[child.parent_trial_id].architecture)
        assert apply(parent, Morphism.parse(child.operator)) == network_from_dict(
            child.architecture
        )
    state = store.search_state(result["run_id"])
    assert state is not None and state["morphism"]["rng"], "the oracle's state is in the database"
    assert state["newest_trial"] == max(t.trial_key for t in trials), (
        "as it was after the newest trial"
    )


def test_workers_stay_busy_and_stop_at_the_deadline(finished_run):
    result, _db, path = finished_run
    with sqlite3.connect(path) as sql:
        deadline = datetime.fromisoformat(sql.execute("SELECT deadline FROM runs").fetchone()[0])
        trials = sql.execute(
            "SELECT worker, started_at, ended_at FROM trials ORDER BY number"
        ).fetchall()
        last_epoch = datetime.fromisoformat(
            sql.execute("SELECT MAX(ended_at) FROM epochs").fetchone()[0]
        )
    assert len({t[0] for t in trials}) == 2, "both workers ran trials"
    spans = [(datetime.fromisoformat(a), datetime.fromisoformat(b)) for _w, a, b in trials]
    overlapping = any(
        s1 < e2 and s2 < e1 for i, (s1, e1) in enumerate(spans) for (s2, e2) in spans[i + 1 :]
    )
    assert overlapping, "trials ran concurrently"
    # A trial notices the deadline after its current batch: well within seconds on tiny models.
    assert (last_epoch - deadline).total_seconds() < 10


def test_the_event_log_is_written_and_linked_as_an_artifact(finished_run):
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import (
        ArtifactFilter,
        ArtifactFilterFlowRunId,
        ArtifactFilterKey,
    )

    from aiperf.results import mllog

    result, _db, path = finished_run
    (log,) = (path.parent / "out").glob(f"run-*-{result['run_id']}/events.log")
    logged = mllog.read_run(log)
    assert logged.run.stored_status == "completed" and logged.run.score.ops == result["ops"]
    assert logged.run.system_description["number_of_nodes"] == 1
    # The feed and its rates are facts of the run: in the event log as in the database.
    with Store.open_existing(f"sqlite:///{path}") as store:
        stored = store.get_run(result["run_id"])
    assert logged.run.data_feed == stored.data_feed == "tf.data"
    assert list(logged.run.feed_rates) == list(stored.feed_rates) and len(stored.feed_rates) == 2
    with sqlite3.connect(path) as sql:
        flow_run_id = sql.execute(
            "SELECT flow_run_id FROM runs WHERE id = ?", (result["run_id"],)
        ).fetchone()[0]
    with get_client(sync_client=True) as client:
        links = client.read_artifacts(
            artifact_filter=ArtifactFilter(
                key=ArtifactFilterKey(any_=["aiperf-event-log"]),
                flow_run_id=ArtifactFilterFlowRunId(any_=[flow_run_id]),
            )
        )
    assert len(links) == 1 and log.resolve().as_uri() in links[0].data


def test_progress_and_stopped_trials_show_in_prefect(finished_run):
    """Issue 26 item 3: the budget used as a progress artifact that reached 100 %, the best figures
    so far as a markdown artifact with a version per update, and each trial the deadline stopped in
    a completed task run state named Stopped (any other trial's is a plain Completed)."""
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import (
        ArtifactFilter,
        ArtifactFilterFlowRunId,
        FlowRunFilter,
        FlowRunFilterId,
    )

    _result, _db, path = finished_run
    flow_run_id = FINAL_STATE["run"].state_details.flow_run_id
    with sqlite3.connect(path) as sql:
        statuses = dict(sql.execute("SELECT trial_key, status FROM trials").fetchall())
    with get_client(sync_client=True) as client:
        artifacts = client.read_artifacts(
            artifact_filter=ArtifactFilter(flow_run_id=ArtifactFilterFlowRunId(any_=[flow_run_id]))
        )
        tasks = client.read_task_runs(
            flow_run_filter=FlowRunFilter(id=FlowRunFilterId(any_=[flow_run_id]))
        )
    (progress,) = [a for a in artifacts if a.key == "aiperf-progress"]
    assert progress.type == "progress" and float(progress.data) == 100.0, progress
    best = sorted((a for a in artifacts if a.key == "aiperf-best"), key=lambda a: a.created)
    assert len(best) >= 3, "published as the search starts, as trials end and as it ends"
    first = re.search(
        r"\((\d+)%\)", best[0].data
    )  # as the search starts: 0 %, or 1 % on a busy machine
    assert first and int(first.group(1)) < 10, best[0].data
    assert "(100%)" in best[-1].data, best[-1].data
    last = best[-1].data  # a figure, whatever it is: this folder's images are easy to learn
    assert re.search(r"\| best val accuracy \| [01]\.\d{4} \(trial \d+\)", last), last
    trials = {t.name.removeprefix("trial-"): t.state for t in tasks if t.name.startswith("trial-")}
    assert set(trials) == set(statuses)
    assert "stopped" in statuses.values(), "the deadline stopped the trials running then"
    for key, state in trials.items():
        named = "Stopped" if statuses[key] == "stopped" else "Completed"
        assert state.is_completed() and state.name == named, (key, statuses[key], state)
        if named == "Stopped":
            assert state.message.startswith("stopped by the run's deadline after"), state


# --- the folder data, staged by the flow ---------------------------------------------------------


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


def test_workers_load_the_trial_code_before_the_window(prefect_api):
    """The flow's trial runner has every worker import the trial task's module and Prefect's task
    engine as it opens, before any trial: a first trial would otherwise do it inside the window. And
    nothing of the search's: keras-tuner and its framework are the head's, so a simulated run's
    workers never import TensorFlow (a worker that trains imports its framework as it warms up)."""
    import sys

    from distributed import Client

    from aiperf.cluster.start import local_cluster
    from aiperf.config import load_config
    from aiperf_flows.benchmark import PrefectStages

    def loaded() -> list[str]:
        return sorted(
            name
            for name in (
                "aiperf_flows.benchmark",
                "prefect.task_engine",
                "keras_tuner",
                "tensorflow",
            )
            if name in sys.modules
        )

    config = load_config("quick", workers=2, overrides=TINY)
    with local_cluster(2) as cluster, Client(cluster, security=cluster.security) as client:
        assert list(client.run(loaded).values()) == [[], []], (
            "a fresh worker has loaded nothing yet"
        )
        with PrefectStages().trials(config, cluster.scheduler_address, cluster.security):
            after = client.run(loaded)
    assert list(after.values()) == [["aiperf_flows.benchmark", "prefect.task_engine"]] * 2
