"""Issue 25 item 6: what ran is in the result. The run records its jobs' prologue, each worker's
aiperf-relevant environment and a digest of the aiperf code each worker imported; a closed result
with a prologue, workers started outside aiperf or code that differs from the submitting host's is
flagged for review wherever its verdict is shown. (A real SLURM run records it: tests/test_slurm.py.)"""

from __future__ import annotations

import dataclasses
import os
import shutil
import subprocess
import sys
from pathlib import Path

import aiperf
from aiperf.cluster.plan import user_prologue
from aiperf.config import load_config
from aiperf.report.summary import for_review, verdict_text
from aiperf.results.score import validity_label
from aiperf.system.provenance import (
    WITHHELD,
    code_digest,
    relevant_environment,
    review_reasons,
    run_provenance,
)

CLEAN = {
    "prologue": [],
    "scheduler": "local",
    "submit_files": "a" * 64,
    "workers": {"w0": {"env": {}, "files": "a" * 64}, "w1": {"env": {}, "files": "a" * 64}},
}


def test_the_environment_kept_is_aiperfs_and_the_frameworks_with_secrets_withheld():
    kept = relevant_environment(
        {
            "PYTHONPATH": "/patched",
            "KERAS_BACKEND": "jax",
            "XLA_FLAGS": "--xla_force_host_platform_device_count=2",
            "LD_PRELOAD": "/lib/fast.so",
            "PREFECT_API_AUTH_STRING": "admin:pass",
            "TF_PASSWORD_HINT": "s3cret",
            "HOME": "/root",
            "PGPASSWORD": "s3cret",
            "PYTHON_TEST_DB": "postgresql+psycopg://aiperf:s3cret@127.0.0.1:5432/aiperf",
        }
    )
    assert kept == {
        "TF_PASSWORD_HINT": WITHHELD,
        "KERAS_BACKEND": "jax",
        "LD_PRELOAD": "/lib/fast.so",
        "PREFECT_API_AUTH_STRING": WITHHELD,
        "PYTHONPATH": "/patched",
        "PYTHON_TEST_DB": "postgresql+psycopg://aiperf:***@127.0.0.1:5432/aiperf",
        "XLA_FLAGS": "--xla_force_host_platform_device_count=2",
    }


def test_a_clean_local_run_has_nothing_to_review():
    assert review_reasons(CLEAN) == []
    assert review_reasons(None) == [], "a run recorded before provenance says nothing"


def test_a_prologue_a_foreign_scheduler_and_different_code_are_each_flagged():
    differ = {**CLEAN, "workers": {**CLEAN["workers"], "w1": {"env": {}, "files": "b" * 64}}}
    assert review_reasons(differ) == [
        "aiperf's code on 1 worker(s) differs from the submitting host's: w1"
    ]
    assert review_reasons({**CLEAN, "prologue": ["export PYTHONPATH=/patched"]}) == [
        "job prologue ran before the workers: export PYTHONPATH=/patched"
    ]
    assert review_reasons({**CLEAN, "scheduler": "scheduler"}) == [
        "workers were started outside aiperf (cluster.kind scheduler)"
    ]


def _code_digest_under(pythonpath: Path) -> str:
    env = {**os.environ, "PYTHONPATH": str(pythonpath)}
    return subprocess.run(
        [
            sys.executable,
            "-c",
            "from aiperf.system.provenance import code_digest as d; print(d())",
        ],
        capture_output=True,
        text=True,
        env=env,
        cwd=pythonpath,
        check=True,
    ).stdout.strip()


def test_the_digest_is_of_the_code_a_process_imported(tmp_path):
    """A PYTHONPATH that shadows aiperf (what a prologue line can do) gives another digest."""
    copy = tmp_path / "aiperf"
    shutil.copytree(
        Path(aiperf.__file__).parent, copy, ignore=shutil.ignore_patterns("__pycache__")
    )
    same = _code_digest_under(tmp_path)
    (copy / "train" / "trial.py").write_text(
        (copy / "train" / "trial.py").read_text() + "\n# reports anything\n"
    )
    patched = _code_digest_under(tmp_path)
    assert same == code_digest() and patched != same


def test_the_recorded_prologue_is_what_the_jobs_run(tmp_path, monkeypatch):
    site = tmp_path / "site.yaml"
    site.write_text("jobqueue:\n  slurm:\n    job-script-prologue: ['module load cuda']\n")
    monkeypatch.setenv("AIPERF_JOBQUEUE_CONFIG", str(site))
    slurm = load_config(
        "quick", cluster={"kind": "slurm", "prologue": ["export PYTHONPATH=/patched"]}
    )
    assert user_prologue(slurm) == ["module load cuda", "export PYTHONPATH=/patched"]
    assert user_prologue(load_config("quick")) == [], "a local cluster runs no job script"
    recorded = run_provenance(user_prologue(slurm), "slurm", {})
    assert recorded["prologue"] == user_prologue(slurm) and recorded["workers"] == {}


def _closed_valid_verified():
    from aiperf.store.records import CheckRecord, ScoreResult
    from tests.test_system_description import _run

    score = ScoreResult(1.0, 10, 10.0, 10.0, 0.9, 100, 23.0, 1, 10, 10, valid=True)
    return dataclasses.replace(
        _run(),
        division="closed",
        score=score,
        verification=(CheckRecord("best_accuracy", True, "agrees"),),
        provenance=CLEAN,
    )


def test_a_closed_valid_result_for_review_says_so_where_its_verdict_shows():
    closed = _closed_valid_verified()
    flagged = dataclasses.replace(closed, provenance={**CLEAN, "scheduler": "scheduler"})
    assert verdict_text(closed) == "valid" and for_review(closed) == []
    assert verdict_text(flagged).startswith("valid, for review: workers were started outside")
    assert validity_label(True, True, bool(for_review(flagged))) == "review"
    assert validity_label(True, True, bool(for_review(closed))) == "yes"
    opened = dataclasses.replace(flagged, division="open")
    assert for_review(opened) == [], "only a closed result is flagged"
