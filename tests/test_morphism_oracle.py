"""The morphism oracle: seeds first, then one-morphism children chosen by GP-UCB; its state in
the database is enough to resume the search."""

import json
import random

from claims import add_epoch, add_trial, end_trial, save_search_state

from aiperf.arch import Network, seed_spec
from aiperf.arch.morph import Morphism, apply, deepen, widen
from aiperf.config import load_config
from aiperf.search import space
from aiperf.search.gp import ArchitectureGP
from aiperf.search.oracles import make_oracle
from aiperf.search.resume import restore, stored_state
from aiperf.store import RunStart, Store

SHAPE, CLASSES = (16, 16, 3), 10


def new_oracle(tmp_path, workers=2, seed=0):
    config = load_config("quick", workers=workers, seed=seed)
    return make_oracle(config, SHAPE, CLASSES)


def step(oracle, tuner_id, score):
    trial = oracle.create_trial(tuner_id)
    if trial.status == "RUNNING":
        oracle.update_trial(trial.trial_id, {"val_accuracy": score}, step=0)
        trial.status = "COMPLETED"
        oracle.end_trial(trial)
    return trial


def test_first_round_is_the_seed_on_every_worker(tmp_path):
    oracle = new_oracle(tmp_path, workers=2)
    trials = [oracle.create_trial(f"w{i}") for i in range(2)]
    assert [t.hyperparameters.values[space.OPERATOR] for t in trials] == ["seed"] * 2
    rates = {t.hyperparameters.values[space.LEARNING_RATE] for t in trials}
    assert len(rates) == 2, "seeds train with different hyperparameters"
    assert oracle.create_trial("w2").status == "IDLE", "nothing to grow until a seed has a score"


def test_the_first_round_trains_at_bare_keras_s_batch_and_later_trials_draw_theirs(tmp_path):
    """Issue 52: every first-round seed at the space's smallest batch, the one the bare Keras
    reference trains at, so each compares with it; the children's batches are drawn."""
    oracle = new_oracle(tmp_path, workers=2)
    smallest = min(oracle.search_space.batch_size)
    rng = random.Random(2)
    trials = [step(oracle, f"s{i}", rng.random()) for i in range(24)]
    first, later = trials[:2], trials[2:]
    assert {t.hyperparameters.values[space.BATCH_SIZE] for t in first} == {smallest}
    assert len({t.hyperparameters.values[space.BATCH_SIZE] for t in later}) > 1


def test_children_differ_from_their_parent_by_exactly_one_morphism(tmp_path):
    oracle = new_oracle(tmp_path)
    rng = random.Random(1)
    trials = [step(oracle, f"s{i}", rng.random()) for i in range(12)]
    networks = {
        t.trial_id: Network.from_json(t.hyperparameters.values[space.ARCHITECTURE]) for t in trials
    }
    children = [t for t in trials if t.hyperparameters.values[space.OPERATOR] != "seed"]
    assert len(children) == 10
    assert len({n.topology_key() for n in networks.values()}) >= 10, (
        "no architecture is proposed twice"
    )
    for child in children:
        values = child.hyperparameters.values
        parent = networks[values[space.PARENT]]
        assert apply(parent, Morphism.parse(values[space.OPERATOR])) == networks[child.trial_id]


def test_gp_prefers_the_neighbourhood_of_good_architectures():
    seed = seed_spec("resnet-mini", SHAPE, CLASSES)
    good = deepen(seed, "stage3_block1_out", 3)
    bad = widen(widen(seed, "stage1_block1_1_conv"), "stage2_block1_1_conv")
    gp = ArchitectureGP().fit([seed, good, bad], [0.5, 0.9, 0.1])
    mean, std = gp.predict([deepen(good, "m1_relu", 3), widen(bad, "stage3_block1_1_conv")])
    assert mean[0] > mean[1]
    assert (std >= 0).all()


def test_state_in_the_database_resumes_the_search(tmp_path, sqlite_url):
    original = new_oracle(tmp_path, seed=5)
    store = Store.open(sqlite_url)
    system = store.upsert_system(
        {
            "fingerprint": "1" * 64,
            "hostname": "h",
            "cpu_model": "c",
            "cpu_cores": 1,
            "memory_bytes": 1,
            "gpus": {"count": 0, "models": []},
            "platform": "p",
            "python_version": "3",
            "tensorflow_version": None,
            "keras_version": "3",
            "keras_backend": "tensorflow",
        }
    )
    run = store.create_run(
        RunStart(profile="quick", config={}, seed=5, budget_s=1, workers=2), system_id=system
    ).run_id
    rng = random.Random(2)
    for i in range(7):
        trial = step(original, f"s{i}", rng.random())
        values = trial.hyperparameters.values
        trial_id = add_trial(
            store,
            run,
            trial.trial_id,
            number=i,
            architecture=Network.from_json(values[space.ARCHITECTURE]).to_dict(),
            hyperparameters={k: v for k, v in values.items() if k != space.ARCHITECTURE},
            started_at=0.0,
            operator=values[space.OPERATOR],
        )
        add_epoch(
            store,
            trial_id,
            epoch=0,
            started_at=0.0,
            ended_at=1.0,
            samples_trained=1,
            samples_evaluated=1,
            loss=1.0,
            accuracy=0.5,
            val_loss=1.0,
            val_accuracy=trial.score,
            complete=True,
        )
        end_trial(store, trial_id, "completed", 1.0)
        save_search_state(store, run, "morphism", stored_state(original))

    resumed = restore(
        new_oracle(tmp_path, seed=5),
        store.search_state(run),
        store.get_run(run).trials,
        "val_accuracy",
    )
    expected, got = original.create_trial("next"), resumed.create_trial("next")
    assert got.hyperparameters.values == expected.hyperparameters.values
    assert got.trial_id == expected.trial_id


def test_the_stored_state_stays_the_same_size_however_many_trials(tmp_path):
    # It is stored with every proposal: the per-trial lists are in the records, not in it.
    oracle = new_oracle(tmp_path, workers=2, seed=1)
    rng = random.Random(4)
    sizes, whole = [], []
    for i in range(60):
        step(oracle, f"s{i}", rng.random())
        if i in (9, 59):
            sizes.append(len(json.dumps(stored_state(oracle))))
            whole.append(len(json.dumps(oracle.get_state())))
    assert whole[1] - whole[0] > 5000, "keras-tuner's own state grows with the trials"
    assert abs(sizes[1] - sizes[0]) < 50, sizes


def test_distance_matrix_equals_the_pairwise_distance():
    import random as random_module

    import numpy as np

    from aiperf.arch.morph import Limits, random_morphism
    from aiperf.search.distance import describe, distance, distance_matrix

    rng = random_module.Random(3)
    networks = [seed_spec("resnet-mini", (16, 16, 3), 10)]
    while len(networks) < 12:
        child = random_morphism(
            rng.choice(networks), rng, 3, Limits(max_layers=200, max_params=10**8)
        )
        if child is not None:
            networks.append(child)
    described = [describe(n) for n in networks]
    pairwise = np.array([[distance(a, b) for b in described] for a in described])
    assert np.allclose(distance_matrix(described, described), pairwise, rtol=0, atol=1e-9)
    assert np.allclose(
        distance_matrix(described[:3], described[5:]), pairwise[:3, 5:], rtol=0, atol=1e-9
    )


def test_the_gp_trains_on_a_bounded_set_and_keeps_its_distances():
    import keras_tuner as kt
    import numpy as np

    from aiperf.search import memory
    from aiperf.search.distance import distance_matrix

    def trial(i: int, score: float):
        t = kt.engine.trial.Trial(
            hyperparameters=kt.HyperParameters(), trial_id=f"{i:06d}", status="COMPLETED"
        )
        t.score = score
        return t

    scored = [trial(i, (i * 37) % 101 / 101) for i in range(500)]
    chosen = memory.training_set(scored)
    assert len(chosen) == memory.TRAINING_SIZE
    best = sorted(scored, key=lambda t: t.score, reverse=True)[: memory.BEST]
    assert {t.trial_id for t in best} <= {t.trial_id for t in chosen}, (
        "the best trials are always in"
    )
    assert {t.trial_id for t in scored[-memory.RECENT :]} <= {t.trial_id for t in chosen}, (
        "so are the newest"
    )
    assert memory.training_set(scored[:10]) == scored[:10], (
        "small runs train on every scored trial"
    )

    # Incremental distances equal a full recomputation, as trials join and leave the set.
    from aiperf.arch.morph import Limits, random_morphism

    rng = random.Random(4)
    networks = [seed_spec("resnet-mini", (16, 16, 3), 10)]
    while len(networks) < 6:
        child = random_morphism(
            rng.choice(networks), rng, 3, Limits(max_layers=200, max_params=10**8)
        )
        if child is not None:
            networks.append(child)
    with_networks = []
    for i, network in enumerate(networks):
        t = trial(i, 0.5)
        t.hyperparameters.values = {space.ARCHITECTURE: network.to_json()}
        with_networks.append(t)
    remembered = memory.SearchMemory()
    for window in (with_networks[:3], with_networks[1:5], with_networks[2:6], with_networks[:6]):
        described = [remembered.described(t) for t in window]
        full = distance_matrix(described, described)
        assert np.allclose(remembered.training_distances(window), full, rtol=0, atol=1e-12)


def test_the_oracles_write_no_files(tmp_path, monkeypatch):
    # keras-tuner would rewrite its whole state to files at every call (quadratic in the trials);
    # aiperf keeps the state in the database, so nothing may appear on disk.
    monkeypatch.chdir(tmp_path)
    for oracle_name in ("morphism", "random"):
        config = load_config("quick", workers=2, seed=1, overrides={"search.oracle": oracle_name})
        oracle = make_oracle(config, SHAPE, CLASSES)
        for i in range(4):
            step(oracle, f"w{i}", 0.5 + i / 10)
    assert list(tmp_path.iterdir()) == []
