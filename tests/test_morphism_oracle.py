"""The morphism oracle: seeds first, then one-morphism children chosen by GP-UCB; its state in
the database is enough to resume the search."""

import random


from aiperf.arch import Network, seed_spec
from aiperf.arch.morph import Morphism, apply, deepen, widen
from aiperf.config import load_config
from aiperf.search import space
from aiperf.search.gp import ArchitectureGP
from aiperf.search.oracles import make_oracle
from aiperf.search.resume import restore
from aiperf.store import Store

SHAPE, CLASSES = (16, 16, 3), 10


def new_oracle(tmp_path, workers=2, seed=0):
    config = load_config("quick", workers=workers, seed=seed)
    return make_oracle(config, tmp_path / f"oracle-{random.random()}", SHAPE, CLASSES)


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
    assert len({(t.hyperparameters.values[space.LEARNING_RATE], t.hyperparameters.values[space.BATCH_SIZE])
                for t in trials}) > 1, "seeds train with different hyperparameters"
    assert oracle.create_trial("w2").status == "IDLE", "nothing to grow until a seed has a score"


def test_children_differ_from_their_parent_by_exactly_one_morphism(tmp_path):
    oracle = new_oracle(tmp_path)
    rng = random.Random(1)
    trials = [step(oracle, f"s{i}", rng.random()) for i in range(12)]
    networks = {t.trial_id: Network.from_json(t.hyperparameters.values[space.ARCHITECTURE]) for t in trials}
    children = [t for t in trials if t.hyperparameters.values[space.OPERATOR] != "seed"]
    assert len(children) == 10
    assert len({n.topology_key() for n in networks.values()}) >= 10, "no architecture is proposed twice"
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
    system = store.upsert_system({"fingerprint": "1" * 64, "hostname": "h", "cpu_model": "c", "cpu_cores": 1,
                                  "memory_bytes": 1, "gpus": {"count": 0, "models": []}, "platform": "p",
                                  "python_version": "3", "tensorflow_version": None, "keras_version": "3",
                                  "keras_backend": "tensorflow"})
    run = store.create_run(system_id=system, profile="quick", config={}, seed=5, budget_s=1, workers=2)
    rng = random.Random(2)
    for i in range(7):
        trial = step(original, f"s{i}", rng.random())
        values = trial.hyperparameters.values
        trial_id = store.create_trial(run_id=run, trial_key=trial.trial_id, number=i,
                                      architecture=Network.from_json(values[space.ARCHITECTURE]).to_dict(),
                                      hyperparameters={k: v for k, v in values.items() if k != space.ARCHITECTURE},
                                      started_at=0.0, operator=values[space.OPERATOR])
        store.record_epoch(trial_id, epoch=0, started_at=0.0, ended_at=1.0, samples_trained=1, samples_evaluated=1,
                           loss=1.0, accuracy=0.5, val_loss=1.0, val_accuracy=trial.score, complete=True)
        store.finish_trial(trial_id, status="completed", ended_at=1.0)
        store.save_search_state(run, "morphism", original.get_state())

    resumed = restore(new_oracle(tmp_path, seed=5), store.search_state(run), store.get_run(run).trials,
                      "val_accuracy")
    expected, got = original.create_trial("next"), resumed.create_trial("next")
    assert got.hyperparameters.values == expected.hyperparameters.values
    assert got.trial_id == expected.trial_id
