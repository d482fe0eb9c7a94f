"""A quick real run writes an event log from which OPS and the regulated score are recomputed exactly;
`aiperf package` then `aiperf verify --package` passes on a clean copy of the package, without the
database, and fails naming the check on a package whose log was edited; bad input is one line.
The run's system description names this machine (its CPU, cores and memory)."""

from __future__ import annotations

import json
import math
import shutil
import socket
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path

import psutil
import pytest
from conftest import TINY

from aiperf.config import load_config
from aiperf.lifecycle import run
from aiperf.report import package
from aiperf.results import mllog, verify
from aiperf.results.score import capped_accuracy
from aiperf.store import Store
from aiperf.system.fingerprint import cpu_model


@pytest.fixture(scope="module")
def quick_run(tmp_path_factory):
    """A short real run (Keras trials on 2 workers, no Prefect): its database, config and event log."""
    folder = tmp_path_factory.mktemp("package")
    config = load_config(
        "quick",
        budget="20s",
        workers=2,
        db=f"sqlite:///{folder / 'aiperf.db'}",
        out=str(folder / "out"),
        seed=3,
        overrides=TINY,
    )
    outcome = run.run_benchmark(config)
    assert outcome.verified, "the run's own verification passed"
    return config, outcome.run_id, run.event_log(config, outcome.run_id).path


def _events(path: Path) -> list[dict]:
    """The log read with nothing but json: anyone can recompute the score from it."""
    return [
        json.loads(line.removeprefix(":::MLLOG "))
        for line in path.read_text().splitlines()
        if line.strip()
    ]


def _at(seconds: float) -> datetime:
    return datetime.fromtimestamp(seconds, tz=UTC)


def test_the_log_alone_recomputes_ops_and_the_regulated_score_exactly(quick_run):
    config, run_id, path = quick_run
    events = _events(path)
    ops = {
        e["metadata"]["trial_key"]: e["value"]["aiperf"]
        for e in events
        if e["key"] == "ops_per_sample"
    }
    total = sum(
        e["value"] * ops[e["metadata"]["trial_key"]]["train"]
        for e in events
        if e["key"] == "train_samples"
    ) + sum(
        e["value"] * ops[e["metadata"]["trial_key"]]["eval"]
        for e in events
        if e["key"] == "eval_samples"
    )
    starts = [e["metadata"]["time_s"] for e in events if e["key"] == "search_start"]
    stops = [e["metadata"]["time_s"] for e in events if e["key"] == "search_stop"]
    elapsed = sum((_at(b) - _at(a)).total_seconds() for a, b in zip(starts, stops, strict=False))
    complete = {
        (e["metadata"]["trial_key"], e["metadata"]["epoch_num"])
        for e in events
        if e["key"] == "epoch_stop" and e["metadata"]["complete"]
    }
    best = max(
        (
            e["value"]
            for e in events
            if e["key"] == "eval_accuracy"
            and e["value"] is not None
            and (e["metadata"]["trial_key"], e["metadata"]["epoch_num"]) in complete
        ),
        default=None,
    )
    (dataset,) = [e["value"] for e in events if e["key"] == "dataset"]
    ops_per_s = total / elapsed
    regulated = (
        0.0
        if best is None
        else ops_per_s * abs(math.log(1.0 - capped_accuracy(best, dataset["val_samples"])))
    )

    with Store.open_existing(config.db) as store:
        stored = store.get_run(run_id).score
    assert total > 0 and stored.total_ops == total
    assert (
        stored.elapsed_s == elapsed
        and stored.ops == ops_per_s
        and stored.regulated_score == regulated
    )
    (logged_score,) = [e["value"] for e in events if e["key"] == "score"]
    assert (
        logged_score["ops"] == stored.ops
        and logged_score["regulated_score"] == stored.regulated_score
    )


def test_the_records_rebuilt_from_the_log_pass_every_check(quick_run):
    config, run_id, path = quick_run
    logged = mllog.read_run(path)
    checks = verify.verify_records(logged.run, logged.dataset)
    assert [c.check for c in checks] == list(verify.CHECKS) and all(c.passed for c in checks), (
        checks
    )
    with Store.open_existing(config.db) as store:
        record = store.get_run(run_id)
    assert logged.run.score == record.score and logged.run.windows == record.windows


def test_a_local_run_describes_this_machine(quick_run):
    config, run_id, path = quick_run
    with Store.open_existing(config.db) as store:
        description = store.get_run(run_id).system_description
    assert description["number_of_nodes"] == 1
    (node,) = description["nodes"]
    assert node["hostname"] == socket.gethostname() and len(node["workers"]) == 2
    assert (
        node["host_processor_model_name"]
        == cpu_model()
        == description["host_processor_model_name"]
    )
    assert node["host_processor_vcpu_count"] == psutil.cpu_count(logical=True)
    assert node["host_cores_total"] == (
        psutil.cpu_count(logical=False) or psutil.cpu_count(logical=True)
    )
    assert node["host_memory_bytes"] == psutil.virtual_memory().total
    written = json.loads((path.parent / "system_description.json").read_text())
    assert written == description
    assert mllog.read_run(path).run.system_description == description
    page = run.write_report(config, run_id)[0].read_text()
    assert cpu_model() in page and 'id="plot-search-tree"' in page


def aiperf(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "aiperf.cli.main", *args],
        capture_output=True,
        text=True,
        timeout=300,
        env={"COLUMNS": "250", "PATH": "/usr/bin:/bin", "TF_CPP_MIN_LOG_LEVEL": "3"},
    )


@pytest.fixture(scope="module")
def packaged(quick_run, tmp_path_factory) -> Path:
    config, run_id, _path = quick_run
    folder = tmp_path_factory.mktemp("packaged") / "run-package"
    result = aiperf("package", str(run_id), "--to", str(folder), "--db", config.db)
    assert result.returncode == 0, result.stderr[-3000:]
    return folder


def test_package_holds_what_a_reviewer_needs(packaged, quick_run):
    _config, run_id, path = quick_run
    names = {p.name for p in packaged.iterdir()}
    assert names == {
        "events.log",
        "system_description.json",
        "config.json",
        "aiperf-rules-1.2.yaml",
        "verification.json",
        "report.html",
        "README.md",
        "package.json",
    }
    assert (packaged / "events.log").read_bytes() == path.read_bytes()
    verification = json.loads((packaged / "verification.json").read_text())
    assert verification["verified"] is True and len(verification["from_event_log"]) == len(
        verify.CHECKS
    )
    readme = (packaged / "README.md").read_text()
    assert "aiperf verify --package" in readme and "events.log" in readme
    assert json.loads((packaged / "package.json").read_text())["run_id"] == run_id


def test_verify_package_passes_on_a_clean_copy(packaged, tmp_path):
    copy = shutil.copytree(packaged, tmp_path / "elsewhere")
    result = aiperf("verify", "--package", str(copy))
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert f"all {len(verify.CHECKS)} checks pass" in result.stdout


def _edit(copy: Path, key: str, change, where=lambda value: True) -> None:
    """Change the value of the first `key` event (whose value is `where`) of the copy's log."""
    lines = (copy / "events.log").read_text().splitlines()
    for i, line in enumerate(lines):
        event = json.loads(line.removeprefix(":::MLLOG "))
        if event["key"] == key and where(event["value"]):
            event["value"] = change(event["value"])
            lines[i] = ":::MLLOG " + json.dumps(event)
            break
    (copy / "events.log").write_text("\n".join(lines) + "\n")


def test_verify_package_fails_naming_the_check_on_an_edited_log(packaged, tmp_path):
    copy = shutil.copytree(packaged, tmp_path / "edited")
    _edit(copy, "train_samples", lambda samples: samples - 32, where=lambda samples: samples >= 64)
    result = aiperf("verify", "--package", str(copy))
    assert result.returncode == 1, result.stdout[-3000:] + result.stderr[-3000:]
    failed = result.stdout.strip().splitlines()[-1]
    assert "FAILED" in failed and verify.TOTAL_OPERATIONS in failed, failed


@pytest.mark.parametrize(
    "key, change, check",
    [
        (
            "ops_per_sample",
            lambda v: {**v, "aiperf": {**v["aiperf"], "train": v["aiperf"]["train"] * 2}},
            verify.OPERATIONS_PER_SAMPLE,
        ),
        ("eval_samples", lambda samples: 10**9, verify.SAMPLES_WITHIN_DATASET),
        (
            "score",
            lambda score: {**score, "regulated_score": score["regulated_score"] * 1.5},
            verify.REGULATED_SCORE,
        ),
        ("submission_division", lambda division: "closed", verify.DIVISION),
    ],
)
def test_each_edit_is_caught_by_name(packaged, tmp_path, key, change, check):
    copy = shutil.copytree(packaged, tmp_path / "edited")
    _edit(copy, key, change)
    _logged, checks = package.verify_package(copy)
    assert check in {c.check for c in checks if not c.passed}


def one_line_error(result: subprocess.CompletedProcess, fragment: str) -> None:
    assert result.returncode == 2, result.stdout + result.stderr
    assert fragment in result.stderr, result.stderr
    assert "Traceback" not in result.stderr + result.stdout
    assert len(result.stderr.strip().splitlines()) == 1, result.stderr


def test_bad_packages_are_one_line_errors(packaged, tmp_path):
    one_line_error(aiperf("verify", "--package", str(tmp_path / "nowhere")), "does not exist")
    (tmp_path / "empty").mkdir()
    one_line_error(
        aiperf("verify", "--package", str(tmp_path / "empty")), "is not an aiperf package"
    )
    broken = shutil.copytree(packaged, tmp_path / "broken")
    lines = (broken / "events.log").read_text().splitlines()
    lines[4] = lines[4][: len(lines[4]) // 2]  # a line cut in half
    (broken / "events.log").write_text("\n".join(lines) + "\n")
    one_line_error(aiperf("verify", "--package", str(broken)), "line 5 is not valid JSON")
    one_line_error(aiperf("verify"), "give a RUN_ID")
    one_line_error(aiperf("verify", "1", "--package", str(packaged)), "give a RUN_ID")


def test_bad_package_commands_are_one_line_errors(quick_run, packaged, tmp_path):
    config, run_id, _path = quick_run
    one_line_error(
        aiperf("package", str(run_id), "--to", str(packaged), "--db", config.db),
        "is not an empty folder",
    )
    one_line_error(
        aiperf("package", "99", "--to", str(tmp_path / "p"), "--db", config.db), "run 99 is not in"
    )
    one_line_error(
        aiperf(
            "package",
            str(run_id),
            "--to",
            str(tmp_path / "p"),
            "--db",
            config.db,
            "--log",
            str(tmp_path / "none.log"),
        ),
        "event log is not at",
    )
    assert not (tmp_path / "p").exists(), "nothing is written when the package cannot be made"
