"""Precision, XLA compilation and the Keras backend are run settings (issue 13, item 4): validated in
one line, ruled (which a closed result may use; which enter the workload hash), passed to every
trial, applied when its model is built and compiled, recorded with the run and its system, shown."""

from __future__ import annotations

import hashlib
import json
import time
from pathlib import Path

import pytest
from conftest import TINY, FinishedTrial
from typer.testing import CliRunner

from aiperf.cli.main import app
from aiperf.config import PRECISIONS, available_profiles, load_config
from aiperf.errors import UserError
from aiperf.results.division import CLOSED, OPEN, classify, flatten
from aiperf.results.score import ScoreResult
from aiperf.rules import DEFAULT_RULESET, load_ruleset
from aiperf.store import Store
from aiperf.train.messages import TrialRequest, TrialResult

NEW_SETTINGS = ("train.precision", "train.jit_compile", "train.backend")
# issue 24's training recipe (tests/test_train_recipe.py)
RECIPE_SETTINGS = (
    "train.lr_schedule",
    "train.warmup_epochs",
    "train.weight_decay",
    "train.label_smoothing",
)
# issue 32's large-batch rule (aiperf-rules-1.4, tests/test_gpu_node_validity.py)
LARGE_BATCH_SETTINGS = ("train.lr_reference_batch",)
# issue 48: what the trials train on (auto, or the CPUs the user asked for; tests/test_gpu_fallback.py)
DEVICE_SETTINGS = ("train.device",)
# issue 49: the LM track's AdamW (aiperf-rules-1.8, tests/test_adamw.py): Adam's beta_2, clipping
ADAMW_SETTINGS = ("train.beta_2", "train.clip_norm", "train.lr_floor")


# --- validation --------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "key, value, allowed",
    [
        (
            "train.precision",
            "bfloat16",
            "'float32', 'mixed_bfloat16', 'mixed_float16' or 'auto'",
        ),
        ("train.backend", "numpy", "'tensorflow', 'jax' or 'torch'"),
        ("train.jit_compile", "sometimes", "valid boolean"),
    ],
)
def test_a_bad_value_names_the_setting_and_what_it_may_be(key, value, allowed):
    with pytest.raises(UserError) as error:
        load_config("quick", workers=1, overrides={key: value})
    message = str(error.value)
    assert (
        "\n" not in message
        and message.startswith(f"invalid setting {key}:")
        and allowed in message
    ), message


def test_defaults_and_every_packaged_profile_say_them():
    config = load_config("quick", workers=1)
    assert (config.train.precision, config.train.jit_compile, config.train.backend) == (
        "float32",
        False,
        "tensorflow",
    )
    ruleset = load_ruleset(DEFAULT_RULESET)
    for profile in available_profiles():
        text = (
            Path(__file__).resolve().parent.parent / "aiperf" / "profiles" / f"{profile}.yaml"
        ).read_text()
        assert all(f"  {key.split('.')[1]}:" in text for key in NEW_SETTINGS), (
            f"{profile}.yaml shows each setting"
        )
        config = load_config(
            profile,
            workers=1,
            overrides={"data.source": "/data"} if profile == "imagenet" else None,
        )
        assert classify(config).name == CLOSED or profile == "imagenet"
        assert all(
            ruleset.closed_choice(key, flatten(config.model_dump(mode="json"))[key]) is None
            for key in NEW_SETTINGS
        ), f"{profile}'s own choices are closed ones"


def test_the_cli_takes_them_with_set():
    result = CliRunner().invoke(app, ["run", "--set", "train.precision=fp8", "--budget", "5s"])
    assert result.exit_code == 2
    assert "invalid setting train.precision" in result.output and "mixed_bfloat16" in result.output


# --- the rules ---------------------------------------------------------------------------------------


def _division(**train):
    """The division of quick with these train settings (judged anywhere: torch need not be installed)."""
    return classify(
        load_config(
            "quick",
            workers=1,
            overrides={f"train.{k}": v for k, v in train.items()},
            runs_here=False,
        )
    )


def test_closed_precisions_and_backends_are_the_rulesets():
    ruleset = load_ruleset(DEFAULT_RULESET)
    assert ruleset.precisions == ("float32", "mixed_bfloat16")
    assert set(ruleset.choices["train.backend"]) == {"tensorflow", "jax", "torch"}
    assert set(ruleset.precisions) <= set(PRECISIONS)
    for train in (
        {"precision": "mixed_bfloat16"},
        {"backend": "jax", "jit_compile": True},
        {"backend": "torch", "precision": "mixed_bfloat16", "jit_compile": False},
    ):
        assert _division(**train).name == CLOSED and _division(**train).deviations == (), train


def _recorded_under_1_0(config):
    """A quick run as recorded under aiperf-rules-1.0 (quick named it until 1.2): judged by it."""
    return config.model_copy(update={"ruleset": DEFAULT_RULESET})


def test_mixed_float16_is_open_for_a_named_reason():
    config = load_config(
        "quick", workers=1, overrides={"train.precision": "mixed_float16"}, runs_here=False
    )
    assert classify(config).name == CLOSED, "closed from aiperf-rules-1.1 on"
    division = classify(_recorded_under_1_0(config))
    assert division.name == OPEN
    assert division.deviations == (
        "train.precision: mixed_float16 is not allowed in the closed division by "
        "aiperf-rules-1.0 (allowed: float32, mixed_bfloat16)",
    )


def test_a_choice_outside_the_rules_is_open_beside_other_deviations():
    division = classify(
        _recorded_under_1_0(
            load_config("quick", workers=1, seed=3, overrides={"train.precision": "mixed_float16"})
        )
    )
    assert (
        division.name == OPEN
        and "seed: 0 -> 3" in division.deviations
        and len(division.deviations) == 2
    )


def test_precision_is_the_workload_backend_and_jit_are_not():
    base = _division().config_hash
    assert _division(backend="jax", jit_compile=True).config_hash == base, (
        "same workload on another backend"
    )
    assert _division(backend="torch").config_hash == base
    assert _division(precision="mixed_bfloat16").config_hash != base, (
        "bf16 arithmetic is another workload"
    )
    assert _division(precision="mixed_float16").config_hash not in (
        base,
        _division(precision="mixed_bfloat16").config_hash,
    )


# Data settings that joined later: the feed's choice (issue 32) and the token kinds' sizes (issue 35).
DATA_SETTINGS = (
    "data.feed",
    "data.seq_len",
    "data.train_tokens",
    "data.val_tokens",
    "data.val_fraction",
)
# The LM track's settings (issue 35): its searched batch in tokens, warm-up and weight decay, and the
# loss ceiling its rulesets judge by.
LM_SETTINGS = (
    "search.space.batch_tokens",
    "search.space.warmup_epochs",
    "search.space.weight_decay",
    "validity.loss_ceiling",
    "validity.entropy_floor",
    "search.inherit",
)


def test_a_float32_run_keeps_the_hash_it_had_before_the_settings_existed():
    """A run recorded before these settings: its stored config lacks them, and its stored hash was
    sha256 of every non-settable setting. Verify recomputes the same hash and division from it."""
    config = load_config("quick", workers=1)
    ruleset = load_ruleset(DEFAULT_RULESET)
    later = (*NEW_SETTINGS, *RECIPE_SETTINGS, *LARGE_BATCH_SETTINGS, *DEVICE_SETTINGS)
    later += ADAMW_SETTINGS
    later += ("train.attention",)  # the LM's attention kernel (issue 48): never hashed
    old = {
        k: v
        for k, v in flatten(config.model_dump(mode="json")).items()
        if not ruleset.is_settable(k)
        and k not in later
        and k not in ("search.space.batch_per_gib", "search.space.batch_cap")
        and k not in DATA_SETTINGS
        and k not in LM_SETTINGS
        and not k.startswith("system.")  # the machine's name and notes: joined later, never hashed
    }
    old_hash = hashlib.sha256(json.dumps(old, sort_keys=True).encode()).hexdigest()
    stored = config.model_dump(mode="json")
    for key in later:
        del stored["train"][key.split(".")[1]]
    del stored["search"]["space"]["batch_per_gib"]  # joined later too (aiperf.train.auto)
    del stored["search"]["space"]["batch_cap"]  # and its cap (aiperf-rules-1.4)
    del stored["system"]  # and the machine's facts (config.SystemConfig)
    for key in DATA_SETTINGS:  # the feed's choice and the token data's sizes
        del stored["data"][key.split(".")[1]]
    for key in LM_SETTINGS:
        section, *path, name = key.split(".")
        del (stored[section][path[0]] if path else stored[section])[name]
    from aiperf.config import BenchmarkConfig

    again = classify(BenchmarkConfig.model_validate(stored))
    assert again.config_hash == old_hash == classify(config).config_hash
    assert again.name == CLOSED


# --- trials: the request carries them, the trial applies them -----------------------------------------


def test_the_orchestrator_sends_them_with_every_trial(tmp_path):
    from simulated_search import simulated_orchestrator

    from aiperf.train.simulated import SimulatedModel, plan_trial

    sent: list[TrialRequest] = []

    def launch(request: TrialRequest) -> FinishedTrial:
        sent.append(request)
        plan = plan_trial(
            request,
            time.time(),
            "w",
            SimulatedModel(ops_per_s=1e12, train_samples=384, val_samples=128),
        )
        return FinishedTrial(TrialResult(request.trial_key, plan.status, plan.built, plan.epochs))

    orchestrator = simulated_orchestrator(
        tmp_path,
        launch,
        overrides={"train.precision": "mixed_bfloat16", "train.jit_compile": True},
    )
    with orchestrator.recorder.store:
        started = time.time()
        orchestrator.run(started, started + 0.5)
    assert sent and all(r.precision == "mixed_bfloat16" and r.jit_compile is True for r in sent)


@pytest.fixture(scope="module")
def staged(tmp_path_factory):
    from aiperf.data.staging_npz import stage_synthetic

    config = load_config("quick", workers=1, overrides=TINY)
    return stage_synthetic(config.data, 0, Path(tmp_path_factory.mktemp("data")))


@pytest.mark.parametrize("precision, jit", [("mixed_bfloat16", True), ("float32", False)])
def test_a_trial_builds_in_its_precision_with_a_float32_head_and_compiles_as_asked(
    staged, monkeypatch, precision, jit
):
    import keras

    import aiperf.arch
    from aiperf.search.space import architecture
    from aiperf.train.trial import run_trial

    built = []
    build = aiperf.arch.build_model
    monkeypatch.setattr(
        aiperf.arch, "build_model", lambda *a, **k: built.append(build(*a, **k)) or built[-1]
    )
    arch = architecture(
        {"stages": 1, "blocks_per_stage": 1, "base_filters": 4, "kernel_size": 3},
        staged.image_shape,
        staged.classes,
    )
    request = TrialRequest(
        run_id=1,
        trial_key="t0",
        architecture=arch.to_dict(),
        learning_rate=0.05,
        batch_size=32,
        epochs=1,
        deadline=time.time() + 300,
        data_path=staged.path,
        seed=1,
        precision=precision,
        jit_compile=jit,
    )
    try:
        result = run_trial(request, lambda _m: None)
    finally:
        keras.mixed_precision.set_global_policy(
            "float32"
        )  # the policy is the process's: leave it as found
    assert result.status == "completed", result.message
    model = built[0]
    convolutions = [layer for layer in model.layers if isinstance(layer, keras.layers.Conv2D)]
    assert convolutions and all(layer.dtype_policy.name == precision for layer in convolutions)
    head = model.layers[-1]
    assert (
        head.dtype_policy.name == "float32"
        and keras.backend.standardize_dtype(model.output.dtype) == "float32"
    )
    assert model.jit_compile is jit
    assert result.epochs[0].loss is not None, "it trained to a finite loss"


# --- recorded and shown --------------------------------------------------------------------------------


def test_the_run_and_its_system_record_them_and_show_says_them(db_url, tmp_path):
    from aiperf.lifecycle.run import record_run

    db = db_url
    config = load_config(
        "quick",
        workers=1,
        db=db,
        out=str(tmp_path),
        overrides={
            "train.precision": "mixed_bfloat16",
            "train.backend": "jax",
            "train.jit_compile": True,
        },
    )
    with Store.open(db) as store:
        recorder = record_run(store, config)
        run_id = recorder.run_id
        record = store.get_run(run_id)
        assert (record.precision, record.backend, record.jit_compile) == (
            "mixed_bfloat16",
            "jax",
            True,
        )
        assert record.system.keras_backend == "jax", "the system is the one the workers run"
        assert record.division == CLOSED
        store.save_score(
            recorder.claim,
            ScoreResult(
                elapsed_s=60.0,
                total_ops=10**9,
                ops=1.6e7,
                tensor_ops=1e7,
                best_val_accuracy=0.5,
                val_samples=1000,
                regulated_score=1e7,
                trials_completed=1,
                samples_trained=100,
                samples_evaluated=10,
                valid=True,
            ),
            ruleset=record.ruleset,
        )
        tf_run = record_run(
            store, load_config("quick", workers=1, db=db, out=str(tmp_path))
        ).run_id
        assert store.get_run(tf_run).system.id != record.system.id, (
            "another backend, another system"
        )
    shown = CliRunner().invoke(app, ["show", str(run_id), "--db", db], env={"COLUMNS": "200"})
    assert shown.exit_code == 0, shown.output
    assert "mixed_bfloat16 on jax, jit_compile on" in shown.output
