"""The shortcuts that keep a proposal flat in the number of trials change nothing the search sees:
keys, shapes and weights of children are those of a full computation, a child's distances from its
parent's tables are the dynamic programme's, the training set is stable from one proposal to the
next, and a warm oracle proposes what a cold (resumed) one does."""

import json
import random

import keras_tuner as kt
import numpy as np
import pytest

from aiperf.arch import seed_spec
from aiperf.arch.graph import _count_params, _infer_shapes, validate
from aiperf.arch.morph import Limits, deepen, random_morphism, skip, skip_pairs, widen
from aiperf.config import load_config
from aiperf.search import memory, space
from aiperf.search.distance import ConvKinds, EditTables, conv_distance_matrix, describe, edit_from
from aiperf.search.oracles import make_oracle
from aiperf.search.tried import TriedArchitectures, fingerprint

MINI = seed_spec("resnet-mini", (16, 16, 3), 10)
LARGE = Limits(max_layers=1000, max_params=10**8)


def lineage(seed, count: int, rng: random.Random, limits: Limits = LARGE) -> list:
    """`count` networks, each one random morphism of an earlier one."""
    networks = [seed]
    while len(networks) < count:
        child = random_morphism(rng.choice(networks), rng, rng.choice([3, 5]), limits)
        if child is not None:
            networks.append(child)
    return networks


def test_topology_keys_are_the_ones_stored_by_earlier_runs():
    # Keys are stored in the oracle's state (its tried set): the text they hash must not change.
    pairs = skip_pairs(MINI)
    assert MINI.topology_key() == "3125726c2fcc9912"
    assert deepen(MINI, "stage2_block1_out", 5).topology_key() == "ed405da9d086b674"
    assert widen(MINI, "stage2_block1_1_conv").topology_key() == "be740f8512fdfcc1"
    assert skip(MINI, *pairs[0]).topology_key() == "e45c8489101b34ed"
    assert skip(MINI, *pairs[-1]).topology_key() == "67d2f8161e6f6f06"
    assert seed_spec("resnet50", (224, 224, 3), 1000).topology_key() == "66300f4ec012e928"


@pytest.mark.parametrize(
    "seed", [MINI, seed_spec("resnet50", (64, 64, 3), 10)], ids=["resnet-mini", "resnet50"]
)
def test_children_made_without_validation_are_valid_with_the_full_shapes_and_weights(seed):
    for child in lineage(seed, 60, random.Random(5))[1:]:
        validate(child)
        assert child.__dict__.get("_shapes") is None or child.__dict__["_shapes"] == _infer_shapes(
            child
        )
        assert child.__dict__.get("_params") is None or child.__dict__["_params"] == _count_params(
            child
        )
        reparsed = type(child).from_json(child.to_json())  # validated at construction
        assert reparsed == child and reparsed.topology_key() == child.topology_key()


def test_edit_from_finds_the_one_convolution_a_morphism_changes():
    a, b, c = (16, 3, 1), (32, 3, 1), (16, 1, 2)
    assert edit_from([a, b], [a, b]) == ("same", 0, None)
    assert edit_from([a, b], [a, c, b]) == ("insert", 1, c)
    assert edit_from([a, b], [a, b, c]) == ("insert", 2, c)
    assert edit_from([a, b], [c, b]) == ("change", 0, c)
    assert edit_from([a, b], [b, a]) is None
    assert edit_from([a, b], [c, a, b, c]) is None


def test_children_distances_from_parent_tables_equal_the_dynamic_programme():
    rng = random.Random(1)
    networks = lineage(seed_spec("resnet50", (64, 64, 3), 10), 80, rng)
    convs = [describe(n)[0] for n in networks]
    kinds = ConvKinds()
    tables = EditTables(kinds)
    for _ in range(5):  # members join, leave and reuse slots; parents change
        members = {i: kinds.ids(convs[i]) for i in rng.sample(range(len(networks)), 20)}
        parents = {i: kinds.ids(convs[i]) for i in rng.sample(range(len(networks)), 3)}
        tables.sync(parents, members)
        order = list(members)
        rng.shuffle(order)
        for parent in parents:
            children = [
                c
                for c in (random_morphism(networks[parent], rng, 3, LARGE) for _ in range(12))
                if c
            ]
            edits = []
            for child in children:
                kind, position, new = edit_from(convs[parent], describe(child)[0])
                edits.append((kind, position, int(kinds.ids([new])[0]) if new else 0))
            expected = conv_distance_matrix(
                [describe(c)[0] for c in children], [convs[i] for i in order]
            )
            assert np.allclose(tables.distances(parent, edits, order), expected, rtol=0, atol=1e-9)


@pytest.mark.parametrize("held", ["networks", "json"])
@pytest.mark.parametrize(
    "seed", [MINI, seed_spec("resnet50", (64, 64, 3), 10)], ids=["resnet-mini", "resnet50"]
)
def test_the_tried_set_answers_as_topology_keys_do(seed, held):
    rng = random.Random(3)
    networks = lineage(seed, 120, rng)

    def hold(nets):
        return nets if held == "networks" else [(n, n.to_json()) for n in nets]

    tried = TriedArchitectures(hold(networks[::2]))
    keys = {n.topology_key() for n in networks[::2]}
    questions = networks + [
        c for c in (random_morphism(rng.choice(networks), rng, 3, LARGE) for _ in range(300)) if c
    ]
    # Renamed copies (equal computation, other node names and history) are the same architecture.
    questions += [type(n).from_json(n.to_json().replace('"m1_', '"x1_')) for n in networks[:20]]
    answers = [n in tried for n in questions]
    assert answers == [n.topology_key() in keys for n in questions]
    assert any(answers) and not all(answers)
    # Children whose fingerprints agree (a residual from either of two ReLUs to one target, through a
    # projection; a 3x3 deepen after either of two ReLUs of one block) are told apart by their keys.
    children = [deepen(seed, n.id, 3) for n in seed.nodes if n.kind == "relu"] + [
        skip(seed, *p) for p in skip_pairs(seed)
    ]
    by_fingerprint = {}
    for child in children:
        by_fingerprint.setdefault(fingerprint(child), []).append(child)
    a, b = next(group for group in by_fingerprint.values() if len(group) > 1)[:2]
    assert a.topology_key() != b.topology_key()
    assert a not in TriedArchitectures(hold([b])) and a in TriedArchitectures(hold([b, a]))


def test_the_best_few_are_the_first_of_the_full_ranking():
    rng = np.random.default_rng(4)
    for n in (1, 7, 100, 3000):
        scores = rng.integers(0, 5, n).astype(float)  # many ties: equal scores keep their order
        ranks = rng.integers(0, 2**63, n, dtype=np.uint64)
        for k in (0, 1, 5, 32, n, n + 3):
            assert list(memory.best(scores, k)) == list(memory.ranking(scores)[:k])
            assert list(memory.smallest(ranks, k)) == list(np.argsort(ranks, kind="stable")[:k])


def scored_trials(count: int) -> list:
    trials = []
    for i in range(count):
        trial = kt.engine.trial.Trial(
            hyperparameters=kt.HyperParameters(), trial_id=f"{i:06d}", status="COMPLETED"
        )
        trial.score = (i * 37) % 101 / 101
        trials.append(trial)
    return trials


def test_the_training_set_changes_by_about_one_trial_per_proposal():
    scored = scored_trials(2300)
    changes = []
    previous = {t.trial_id for t in memory.training_set(scored[:2000])}
    for n in range(2001, 2301):
        chosen = memory.training_set(scored[:n])
        ids = {t.trial_id for t in chosen}
        assert len(chosen) == memory.TRAINING_SIZE
        assert chosen == sorted(chosen, key=lambda t: t.trial_id), "in the order given"
        changes.append(len(ids - previous))
        previous = ids
    assert np.mean(changes) < 1.5, (
        "the recent window moves by one; the sample and the best rarely change"
    )
    assert memory.training_set(scored) == memory.training_set(list(scored)), (
        "the same trials, the same set"
    )


def plant(oracle, networks, rng: random.Random) -> None:
    """Scored trials of `networks`, as if the oracle had proposed them."""
    for network in networks:
        hp = oracle.hyperparameters.copy()
        operator = space.SEED_OPERATOR if not oracle.trials else "planted"
        hp.values = {
            space.ARCHITECTURE: network.to_json(),
            space.OPERATOR: operator,
            space.PARENT: None,
            space.LEARNING_RATE: 0.01,
            space.BATCH_SIZE: 32,
            space.KERNEL_SIZE: 3,
            space.DROPOUT: 0.0,
        }
        trial_id = f"{len(oracle.trials):06d}"
        trial = kt.engine.trial.Trial(hyperparameters=hp, trial_id=trial_id, status="COMPLETED")
        trial.score = rng.random()
        oracle.trials[trial_id] = trial
        oracle._tried.add(network)


@pytest.mark.parametrize(
    "kept", [memory.NETWORKS_KEPT, 8], ids=["networks kept", "networks parsed again"]
)
def test_a_warm_oracle_proposes_what_a_cold_one_does(tmp_path, monkeypatch, kept):
    # The memory (networks, distances, tables) is derived from the trials: an oracle that has kept it
    # over many proposals and one that rebuilds it (a resumed run) must agree, past the bounded set,
    # and so must one that keeps few networks parsed and parses the others again when it needs them.
    monkeypatch.setattr(memory, "NETWORKS_KEPT", kept)
    config = load_config("quick", workers=1, seed=3)
    warm = make_oracle(config, (16, 16, 3), 10)
    rng = random.Random(9)
    plant(warm, lineage(warm.seed_network, 150, random.Random(2), warm.limits), rng)
    for _ in range(8):
        values = warm.populate_space("next")["values"]
        plant(warm, [type(warm.seed_network).from_json(values[space.ARCHITECTURE])], rng)
    cold = make_oracle(config, (16, 16, 3), 10)
    cold.trials = dict(warm.trials)
    cold.set_state(
        {**cold.get_state(), "morphism": json.loads(json.dumps(warm.get_state()["morphism"]))}
    )
    assert cold.populate_space("next") == warm.populate_space("next")


def test_the_scored_trials_are_kept_up_to_date_without_going_through_all_of_them():
    def trial(i: int, status: str, score=None):
        t = kt.engine.trial.Trial(
            hyperparameters=kt.HyperParameters(), trial_id=f"{i:06d}", status=status
        )
        t.score = score
        return t

    remembered = memory.SearchMemory()
    trials = {
        t.trial_id: t
        for t in (
            trial(0, "COMPLETED", 0.5),
            trial(1, "RUNNING"),
            trial(2, "FAILED"),
            trial(3, "COMPLETED", float("nan")),
            trial(4, "COMPLETED", 0.7),
        )
    }
    scored, scores, _ = remembered.scored(trials)
    assert [t.trial_id for t in scored] == ["000000", "000004"] and list(scores) == [0.5, 0.7]
    trials["000001"].status, trials["000001"].score = "COMPLETED", None  # ended, not scored yet
    trials["000005"] = trial(5, "COMPLETED", 0.1)
    assert [t.trial_id for t in remembered.scored(trials)[0]] == ["000000", "000004", "000005"]
    trials["000001"].score = 0.9  # an older trial finishing last takes its place in creation order
    scored, scores, ranks = remembered.scored(trials)
    assert [t.trial_id for t in scored] == ["000000", "000001", "000004", "000005"]
    assert list(scores) == [0.5, 0.9, 0.7, 0.1]
    assert list(ranks) == [memory.sample_rank(t.trial_id) for t in scored]


def test_the_search_benchmarks_run_and_the_quality_one_is_deterministic():
    # They import aiperf's oracle directly: a change of its interface must fail here, not in a user's hands.
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "benchmarks"))
    from bench_oracle import measure
    from bench_search_quality import search

    first = search(0, 6, 2, [3, 6])
    assert [trials for trials, _best, _digest in first] == [3, 6]
    assert first[0][1] <= first[1][1] < 1.0, "the best so far never falls"
    assert search(0, 6, 2, [3, 6]) == first, "one seed, the same proposals and scores"
    wall, cpu = measure("resnet-mini", 20, 3)
    assert len(wall) == len(cpu) == 3 and all(seconds > 0 for seconds in wall)
