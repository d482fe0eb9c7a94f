"""aiperf-rules-1.1 (AIPerf's closed ImageNet workload) and 1.2 beside 1.0, and `aiperf rules PROFILE`.

1.1 closes mixed_float16 and raises imagenet's accuracy floor to AIPerf's 0.7; 1.2 keeps 1.1's
figures and pins every profile's dataset; 1.3 keeps 1.2's and adds how a ranked result is made (a
series of runs, aiperf.rules.SeriesRule); 1.4 keeps 1.3's and judged the imagenet profiles'
large-batch recipe until 1.6 (LARS, tests/test_lars.py), which they name now; the other profiles
name 1.3. A run is judged by the
version it recorded: a run stored under 1.0 keeps 1.0's verdict, read back through the Store and
judged again as `aiperf verify` judges it. No framework is imported and nothing trains."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import subprocess
import sys
from pathlib import Path

import pytest
from claims import claim_of
from test_history_data import system_facts
from typer.testing import CliRunner

from aiperf.cli.main import app
from aiperf.config import BenchmarkConfig, ValidityConfig, available_profiles, load_config
from aiperf.results import record_checks, verify
from aiperf.results.division import CLOSED, OPEN, classify, judging_rules, with_recipe_of
from aiperf.results.score import EpochWork, compute_score
from aiperf.rules import available_rulesets, load_ruleset
from aiperf.store import RunStart, RunWork, Store

V10, V11, V12 = "aiperf-rules-1.0", "aiperf-rules-1.1", "aiperf-rules-1.2"
V13, V14, V16 = "aiperf-rules-1.3", "aiperf-rules-1.4", "aiperf-rules-1.6"
RULES = Path(__file__).resolve().parent.parent / "aiperf" / "rules"
# aiperf-rules-1.0.yaml as published: runs recorded under it are judged by it, so it never changes.
V10_SHA256 = "8dc87b5fe6ef68ed8c0b83035303de8bae53734eefd22dff70af4527f1790647"
V11_SHA256 = "18175eeec923646610ca60c1a449c48c4594e66ecfe4e9ee0d30560609392478"
V12_SHA256 = "8d5b529433b6edb393396429372440f1a37ed5b2353b61d150fa7c1158f5b3e1"
V13_SHA256 = "8121ba653276e9d24e050a0843a5f86e30901045a8d4f1efd74c7f104d8e0d92"
PLACEHOLDER_SOURCE = {"data.source": "/data"}  # imagenet needs one to load; never read here


def rules_json(profile: str) -> dict:
    result = CliRunner().invoke(app, ["rules", profile, "--json"])
    assert result.exit_code == 0, result.output
    return json.loads(result.output)


def imagenet(precision: str = "float32") -> BenchmarkConfig:
    return load_config(
        "imagenet",
        workers=1,
        overrides={**PLACEHOLDER_SOURCE, "train.precision": precision},
        runs_here=False,
    )


def recorded_under_1_0(config: BenchmarkConfig) -> BenchmarkConfig:
    """The same imagenet config as a run recorded it under 1.0: that name, 1.0's figures, and the
    recipe of the rulesets before 1.6 (SGD; aiperf-rules-1.6.yaml's recipe_before)."""
    renamed = config.model_copy(
        update={
            "ruleset": V10,
            "validity": ValidityConfig(min_budget_s=3600.0, accuracy_floor=0.1),
        }
    )
    return with_recipe_of(renamed, load_ruleset(V10), config.ruleset)


# --- the rulesets -------------------------------------------------------------------------------------


def test_1_0_stays_as_published_and_1_1_is_beside_it():
    assert {V10, V11} <= set(available_rulesets())
    text = (RULES / f"{V10}.yaml").read_bytes()
    assert hashlib.sha256(text).hexdigest() == V10_SHA256, "a published ruleset is never edited"
    old, new = load_ruleset(V10), load_ruleset(V11)
    assert (old.for_profile("imagenet").accuracy_floor, old.precisions) == (
        0.1,
        ("float32", "mixed_bfloat16"),
    )
    assert "mixed_float16" in new.precisions and set(old.precisions) < set(new.precisions)
    assert new.for_profile("imagenet").accuracy_floor == 0.7
    assert new.for_profile("imagenet").min_budget_s == 3600.0
    for profile in ("quick", "nightly", "digits"):
        assert new.for_profile(profile) == old.for_profile(profile), profile
    assert (new.settable, new.convention, new.trainer) == (
        old.settable,
        old.convention,
        old.trainer,
    )
    assert {k: v for k, v in new.choices.items() if k != "train.precision"} == {
        k: v for k, v in old.choices.items() if k != "train.precision"
    }


def test_1_1_stays_as_published_and_1_2_keeps_its_figures_and_pins_the_data():
    text = (RULES / f"{V11}.yaml").read_bytes()
    assert hashlib.sha256(text).hexdigest() == V11_SHA256, "a published ruleset is never edited"
    old, new = load_ruleset(V11), load_ruleset(V12)
    for profile in old.profiles:
        was, now = old.for_profile(profile), new.for_profile(profile)
        assert was.data is None and now.data is not None, profile
        assert (was.min_budget_s, was.accuracy_floor, was.seed_architecture) == (
            now.min_budget_s,
            now.accuracy_floor,
            now.seed_architecture,
        ), profile
    assert (new.settable, new.choices, new.convention) == (
        old.settable,
        old.choices,
        old.convention,
    )
    assert (old.accuracy_tolerance, new.accuracy_tolerance) == (None, 0.01)


def test_1_2_stays_as_published_and_1_3_keeps_its_figures_and_ranks_a_series():
    text = (RULES / f"{V12}.yaml").read_bytes()
    assert hashlib.sha256(text).hexdigest() == V12_SHA256, "a published ruleset is never edited"
    old, new = load_ruleset(V12), load_ruleset(V13)
    assert old.series is None
    assert (new.series.runs, new.series.drop, new.series.statistic) == (5, 1, "mean")
    assert dataclasses.replace(new, version=old.version, series=None) == old, (
        "1.3 changes nothing but the ranking"
    )


def test_1_3_stays_as_published_and_1_4_keeps_its_figures():
    text = (RULES / f"{V13}.yaml").read_bytes()
    assert hashlib.sha256(text).hexdigest() == V13_SHA256, "a published ruleset is never edited"
    old, new = load_ruleset(V13), load_ruleset(V14)
    assert dataclasses.replace(new, version=old.version) == old, (
        "1.4 changes no figure: what it judges is the imagenet profiles' large-batch recipe"
    )


def test_the_imagenet_profiles_name_1_6_the_lm_track_1_8_and_the_others_1_3():
    for profile in available_profiles():
        if profile == "enwik8":  # the LM track on a real corpus, from 1.8
            config = load_config(profile, workers=1, runs_here=False)
            assert config.ruleset == "aiperf-rules-1.8" and config.data.kind == "enwik8"
            assert config.validity.loss_ceiling == 0.9704
            continue
        if profile.startswith("lm"):  # the LM track: its own ruleset, judged by loss
            config = load_config(profile, workers=1, runs_here=False)
            assert config.ruleset == "aiperf-rules-1.8", profile  # its recipe: tests/test_adamw.py
            assert config.validity.loss_ceiling == {"lm-quick": 2.25, "lm": 1.0}[profile]
            continue
        config = load_config(
            profile,
            workers=1,
            overrides=PLACEHOLDER_SOURCE if profile == "imagenet" else None,
            runs_here=False,
        )
        large_batch = profile in ("imagenet", "imagenet-shaped")
        assert config.ruleset == (V16 if large_batch else V13), profile
        assert config.search.space.batch_cap == (1024 if large_batch else None), profile
        assert config.train.lr_reference_batch is None, "LARS's rate is not scaled (1.6)"
        assert config.train.optimizer == ("lars" if large_batch else "sgd"), profile
        assert config.train.warmup_epochs == (5.0 if large_batch else 0.0), profile
    config = imagenet()
    assert (config.validity.accuracy_floor, config.validity.min_budget_s) == (0.7, 3600.0)


# --- the division: by the ruleset the run names ----------------------------------------------------


def test_closed_imagenet_with_mixed_float16_is_closed_under_1_6_open_under_1_0():
    now = classify(imagenet("mixed_float16"))
    assert (now.name, now.ruleset, now.deviations) == (CLOSED, V16, ())
    then = classify(recorded_under_1_0(imagenet("mixed_float16")))
    assert (then.name, then.ruleset) == (OPEN, V10)
    assert then.deviations == (
        "train.precision: mixed_float16 is not allowed in the closed division by "
        f"{V10} (allowed: float32, mixed_bfloat16)",
    )


def test_a_1_0_imagenet_run_stays_closed_under_its_own_floor():
    division = classify(recorded_under_1_0(imagenet()))
    assert (division.name, division.ruleset, division.deviations) == (CLOSED, V10, ())
    assert division.config_hash != classify(imagenet()).config_hash, (
        "the two versions' results are never put together"
    )


def test_1_0s_floor_under_1_1_is_open():
    lowered = imagenet().model_copy(
        update={"validity": ValidityConfig(min_budget_s=3600.0, accuracy_floor=0.1)}
    )
    division = classify(lowered)
    assert division.name == OPEN
    assert division.deviations == ("validity.accuracy_floor: 0.7 -> 0.1",)


@pytest.mark.parametrize("precision", ["mixed_float16", "float32"])
def test_a_stored_1_0_run_is_judged_by_1_0(tmp_path, precision):
    """Recorded as a run records itself, read back through the Store, judged again as verify does:
    the same division, ruleset and hash, and the validity rules by 1.0 (floor 0.1, not 0.7)."""
    config = recorded_under_1_0(imagenet(precision))
    division = classify(config)
    with Store.open(f"sqlite:///{tmp_path / 'a.db'}") as store:
        run_id = store.create_run(
            RunStart(
                profile=config.profile,
                config=config.model_dump(mode="json"),
                seed=config.seed,
                budget_s=config.budget_s,
                workers=config.workers,
                ruleset=division.ruleset,
                division=division.name,
                deviations=division.deviations,
                config_hash=division.config_hash,
                precision=config.train.precision,
            ),
            system_id=store.upsert_system(system_facts()),
        ).run_id
        stored_config = BenchmarkConfig.model_validate(store.get_run(run_id).config)
        rules = judging_rules(stored_config)
        score = compute_score(
            RunWork(
                epochs=[EpochWork(1000, 100, 10**9, 3 * 10**8, 10**9, 3 * 10**8)],
                elapsed_s=config.budget_s,
                best_val_accuracy=0.15,
                val_samples=50000,
                best_val_loss=None,
                vocab_size=0,
                trials_completed=1,
                budget_s=config.budget_s,
            ),
            rules=rules,
        )
        store.save_score(claim_of(store, run_id), score, ruleset=division.ruleset)
        record = store.get_run(run_id)
    assert record.ruleset == V10 and stored_config.ruleset == V10
    again = classify(stored_config)
    assert (record.division, record.ruleset, record.deviations, record.config_hash) == (
        again.name,
        again.ruleset,
        again.deviations,
        again.config_hash,
    )
    assert again.name == (OPEN if precision == "mixed_float16" else CLOSED)
    assert rules.accuracy_floor == 0.1 and score.valid, "valid by 1.0's floor"
    assert imagenet().validity.accuracy_floor > 0.15, "1.1's floor would fail it"
    evidence = verify.Evidence(record, stored_config, None, {}, config.budget_s, score)
    division_check = record_checks.check_division(evidence)
    assert division_check.passed and f"under {V10}" in division_check.detail, division_check
    validity_check = record_checks.check_validity_rules(evidence)
    assert validity_check.passed, validity_check
    assert (V10 in validity_check.detail) is again.closed, validity_check


# --- aiperf rules PROFILE ----------------------------------------------------------------------------


def test_rules_imagenet_json_is_aiperfs_closed_workload():
    shown = rules_json("imagenet")
    assert shown["ruleset"] == V16
    assert shown["accuracy_floor"] >= 0.70 and shown["min_budget_s"] >= 3600
    assert "mixed_float16" in shown["precisions"]
    assert shown["seed_architecture"] == "resnet50"
    assert set(shown) == {
        "profile",
        "ruleset",
        "min_budget_s",
        "accuracy_floor",
        "loss_ceiling",
        "entropy_floor",
        "seed_architecture",
        "precisions",
        "choices",
        "settable",
        "convention",
        "trainer",
        "batch_size",
        "data",
        "series",
    }, "the keys docs/rules.md documents"
    assert shown["series"] == {"runs": 5, "drop": 1, "statistic": "mean"}
    assert shown["data"] == {
        "kind": "tfrecord",
        "classes": 1000,
        "train_samples": 1281167,
        "val_samples": 50000,
        "sha256": None,
        "name": "ImageNet-1k",
    }
    assert shown["batch_size"] == {
        "per_gib": [12, 13, 14],
        "listed": [192, 208, 224],
        "cap": 1024,
        "tokens": None,  # the LM track's batch in tokens
    }
    assert shown["choices"] == {
        "train.backend": ["tensorflow", "jax", "torch"],
        "train.jit_compile": [False, True],
        "data.feed": ["auto", "tf.data", "dali"],  # a closed choice from 1.5
    }
    assert (shown["convention"], shown["trainer"]) == ("aiperf", "keras")
    assert "budget_s" in shown["settable"] and "data.source" in shown["settable"]


@pytest.mark.parametrize("profile", ["quick", "nightly", "digits"])
def test_rules_of_the_other_profiles_keep_1_0s_figures(profile):
    shown = rules_json(profile)
    assert shown["ruleset"] == V13 and shown["profile"] == profile
    assert "mixed_float16" in shown["precisions"]
    assert shown["data"]["sha256"], "generated data is pinned by its content digest"
    rules = load_ruleset(V10).for_profile(profile)
    assert (shown["min_budget_s"], shown["accuracy_floor"]) == (
        rules.min_budget_s,
        rules.accuracy_floor,
    )


@pytest.mark.parametrize("profile", ["quick", "nightly", "digits", "imagenet", "imagenet-shaped"])
def test_rules_plain_fits_80_columns(profile):
    result = CliRunner().invoke(app, ["rules", profile])
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    assert lines and all(len(line) <= 80 for line in lines), lines
    version = V16 if profile.startswith("imagenet") else V13
    assert version in lines[0] and any("seed network" in line for line in lines)
    assert any(line.strip().startswith("ranked result") for line in lines), "the series rule"
    assert any(line.strip().startswith("data") for line in lines), "the pinned dataset is shown"


def test_rules_imagenet_plain_says_the_figures():
    output = CliRunner().invoke(app, ["rules", "imagenet"]).output
    assert "1h (3600 s)" in output and "0.7" in output
    assert "float32, mixed_bfloat16, mixed_float16" in output


@pytest.mark.parametrize("profile", ["imagenett", "mine.yaml"])
def test_rules_of_an_unknown_profile_is_one_line_and_exit_2(profile):
    result = CliRunner().invoke(app, ["rules", profile])
    assert result.exit_code == 2
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and "unknown profile" in lines[0] and "imagenet" in lines[0]
    assert "Traceback" not in result.output


def test_rules_imports_no_framework():
    probe = (
        "import sys\n"
        "from typer.testing import CliRunner\n"
        "from aiperf.cli.main import app\n"
        "result = CliRunner().invoke(app, ['rules', 'imagenet', '--json'])\n"
        "assert result.exit_code == 0, result.output\n"
        "print(sorted(m for m in ('tensorflow', 'jax', 'torch', 'keras') if m in sys.modules))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"
