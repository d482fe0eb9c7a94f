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
from in_process import aiperf_here

from aiperf import paths
from aiperf.lifecycle.scoring import write_report
from aiperf.report import package, package_files
from aiperf.results import mllog, record_checks, remeasure, verify
from aiperf.results.score import capped_accuracy
from aiperf.rules import load_ruleset
from aiperf.store import CheckRecord, Store
from aiperf.system.fingerprint import cpu_model


@pytest.fixture(scope="module")
def quick_run(short_real_run):
    """The session's short real run (conftest.py: Keras trials on 2 workers, no Prefect): its config,
    run id and event log."""
    config, run_id = short_real_run.config, short_real_run.run_id
    return config, run_id, paths.event_log_path(config.out, config.db, run_id)


def _events(path: Path) -> list[dict]:
    """The log read with nothing but json: anyone can recompute the score from it."""
    return [
        json.loads(line.removeprefix(":::MLLOG "))
        for line in path.read_text().splitlines()
        if line.strip()
    ]


def _at(seconds: float) -> datetime:
    return datetime.fromtimestamp(seconds, tz=UTC)


def test_the_report_s_score_over_time_ends_at_the_headline(quick_run):
    """Issue 49: a CNN run's score over time is judged by accuracy and ends at its headline."""
    from aiperf import quality
    from aiperf.report.timeline import aiperf_checkpoints, judge_of, score_over_time, window

    config, run_id, _ = quick_run
    with Store.open_existing(config.db) as store:
        run = store.get_run(run_id)
        span = window(run)
        assert span is not None and run.score is not None
        last = score_over_time(run, aiperf_checkpoints(span[1]), judge_of(store, run))[-1]
    assert last.metric == quality.ACCURACY
    assert last.best_quality == pytest.approx(run.score.best_val_accuracy)
    assert last.regulated_score == pytest.approx(run.score.regulated_score, rel=1e-9)


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
    checks = verify.verify_records(
        logged.run, logged.dataset, folder=path.parent, data_folder=Path(config.out) / "data"
    )
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
    page = write_report(config, run_id)[0].read_text()
    assert cpu_model() in page and 'id="search-tree"' in page


def aiperf(*args: str) -> subprocess.CompletedProcess:
    """The command as a reviewer runs it: a process of its own, with nothing of the tests'
    environment (the edited copies are checked in this process: `aiperf_here`)."""
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
        "aiperf-rules-1.3.yaml",
        "verification.json",
        "report.html",
        "README.md",
        "package.json",
        "weights",
    }
    assert (packaged / "events.log").read_bytes() == path.read_bytes()
    kept = mllog.read_run(path).run.best_weights
    assert kept is not None, "the run kept its best trial's weights"
    assert remeasure.sha256_file(packaged / kept["file"]) == kept["sha256"]
    assert kept["file"] in json.loads((packaged / "package.json").read_text())["files"]
    verification = json.loads((packaged / "verification.json").read_text())
    assert verification["verified"] is True and len(verification["from_event_log"]) == len(
        verify.CHECKS
    )
    readme = (packaged / "README.md").read_text()
    assert "aiperf verify --package" in readme and "events.log" in readme
    assert f"`{kept['file']}`: the weights of the best trial's best epoch" in readme
    assert json.loads((packaged / "package.json").read_text())["run_id"] == run_id


def test_a_run_without_a_meter_says_so_in_show_and_its_package(packaged, quick_run):
    """Issue 51: this machine has no meter; the run says so, node by node, with why, and its energy
    figures are null, never zero; its verdict and score are its speed's alone."""
    from in_process import aiperf_here

    config, run_id, _ = quick_run
    shown = aiperf_here("show", str(run_id), "--db", config.db, "--json")
    assert shown.returncode == 0, shown.stderr
    found = json.loads(shown.stdout)
    assert (found["energy_joules"], found["ops_per_watt"], found["energy_level"]) == (None,) * 3
    [node] = found["energy"]["nodes"]
    assert node["meters"] == [] and {"bmc", "nvml", "rapl"} <= set(node["absent"])
    line = found["energy"]["line"]
    assert line.startswith("not measured: no node had a meter (") and node["node"] in line
    assert not any("energy" in reason for reason in found["reasons"])
    table = aiperf_here("show", str(run_id), "--db", config.db)
    assert "not measured: no node had a meter" in table.stdout
    readme = (packaged / "README.md").read_text()
    assert f"- energy: {line}" in readme
    described = json.loads((packaged / "system_description.json").read_text())
    assert described["nodes"][0]["energy_meters"]["absent"] == node["absent"]


def test_verify_package_passes_on_a_clean_copy(packaged, tmp_path):
    copy = shutil.copytree(packaged, tmp_path / "elsewhere")
    result = aiperf("verify", "--package", str(copy))
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    # every check of the records, and the package's files and power logs held to the log
    assert f"all {len(verify.CHECKS) + 2} checks pass" in result.stdout
    _logged, checks = package.verify_package(copy)
    (held,) = [c for c in checks if c.check == package_files.PACKAGE_FILES]
    assert held.passed and "system_description.json, config.json" in held.detail, held.detail


def _edit_json(copy: Path, name: str, change) -> None:
    """Rewrite the copy's `name` (a JSON file) as `change` gives it, as a person would."""
    path = copy / name
    path.write_text(json.dumps(change(json.loads(path.read_text())), indent=2) + "\n")


def _files_failed(copy: Path) -> str:
    """`aiperf verify --package` on the copy fails package_files (and nothing else); its detail."""
    result = aiperf_here("verify", "--package", str(copy))
    assert result.returncode == 1, result.stdout[-3000:] + result.stderr[-3000:]
    assert (
        result.stdout.strip().splitlines()[-1].endswith(f"FAILED {package_files.PACKAGE_FILES}")
    ), result.stdout[-3000:]
    _logged, checks = package.verify_package(copy)
    failed = [c for c in checks if not c.passed]
    assert [c.check for c in failed] == [package_files.PACKAGE_FILES], failed
    return failed[0].detail


def test_a_system_description_edited_to_claim_8_h100s_fails_verify_package(packaged, tmp_path):
    """Issue 34 item 1: the package's files are held to its event log, field by field."""
    copy = shutil.copytree(packaged, tmp_path / "claimed")
    _edit_json(
        copy,
        "system_description.json",
        lambda d: {
            **d,
            "accelerators_per_node": "8",
            "accelerator_model_name": "NVIDIA H100 80GB HBM3",
        },
    )
    detail = _files_failed(copy)
    assert 'system_description.json: accelerators_per_node is "8", the log\'s "0"' in detail
    assert "system_description.json: accelerator_model_name is" in detail, detail


def test_a_config_edited_after_the_run_fails_verify_package(packaged, quick_run, tmp_path):
    config, _run_id, _path = quick_run
    copy = shutil.copytree(packaged, tmp_path / "config")
    _edit_json(copy, "config.json", lambda c: {**c, "budget_s": c["budget_s"] * 10})
    detail = _files_failed(copy)
    assert (
        f"config.json: budget_s is {config.budget_s * 10}, the log's {config.budget_s}" in detail
    )


def test_a_verification_file_edited_to_hide_a_failure_fails_verify_package(packaged, tmp_path):
    copy = shutil.copytree(packaged, tmp_path / "verification")

    def hide(document: dict) -> dict:
        stored = [
            {**c, "detail": "edited"} if i == 0 else c for i, c in enumerate(document["stored"])
        ]
        return {**document, "stored": stored}

    _edit_json(copy, "verification.json", hide)
    assert 'verification.json: stored[0].detail is "edited"' in _files_failed(copy)


def test_the_owners_word_in_the_system_description_is_not_the_logs(packaged, tmp_path):
    """Who submits a result and its status are given when it is packaged, not logged: editing them
    changes no check (the results list reads them from the file)."""
    copy = shutil.copytree(packaged, tmp_path / "owner")
    _edit_json(copy, "system_description.json", lambda d: {**d, "submitter": "Another Lab"})
    _logged, checks = package.verify_package(copy)
    assert all(c.passed for c in checks), [c for c in checks if not c.passed]


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
    result = aiperf_here("verify", "--package", str(copy))
    assert result.returncode == 1, result.stdout[-3000:] + result.stderr[-3000:]
    failed = result.stdout.strip().splitlines()[-1]
    assert "FAILED" in failed and record_checks.TOTAL_OPERATIONS in failed, failed


@pytest.mark.parametrize(
    "key, change, check",
    [
        (
            "ops_per_sample",
            lambda v: {**v, "aiperf": {**v["aiperf"], "train": v["aiperf"]["train"] * 2}},
            record_checks.OPERATIONS_PER_SAMPLE,
        ),
        ("eval_samples", lambda samples: 10**9, record_checks.SAMPLES_WITHIN_DATASET),
        (
            "score",
            lambda score: {**score, "regulated_score": score["regulated_score"] * 1.5},
            record_checks.REGULATED_SCORE,
        ),
        ("submission_division", lambda division: "closed", record_checks.DIVISION),
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


# --- issue 25 item 2: the package carries the weights, and verify --package evaluates them again --


def _remeasured(copy: Path) -> CheckRecord:
    """accuracy_remeasured of `aiperf verify --package` on the package `copy`."""
    logged, checks = package.verify_package(copy)
    assert logged is not None
    assert load_ruleset(logged.run.ruleset or "").accuracy_tolerance == 0.01, "1.2 keeps weights"
    return {c.check: c for c in checks}[verify.ACCURACY_REMEASURED]


def test_verify_package_evaluates_the_weights_on_data_generated_again(packaged, tmp_path):
    """Nothing but the package: its synthetic data is generated again from the run's seed."""
    copy = shutil.copytree(packaged, tmp_path / "elsewhere")
    check = _remeasured(copy)
    assert check.passed and "difference 0.00" in check.detail, check.detail


def _perturb(copy: Path) -> None:
    """Rewrite the package's weights with noise added to every kernel, and its digest in the log
    to match: a log and weights edited together."""
    import keras
    import numpy as np

    from aiperf.arch import build_model, network_from_dict

    logged = mllog.read_run(copy / "events.log")
    kept = logged.run.best_weights
    assert kept is not None
    (trial,) = [t for t in logged.run.trials if t.number == kept["trial"]]
    model = build_model(
        network_from_dict(trial.architecture),
        dropout=float(trial.hyperparameters.get("dropout") or 0.0),
    )
    model.load_weights(str(copy / kept["file"]))
    rng = np.random.default_rng(0)
    model.set_weights(
        [w + rng.normal(0, 0.5, w.shape) if w.ndim > 1 else w for w in model.get_weights()]
    )
    (copy / kept["file"]).unlink()
    model.save_weights(str(copy / kept["file"]))
    digest = remeasure.sha256_file(copy / kept["file"])
    _edit(copy, mllog.BEST_WEIGHTS, lambda value: {**value, "sha256": digest})
    keras.backend.clear_session()


def test_weights_edited_with_their_digest_fail_verify_package(packaged, tmp_path):
    copy = shutil.copytree(packaged, tmp_path / "edited")
    _perturb(copy)
    check = _remeasured(copy)
    assert not check.passed and "tolerance 0.01" in check.detail, check.detail
    result = aiperf_here("verify", "--package", str(copy))
    assert result.returncode == 1, result.stdout + result.stderr
    assert result.stdout.strip().splitlines()[-1].endswith("FAILED accuracy_remeasured")


def test_weights_edited_without_their_digest_fail_on_the_digest(packaged, tmp_path):
    copy = shutil.copytree(packaged, tmp_path / "edited")
    kept = mllog.read_run(copy / "events.log").run.best_weights
    assert kept is not None
    with open(copy / kept["file"], "r+b") as weights:
        weights.seek(-1, 2)
        last = weights.read(1)
        weights.seek(-1, 2)
        weights.write(bytes([last[0] ^ 1]))
    check = _remeasured(copy)
    assert not check.passed and "has sha256" in check.detail, check.detail


# --- issue 25 item 10: a package is untrusted input -------------------------------------------------


def _one_failed_check(copy: Path, fragment: str) -> None:
    """verify --package: exit 1, one failed check (PACKAGE_CHECKED) whose detail is one line."""
    _logged, checks = package.verify_package(copy)
    failed = [c for c in checks if not c.passed]
    assert [c.check for c in failed] == [package.PACKAGE_CHECKED], checks
    assert fragment in failed[0].detail and "\n" not in failed[0].detail, failed[0].detail
    result = aiperf_here("verify", "--package", str(copy))
    assert result.returncode == 1, result.stdout + result.stderr
    assert "Traceback" not in result.stdout + result.stderr
    assert f"FAILED {package.PACKAGE_CHECKED}" in result.stdout.strip().splitlines()[-1]


def test_an_oversized_log_is_not_read(packaged, tmp_path):
    copy = shutil.copytree(packaged, tmp_path / "big")
    with open(copy / "events.log", "r+b") as log:
        log.truncate(package.MAX_LOG_BYTES + 1)  # sparse: nothing written, only its size
    _one_failed_check(copy, "over the")


@pytest.mark.parametrize(
    "grow, fragment",
    [
        (
            lambda md: {
                **md,
                "architecture": {
                    **md["architecture"],
                    "nodes": md["architecture"]["nodes"] * (package.MAX_LAYERS // 4),
                },
            },
            "layers, over the",
        ),
        (
            lambda md: {
                **md,
                "architecture": {
                    **md["architecture"],
                    "nodes": [
                        {**n, "params": {**n.get("params", {}), "filters": 200_000}}
                        if n.get("kind") == "conv"
                        else n
                        for n in md["architecture"]["nodes"]
                    ],
                },
            },
            "parameters, over the",
        ),
    ],
    ids=["layers", "parameters"],
)
def test_an_architecture_over_the_caps_is_not_built(packaged, tmp_path, grow, fragment):
    copy = shutil.copytree(packaged, tmp_path / "huge")
    lines = (copy / "events.log").read_text().splitlines()
    for i, line in enumerate(lines):
        event = json.loads(line.removeprefix(":::MLLOG "))
        if event["key"] == mllog.TRIAL_START:
            event["metadata"] = grow(event["metadata"])
            lines[i] = ":::MLLOG " + json.dumps(event)
            break
    (copy / "events.log").write_text("\n".join(lines) + "\n")
    _one_failed_check(copy, fragment)


def test_a_log_that_breaks_the_checker_is_one_failed_check(packaged, tmp_path):
    """Not a ValueError: a worker's peak that is a number where a record is expected raises
    AttributeError inside the checks; it is a failed check, not a traceback."""
    copy = shutil.copytree(packaged, tmp_path / "odd")
    lines = (copy / "events.log").read_text().splitlines()
    for i, line in enumerate(lines):
        event = json.loads(line.removeprefix(":::MLLOG "))
        if event["key"] == mllog.RUN_RESOURCES:  # every one: the latest stands
            event["value"] = {**event["value"], "worker_peaks": [1]}
            lines[i] = ":::MLLOG " + json.dumps(event)
    (copy / "events.log").write_text("\n".join(lines) + "\n")
    _one_failed_check(copy, "AttributeError")
