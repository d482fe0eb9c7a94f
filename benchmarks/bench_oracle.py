"""Proposal latency of the default (morphism) oracle as a run's history grows: median and p99 of one
proposal with 100, 1,000 and 10,000 scored trials, for the resnet-mini and resnet50 seeds.

A history is grown the way a search grows one (each network one random morphism of an earlier one,
each scored), then the oracle proposes again and again; after every proposal the proposed child is
scored and joins the history, so the measurement is of the steady state a long run sees (the
GP's training set changing by one trial at a time). Target: p99 <= 50 ms at 10,000 trials.

    .venv/bin/python benchmarks/bench_oracle.py [--trials 100,1000,10000] [--seeds resnet-mini,resnet50]
                                                [--proposals 50]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

# Each seed with the profile that searches from it: its image shape, classes and growth limits.
PROFILES = {"resnet-mini": "quick", "resnet50": "imagenet"}


def grow_history(oracle, seed_network, count: int, rng: random.Random) -> None:
    """`count` scored trials, each one morphism of an earlier trial (recent ones more often)."""
    from aiperf.arch.morph import random_morphism

    networks = [seed_network]
    while len(oracle.trials) < count:
        parent = networks[-1 - min(int(rng.expovariate(1 / 20)), len(networks) - 1)]
        child = random_morphism(parent, rng, 3, oracle.limits) or seed_network
        add_scored(oracle, child, rng.random())
        networks.append(child)


def add_scored(oracle, network, score: float) -> None:
    import keras_tuner as kt

    from aiperf.search import space

    hp = oracle.hyperparameters.copy()
    operator = space.SEED_OPERATOR if not oracle.trials else "bench"  # the first round: the seed
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
    trial.score = score
    oracle.trials[trial_id] = trial
    oracle._tried.add(network)


def measure(seed: str, trials: int, proposals: int) -> tuple[list[float], list[float]]:
    """Wall-clock and CPU seconds of each of `proposals` proposals after `trials` scored trials."""
    import keras_tuner as kt

    from aiperf.arch.morph import Limits
    from aiperf.arch.seeds import seed_spec
    from aiperf.arch.spec import network_from_dict
    from aiperf.config import load_config
    from aiperf.search import space
    from aiperf.search.growing import Growing
    from aiperf.search.morphism import MorphismOracle

    config = load_config(
        PROFILES[seed],
        workers=1,
        overrides={"data.source": "/data"} if seed == "resnet50" else None,
    )
    shape = (config.data.image_size, config.data.image_size, config.data.channels)
    seed_network = seed_spec(seed, shape, config.data.classes)
    limits = config.search.limits
    growing = Growing(
        search_space=config.search.space,
        first_round=1,
        objective=kt.Objective("val_accuracy", "max"),
        seed=1,
        max_trials=10**7,
        candidates=config.search.candidates,
        beta=config.search.ucb_beta,
    )
    bounds = Limits(max_layers=limits.max_layers, max_params=limits.max_params)
    oracle = MorphismOracle(seed_network, bounds, growing)
    rng = random.Random(7)
    grow_history(oracle, seed_network, trials, rng)
    latencies, cpu = [], []
    # The first proposal after the history was planted computes every pair of the GP's training set
    # at once; in a run the set grows one trial at a time. It warms up, uncounted.
    for n in range(-1, proposals):
        started, started_cpu = time.perf_counter(), time.process_time()
        proposal = oracle.populate_space(f"bench-{n}")
        if n >= 0:
            latencies.append(time.perf_counter() - started)
            cpu.append(time.process_time() - started_cpu)
        assert proposal["values"][space.OPERATOR] not in (space.SEED_OPERATOR, "bench"), (
            "a real proposal"
        )
        values = proposal["values"]
        add_scored(oracle, network_from_dict(json.loads(values[space.ARCHITECTURE])), rng.random())
    return latencies, cpu


def percentiles(seconds: list[float]) -> tuple[float, float]:
    """Median and p99 in milliseconds."""
    ordered = sorted(1e3 * s for s in seconds)
    return statistics.median(ordered), ordered[min(len(ordered) - 1, int(0.99 * len(ordered)))]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", default="100,1000,10000")
    parser.add_argument("--seeds", default="resnet-mini,resnet50")
    parser.add_argument("--proposals", type=int, default=50)
    args = parser.parse_args()
    print(f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores")
    print(
        f"{'seed':<12} {'trials':>7} {'median ms':>10} {'p99 ms':>8} {'max ms':>8} {'cpu median':>11} {'cpu p99':>8}"
    )
    for seed in args.seeds.split(","):
        for trials in (int(t) for t in args.trials.split(",")):
            latencies, cpu = measure(seed, trials, args.proposals)
            (median, p99), (cpu_median, cpu_p99) = percentiles(latencies), percentiles(cpu)
            print(
                f"{seed:<12} {trials:>7} {median:>10.1f} {p99:>8.1f} {1e3 * max(latencies):>8.1f} "
                f"{cpu_median:>11.1f} {cpu_p99:>8.1f}",
                flush=True,
            )


if __name__ == "__main__":
    main()
