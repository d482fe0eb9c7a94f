"""Seeded records for the history, regression and report tests, written through the run recorder
as a run writes them, and a check that the history views agree with the raw tables on both engines."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from functools import partial

import pytest
from claims import add_trial, claim_of, in_one_turn
from sqlalchemy import DateTime, bindparam, text

from aiperf.arch import ArchSpec, StageSpec
from aiperf.config import ValidityConfig
from aiperf.lifecycle.recorder import Turn
from aiperf.results.score import EpochWork, compute_score
from aiperf.status import RunStatus, TrialStatus
from aiperf.store import EpochReport, RunStart, RunWork, Store, TrialBuilt, TrialEnd


def system_facts(name: str = "node-a", fingerprint: str | None = None) -> dict:
    return {
        "fingerprint": fingerprint or hashlib.sha256(name.encode()).hexdigest(),
        "hostname": name,
        "cpu_model": "test cpu",
        "cpu_cores": 2,
        "memory_bytes": 2**34,
        "gpus": {"count": 0, "models": []},
        "platform": "linux",
        "python_version": "3.11",
        "tensorflow_version": "2.21",
        "keras_version": "3.15",
        "keras_backend": "tensorflow",
    }


# A whole architecture, stored as a run stores its spec, so that what reads one (`aiperf show`'s
# convs and skips) reads a planted trial too.
PLANTED_ARCHITECTURE = ArchSpec(
    input_shape=(16, 16, 3),
    num_classes=10,
    stages=(StageSpec(blocks=1, filters=4),),
    stem_filters=4,
).to_dict()


@dataclass(frozen=True)
class PlantedTrial:
    worker: str
    train_ops: int
    eval_ops: int
    epochs: int = 2
    samples_trained: int = 384
    samples_evaluated: int = 128
    val_accuracy: float = 0.5
    start_s: float = 0.0
    epoch_s: float = 10.0
    val_loss: float = 1.0  # every epoch's: the LM track's quality


def _planted_facts(
    key: str, t0: float, t: PlantedTrial
) -> tuple[TrialBuilt, list[EpochReport], TrialEnd]:
    """What a planted trial's worker reported, and its end, as the orchestrator records them."""
    built = TrialBuilt(
        key,
        worker=t.worker,
        parameters=1000,
        train_ops=t.train_ops,
        eval_ops=t.eval_ops,
        tensor_train_ops=t.train_ops // 2,
        tensor_eval_ops=t.eval_ops // 2,
    )
    epochs = [
        EpochReport(
            key,
            epoch=epoch,
            started_at=t0 + t.start_s + epoch * t.epoch_s,
            ended_at=t0 + t.start_s + (epoch + 1) * t.epoch_s,
            samples_trained=t.samples_trained,
            samples_evaluated=t.samples_evaluated,
            loss=1.0,
            accuracy=0.5,
            val_loss=t.val_loss,
            val_accuracy=t.val_accuracy * (epoch + 1) / t.epochs,
            complete=True,
        )
        for epoch in range(t.epochs)
    ]
    end = TrialEnd(key, TrialStatus.COMPLETED, t0 + t.start_s + t.epochs * t.epoch_s)
    return built, epochs, end


def _record(
    turn: Turn, trial_id: int, facts: tuple[TrialBuilt, list[EpochReport], TrialEnd]
) -> None:
    built, epochs, end = facts
    turn.trial_built(trial_id, built)
    for report in epochs:
        turn.epoch(trial_id, report)
    turn.trial_stopped(trial_id, end)


def plant_run(
    store: Store,
    facts: dict,
    *,
    profile: str = "nightly",
    started: datetime | None = None,
    elapsed_s: float = 60.0,
    trials: list[PlantedTrial] | None = None,
    valid: bool = True,
    seed: int = 0,
    division: str | None = None,
    config_hash: str | None = None,
    config: dict | None = None,
    classes: int = 10,
) -> int:
    """A completed, scored run; its score is computed from the planted epochs as a real run's is.
    `config`: the run's stored config (a whole one: a real run's), else {"profile": profile}; its
    validity's loss ceiling, if any, judges the score by loss over `classes` tokens (the LM track)."""
    started = started or datetime(2026, 11, 1, 2, 0, tzinfo=UTC)
    trials = (
        trials
        if trials is not None
        else [
            PlantedTrial("w0", 3_000_000, 1_000_000),
            PlantedTrial("w1", 5_000_000, 1_500_000, start_s=5.0),
        ]
    )
    system_id = store.upsert_system(facts)
    run_id = store.create_run(
        RunStart(
            profile=profile,
            config=config or {"profile": profile},
            seed=seed,
            budget_s=elapsed_s,
            workers=len({t.worker for t in trials}),
            division=division,
            config_hash=config_hash,
        ),
        system_id=system_id,
    ).run_id
    backdate = text("UPDATE runs SET created_at = :created WHERE id = :run_id").bindparams(
        bindparam("created", type_=DateTime(timezone=True))
    )
    with (
        store.engine.begin() as connection
    ):  # as if the run had been started a minute before its search
        connection.execute(backdate, {"created": started - timedelta(minutes=1), "run_id": run_id})
    t0 = started.timestamp()
    store.start_search(claim_of(store, run_id), t0, t0 + elapsed_s)
    store.record_dataset(
        claim_of(store, run_id),
        {
            "name": "synthetic",
            "kind": "synthetic",
            "sha256": "0" * 64,
            "train_samples": 384,
            "val_samples": 128,
            "classes": classes,
        },
    )
    work = []
    for number, t in enumerate(trials):
        key = f"t{number:02d}"
        trial_id = add_trial(
            store,
            run_id,
            key,
            number=number,
            architecture=PLANTED_ARCHITECTURE,
            hyperparameters={"learning_rate": 0.01, "batch_size": 32},
            started_at=t0 + t.start_s,
        )
        facts = _planted_facts(key, t0, t)
        in_one_turn(store, run_id, partial(_record, trial_id=trial_id, facts=facts))
        work += [
            EpochWork(
                t.samples_trained,
                t.samples_evaluated,
                t.train_ops,
                t.eval_ops,
                t.train_ops // 2,
                t.eval_ops // 2,
            )
        ] * t.epochs
    store.finish_search(claim_of(store, run_id), t0 + elapsed_s)
    best = max((t.val_accuracy for t in trials), default=None)
    validity = ValidityConfig.model_validate((config or {}).get("validity") or {})
    rules = ValidityConfig(
        min_budget_s=0.0 if valid else elapsed_s + 1,
        accuracy_floor=0.0,
        loss_ceiling=validity.loss_ceiling,
        entropy_floor=validity.entropy_floor,
    )
    score = compute_score(
        RunWork(
            epochs=work,
            elapsed_s=elapsed_s,
            best_val_accuracy=best,
            val_samples=128,
            best_val_loss=None
            if rules.loss_ceiling is None
            else min((t.val_loss for t in trials), default=None),
            vocab_size=classes,
            trials_completed=len(trials),
            budget_s=elapsed_s,
        ),
        rules=rules,
    )
    store.save_score(claim_of(store, run_id), score)
    store.finish_run(claim_of(store, run_id), status=RunStatus.COMPLETED)
    return run_id


def scaled_trials(factor: float) -> list[PlantedTrial]:
    """The default planted trials with operation counts scaled: a run `factor` times as fast."""
    return [
        PlantedTrial("w0", int(3_000_000 * factor), int(1_000_000 * factor)),
        PlantedTrial("w1", int(5_000_000 * factor), int(1_500_000 * factor), start_s=5.0),
    ]


def test_views_agree_with_the_tables(db_url):
    store = Store.open(db_url)
    try:
        run_id = plant_run(store, system_facts())
        rows = store.run_scores()
        trials = store.trial_summary(run_id)
    finally:
        store.close()
    assert [r.run_id for r in rows] == [run_id]
    # 2 epochs x (384 x train + 128 x eval) per trial, over 60 s.
    expected_total = 2 * (384 * 3_000_000 + 128 * 1_000_000) + 2 * (
        384 * 5_000_000 + 128 * 1_500_000
    )
    assert rows[0].total_ops == pytest.approx(expected_total)
    assert rows[0].ops == pytest.approx(expected_total / 60.0)
    assert rows[0].valid is True and rows[0].previous_ops is None
    assert rows[0].status is RunStatus.COMPLETED
    assert [t.trial_key for t in trials] == ["t00", "t01"]
    assert sum(t.total_ops for t in trials) == pytest.approx(expected_total)
    assert [t.duration_s for t in trials] == [pytest.approx(20.0, abs=1e-3)] * 2
    assert [(t.epochs, t.complete_epochs, t.samples_trained) for t in trials] == [(2, 2, 768)] * 2
    assert trials[1].started_at - trials[0].started_at == timedelta(seconds=5)


def test_views_migration_goes_down_and_up(db_url):
    """0002 alone, down to 0001 and up again to head (later migrations own their own downgrades)."""
    from alembic import command
    from sqlalchemy import inspect

    from aiperf.store import database

    engine = database.open_engine(db_url)
    try:
        config = database._alembic_config(engine)
        command.upgrade(config, "0002")
        assert {"run_scores", "trial_summary"} <= set(inspect(engine).get_view_names())
        command.downgrade(config, "0001")
        assert not {"run_scores", "trial_summary"} & set(inspect(engine).get_view_names())
        database.upgrade(engine)
        assert {"run_scores", "trial_summary"} <= set(inspect(engine).get_view_names())
        assert database.current_revision(engine) == database.head_revision()
    finally:
        engine.dispose()
