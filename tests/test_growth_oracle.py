"""The growth oracle (the LM track's search): seeds first, then children one growth step from the
best-scoring trials (lowest val_loss), never a repeat, chosen by GP-UCB; its state and the trials
resume the search; make_oracle dispatches a transformer seed to it; decode gives the worker the
spec and the searched training settings. No Keras model is built here."""

import copy
import json
import math
import random
from types import SimpleNamespace

import keras_tuner as kt
import pytest

from aiperf.arch import grow
from aiperf.arch.morph import Morphism
from aiperf.arch.transformer import TransformerSpec, is_transformer, transformer_seed
from aiperf.config import load_config
from aiperf.errors import UserError
from aiperf.search import space
from aiperf.search.growth import GrowthOracle
from aiperf.search.morphism import MorphismOracle
from aiperf.search.oracles import make_oracle
from aiperf.search.resume import restore, stored_state
from aiperf.status import TrialStatus

SEQ_LEN, VOCAB = 32, 256
SHAPE = (SEQ_LEN, 1, 1)  # a token manifest's image_shape
LM_SPACE = {
    "learning_rate": [1e-4, 1e-2],
    "batch_tokens": [512, 1024, 100],
    "warmup_epochs": [0.0, 0.5],
    "weight_decay": [0.0, 0.01, 0.1],
    "dropout": [0.0, 0.1],
}


def lm_config(workers=2, seed=0, objective="val_loss", oracle="morphism", **search):
    overrides = {
        "search": {
            "oracle": oracle,
            "seed_architecture": "lm-tiny",
            "objective": objective,
            "space": LM_SPACE,
            **search,
        }
    }
    # The LM track's profile; a val_accuracy search (the oracle's direction "max", tested for its
    # logic) is the CNN track's objective, which a config takes only with images.
    profile = "lm-quick" if objective == "val_loss" else "quick"
    return load_config(profile, workers=workers, seed=seed, overrides=overrides)


def new_oracle(**kwargs):
    return make_oracle(lm_config(**kwargs), SHAPE, VOCAB)


def spec_of(trial):
    return TransformerSpec.from_json(trial.hyperparameters.values[space.ARCHITECTURE])


def step(oracle, tuner_id, score):
    """One trial proposed, scored and ended, as the flow does."""
    trial = oracle.create_trial(tuner_id)
    if trial.status == "RUNNING":
        oracle.update_trial(trial.trial_id, {oracle.objective.name: score}, step=0)
        trial.status = "COMPLETED"
        oracle.end_trial(trial)
    return trial


def loss_of(spec, rng):
    """A made-up loss: deeper is better, wider MLPs worse, and a little noise so none tie."""
    return 4.0 - 0.3 * spec.layers + 0.2 * (spec.mlp_width / 256) + rng.uniform(0, 0.01)


def test_first_round_is_the_seed_on_every_worker():
    oracle = new_oracle(workers=2)
    seed = transformer_seed("lm-tiny", vocab_size=VOCAB, seq_len=SEQ_LEN)
    trials = [oracle.create_trial(f"w{i}") for i in range(2)]
    assert all(spec_of(t) == seed for t in trials)
    assert [t.hyperparameters.values[space.OPERATOR] for t in trials] == [space.SEED_OPERATOR] * 2
    assert all(t.hyperparameters.values[space.PARENT] is None for t in trials)
    assert len({t.hyperparameters.values[space.LEARNING_RATE] for t in trials}) == 2, (
        "each seed trains with its own hyperparameters"
    )
    assert oracle.create_trial("w2").status == "IDLE", "nothing to grow until a seed has a score"


def test_children_are_one_growth_step_from_a_scored_parent_and_never_repeat():
    oracle = new_oracle(workers=2, seed=3, limits={"max_layers": 12, "max_params": 3_000_000})
    rng = random.Random(1)
    trials, scored_before = [], []
    for i in range(200):
        scored_before.append({t.trial_id for t in trials if t.score is not None})
        trial = oracle.create_trial(f"s{i}")
        assert trial.status == "RUNNING"
        oracle.update_trial(trial.trial_id, {"val_loss": loss_of(spec_of(trial), rng)}, step=0)
        trial.status = "COMPLETED"
        oracle.end_trial(trial)
        trials.append(trial)
    by_id = {t.trial_id: t for t in trials}
    children = [t for t in trials if t.hyperparameters.values[space.OPERATOR] != "seed"]
    assert len(children) >= 150, "the limits leave room for most proposals to grow"
    keys = [spec_of(t).architecture_key() for t in children]
    assert len(set(keys)) == len(keys), "no architecture is proposed twice"
    seed_key = spec_of(trials[0]).architecture_key()
    assert seed_key not in keys
    operators = set()
    for number, child in enumerate(trials):
        values = child.hyperparameters.values
        if values[space.OPERATOR] == "seed":
            continue
        parent_id, spec = values[space.PARENT], spec_of(child)
        assert parent_id in scored_before[number], "grown from a trial that had a score"
        step_made = spec.history[-1]
        assert values[space.OPERATOR] == Morphism.parse(step_made).operator
        assert grow.apply(spec_of(by_id[parent_id]), step_made) == spec
        assert grow.within(spec, oracle.limits)
        operators.add(values[space.OPERATOR])
    assert operators == set(grow.OPERATORS), "every operator is proposed"


def _completed(oracle, trial_id, spec, score, operator="seed", parent=None):
    """A scored trial put into the oracle as resume.restore does (no training)."""
    hp = oracle.hyperparameters.copy()
    hp.values = {
        space.LEARNING_RATE: 1e-3,
        space.BATCH_SIZE: 16,
        space.DROPOUT: 0.0,
        space.ARCHITECTURE: spec.to_json(),
        space.PARENT: parent,
        space.OPERATOR: operator,
    }
    trial = kt.engine.trial.Trial(hyperparameters=hp, trial_id=trial_id, status="COMPLETED")
    trial.metrics.register(oracle.objective.name, direction=oracle.objective.direction)
    trial.metrics.update(oracle.objective.name, score, step=0)
    trial.score, trial.best_step = score, 0
    oracle.trials[trial_id] = trial
    oracle.start_order.append(trial_id)
    oracle.end_order.append(trial_id)


@pytest.mark.parametrize("objective", ["val_loss", "val_accuracy"])
def test_the_objective_s_direction_decides_which_trials_are_grown(objective):
    # The same numbers: as losses the deep child is the best trial, as accuracies the wide one.
    limits = {"max_layers": 12, "max_params": 50_000_000}
    oracle = new_oracle(workers=2, objective=objective, ucb_beta=0.0, candidates=48, limits=limits)
    assert oracle.objective.direction == ("min" if objective == "val_loss" else "max")
    seed = oracle.seed_spec
    deep = grow.deepen(seed, 2)
    wide = grow.widen_model(grow.widen_model(seed, 2), 2)
    _completed(oracle, "000000", seed, 3.0)
    _completed(oracle, "000001", seed, 3.1)
    _completed(oracle, "000002", deep, 1.0, "deepen", "000000")
    _completed(oracle, "000003", wide, 5.0, "widen_model", "000000")
    best, worst = ("000002", "000003") if objective == "val_loss" else ("000003", "000002")
    oracle.set_state(oracle.get_state())  # as resume.restore does after putting the trials in

    proposal = oracle.create_trial("w0").hyperparameters.values
    assert proposal[space.PARENT] == best, "the GP predicts the best trial's neighbourhood best"

    oracle.top_parents = 1
    for i in range(3):  # only the best trial is a parent while it has untried children
        trial = oracle.create_trial(f"v{i}")
        assert trial.hyperparameters.values[space.PARENT] == best
        assert trial.hyperparameters.values[space.PARENT] != worst


def test_with_top_parents_one_each_child_grows_from_the_lowest_loss_that_can_grow():
    oracle = new_oracle(workers=2, seed=7)
    oracle.top_parents = 1
    rng = random.Random(2)
    losses: dict[str, float] = {}
    specs: dict[str, TransformerSpec] = {}
    for i in range(40):
        tried = {spec.architecture_key() for spec in specs.values()}
        can_grow = [
            trial_id
            for trial_id, spec in specs.items()
            if any(c.architecture_key() not in tried for c in grow.candidates(spec, oracle.limits))
        ]
        lowest = min(can_grow, key=losses.__getitem__) if can_grow else None
        trial = oracle.create_trial(f"w{i}")
        values = trial.hyperparameters.values
        if values[space.OPERATOR] != "seed":
            assert values[space.PARENT] == lowest
        specs[trial.trial_id] = spec_of(trial)
        losses[trial.trial_id] = rng.uniform(1.0, 5.0)
        oracle.update_trial(trial.trial_id, {"val_loss": losses[trial.trial_id]}, step=0)
        trial.status = "COMPLETED"
        oracle.end_trial(trial)


def test_no_room_to_grow_trains_the_seed_again():
    seed = transformer_seed("lm-tiny", vocab_size=VOCAB, seq_len=SEQ_LEN)
    oracle = new_oracle(workers=1, limits={"max_layers": 4, "max_params": seed.param_count})
    rng = random.Random(0)
    trials = [step(oracle, f"w{i}", rng.uniform(1, 2)) for i in range(4)]
    assert all(t.status == "COMPLETED" for t in trials), "every one ran"
    assert all(t.hyperparameters.values[space.OPERATOR] == "seed" for t in trials)
    assert all(spec_of(t) == seed for t in trials)


def test_a_best_trial_at_the_limits_leaves_the_next_best_to_grow():
    seed = transformer_seed("lm-tiny", vocab_size=VOCAB, seq_len=SEQ_LEN)
    big = grow.widen_model(grow.widen_mlp(seed, 2), 2)
    oracle = new_oracle(workers=2, limits={"max_layers": 12, "max_params": big.param_count})
    oracle.top_parents = 1
    _completed(oracle, "000000", seed, 3.1)
    _completed(oracle, "000001", seed, 3.0)
    _completed(oracle, "000002", big, 1.0, "widen_model", "000000")
    assert not grow.candidates(big, oracle.limits), "the best trial cannot grow"
    values = oracle.create_trial("w0").hyperparameters.values
    assert values[space.OPERATOR] != "seed", "a trial that can grow is grown"
    assert values[space.PARENT] == "000001", "the best of those that can grow"


def _records(oracle):
    """The trials as the run's records hold them (aiperf.store.TrialRecord's fields restore reads)."""
    records = []
    for number, trial in enumerate(oracle.trials.values()):
        values = dict(trial.hyperparameters.values)
        architecture = json.loads(values.pop(space.ARCHITECTURE))
        records.append(
            SimpleNamespace(
                number=number,
                trial_key=trial.trial_id,
                hyperparameters=values,
                architecture=architecture,
                status=TrialStatus.COMPLETED,
                ended_at=float(number),
                best_val_accuracy=None,
                best_val_loss=trial.score,
            )
        )
    return records


@pytest.mark.parametrize("inherit", [False, True])
@pytest.mark.parametrize("how", ["get_state/set_state", "stored state and records"])
def test_the_state_and_the_trials_resume_the_same_search(how, inherit):
    original = new_oracle(workers=2, seed=5, inherit=inherit)
    rng = random.Random(3)
    for i in range(25):
        step(original, f"s{i}", rng.uniform(1.0, 5.0))
    resumed = new_oracle(workers=2, seed=99, inherit=inherit)  # the state sets the random state
    if how == "get_state/set_state":
        resumed.trials = copy.deepcopy(original.trials)
        resumed.set_state(json.loads(json.dumps(original.get_state())))
    else:
        restore(resumed, stored_state(original), _records(original), "val_loss")
        assert all(t.score == original.trials[t.trial_id].score for t in resumed.trials.values())
    assert resumed._tried == original._tried
    for i in range(3):
        expected = step(original, f"n{i}", 2.0 + i)
        got = step(resumed, f"n{i}", 2.0 + i)
        assert got.trial_id == expected.trial_id
        assert got.hyperparameters.values == expected.hyperparameters.values
        assert got.hyperparameters.values[space.OPERATOR] != "seed"


def test_with_inherit_a_child_s_hyperparameters_are_its_parent_s_perturbed():
    """search.inherit: a child continues its parent, so its learning rate is the parent's times 0.8
    or 1.25 (within the range) and most of its choices are the parent's; each within the space.
    Without it, a child's rate is drawn afresh over the whole range."""
    ratios = {}
    for inherit in (True, False):
        oracle = new_oracle(workers=2, seed=13, inherit=inherit)
        rng = random.Random(6)
        trials = [step(oracle, f"w{i}", rng.uniform(1, 5)) for i in range(60)]
        kept, ratios[inherit] = 0, []
        children = [t for t in trials if t.hyperparameters.values[space.PARENT] is not None]
        for child in children:
            values = child.hyperparameters.values
            parent = oracle.trials[values[space.PARENT]].hyperparameters.values
            ratios[inherit].append(values[space.LEARNING_RATE] / parent[space.LEARNING_RATE])
            assert 1e-4 <= values[space.LEARNING_RATE] <= 1e-2
            assert values[space.BATCH_SIZE] == max(1, values[space.BATCH_TOKENS] // SEQ_LEN)
            names = (space.BATCH_TOKENS, space.DROPOUT, space.WARMUP_EPOCHS, space.WEIGHT_DECAY)
            for name in names:
                assert values[name] in LM_SPACE[name]
                kept += values[name] == parent[name]
        if inherit:
            assert all(0.8 - 1e-9 <= r <= 1.25 + 1e-9 for r in ratios[True]), ratios[True]
            assert kept >= 0.7 * 4 * len(children), "a choice is drawn again one time in four"
    assert max(abs(math.log(r)) for r in ratios[False]) > math.log(1.25), (
        "fresh draws range widely"
    )


def test_hyperparameters_land_in_their_ranges():
    oracle = new_oracle(workers=2, seed=11)
    rng = random.Random(4)
    trials = [step(oracle, f"w{i}", rng.uniform(1, 5)) for i in range(40)]
    for trial in trials:
        values = trial.hyperparameters.values
        assert 1e-4 <= values[space.LEARNING_RATE] <= 1e-2
        assert values[space.BATCH_TOKENS] in LM_SPACE["batch_tokens"]
        assert values[space.BATCH_SIZE] == max(1, values[space.BATCH_TOKENS] // SEQ_LEN)
        assert values[space.DROPOUT] in LM_SPACE["dropout"]
        assert values[space.WARMUP_EPOCHS] in LM_SPACE["warmup_epochs"]
        assert values[space.WEIGHT_DECAY] in LM_SPACE["weight_decay"]
    assert {t.hyperparameters.values[space.BATCH_SIZE] for t in trials} == {3, 16, 32}
    assert len({t.hyperparameters.values[space.WEIGHT_DECAY] for t in trials}) == 3


def test_without_batch_tokens_the_batch_size_is_drawn_and_the_train_settings_apply():
    bare = {"learning_rate": [1e-3, 1e-2], "batch_size": [4, 8]}
    bare |= {"batch_tokens": None, "warmup_epochs": None, "weight_decay": None}  # lm-quick's unset
    oracle = new_oracle(workers=2, space=bare)
    rng = random.Random(5)
    trials = [step(oracle, f"w{i}", rng.uniform(1, 5)) for i in range(12)]
    for trial in trials:
        values = trial.hyperparameters.values
        assert values[space.BATCH_SIZE] in (4, 8)
        assert not {space.BATCH_TOKENS, space.WARMUP_EPOCHS, space.WEIGHT_DECAY} & set(values)
        proposal = space.decode(values, SHAPE, VOCAB)
        assert proposal.warmup_epochs is None and proposal.weight_decay is None


def test_decode_gives_the_worker_the_transformer_spec_and_its_training():
    oracle = new_oracle(workers=1, seed=2)
    rng = random.Random(6)
    trials = [step(oracle, f"w{i}", rng.uniform(1, 5)) for i in range(4)]
    child = trials[-1].hyperparameters.values
    assert child[space.OPERATOR] != "seed"
    proposal = space.decode(child, SHAPE, VOCAB)
    assert proposal.network is None
    assert is_transformer(proposal.architecture)
    assert proposal.architecture == spec_of(trials[-1]).to_dict()
    assert proposal.architecture["format"] == "aiperf-transformer/1"
    assert TransformerSpec.from_dict(proposal.architecture).seq_len == SEQ_LEN
    assert proposal.batch_size == child[space.BATCH_SIZE]
    assert proposal.learning_rate == child[space.LEARNING_RATE]
    assert proposal.warmup_epochs == child[space.WARMUP_EPOCHS]
    assert proposal.weight_decay == child[space.WEIGHT_DECAY]
    assert (proposal.parent_key, proposal.operator) == (child[space.PARENT], child[space.OPERATOR])


def test_make_oracle_dispatches_on_the_seed():
    config = lm_config(workers=1, limits={"max_layers": 6, "max_params": 900_000})
    oracle = make_oracle(config, SHAPE, VOCAB)
    assert isinstance(oracle, GrowthOracle)
    assert oracle.seed_spec == transformer_seed("lm-tiny", vocab_size=VOCAB, seq_len=SEQ_LEN)
    assert oracle.limits == grow.Limits(max_layers=6, max_params=900_000)
    assert oracle.first_round == 1
    assert oracle.objective.direction == "min"
    cnn = make_oracle(load_config("quick", workers=2), (16, 16, 3), 10)
    assert isinstance(cnn, MorphismOracle)
    assert cnn.objective.direction == "max"


@pytest.mark.parametrize("name", ["random", "bayesian", "hyperband"])
def test_keras_tuner_s_oracles_refuse_a_transformer_seed(name):
    with pytest.raises(UserError) as refused:
        make_oracle(lm_config(oracle=name), SHAPE, VOCAB)
    message = str(refused.value)
    assert "\n" not in message
    assert name in message and "lm-tiny" in message
