"""Search quality of the default (morphism) oracle on the quick profile's search, without training:
the best score reached after a fixed number of trials, per seed, on a synthetic objective.

Why synthetic: a 3-minute quick run trains 10 to 30 trials, too few to reach the bounded training
set (memory.TRAINING_SIZE), and its scores change with timing; here each trial's score is a fixed
function of what the oracle proposed, so two versions of the oracle are compared on the same
objective and only their proposals differ. The objective is a plausible accuracy surface, not a
measurement: it rises with depth and width with diminishing returns, rewards a few skips, penalises
models past a size, prefers a learning rate near 0.03 and a little dropout, plus noise drawn from
the seed and the trial's number. Workers are simulated: `--workers` trials are outstanding at
once, and the oldest finishes first.

    .venv/bin/python benchmarks/bench_search_quality.py [--seeds 0,1,2] [--trials 64,150,300] [--workers 2]

To compare with another version, run the same file from that version's checkout (the script
imports the aiperf beside it). The digest column is a hash of the architectures proposed up to that
point: equal digests mean the two versions proposed exactly the same networks.
"""

from __future__ import annotations

import argparse
import hashlib
import math
import os
import random
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

SHAPE, CLASSES = (32, 32, 3), 10


def synthetic_accuracy(values: dict, noise: random.Random) -> float:
    """A fixed function of the architecture and hyperparameters, plus noise (see the module doc)."""
    from aiperf.arch.graph import Network, count_params
    from aiperf.search import space

    net = Network.from_json(values[space.ARCHITECTURE])
    convs, skips, params = net.conv_count, net.skip_count, count_params(net)
    depth = 0.20 * (1 - math.exp(-convs / 18))
    width = 0.12 * (1 - math.exp(-params / 400_000))
    residual = 0.015 * min(skips, 8)
    oversize = 0.15 * max(0.0, params / 1_500_000 - 0.6) ** 2
    learning = -0.04 * math.log10(values[space.LEARNING_RATE] / 0.03) ** 2
    dropout = {0.0: 0.0, 0.2: 0.01, 0.4: -0.01}.get(values[space.DROPOUT], 0.0)
    return 0.45 + depth + width + residual - oversize + learning + dropout + noise.gauss(0.0, 0.01)


def search(
    seed: int, trials: int, workers: int, checkpoints: list[int]
) -> list[tuple[int, float, str]]:
    """(trials, best score so far, digest of the architectures so far) at each checkpoint."""
    from aiperf.config import load_config
    from aiperf.search import space
    from aiperf.search.oracles import make_oracle

    config = load_config("quick", workers=workers, seed=seed)
    oracle = make_oracle(config, SHAPE, CLASSES)
    noise, digest = random.Random(seed), hashlib.sha256()
    outstanding, best, done, results = [], -math.inf, 0, []
    while done < trials:
        while len(outstanding) < workers:  # a tuner id per request: keras-tuner hands an ongoing
            trial = oracle.create_trial(
                f"request-{done}-{len(outstanding)}"
            )  # trial back to its id
            if trial.status != "RUNNING":
                break
            outstanding.append(trial)
        trial = outstanding.pop(0)
        score = synthetic_accuracy(trial.hyperparameters.values, noise)
        oracle.update_trial(trial.trial_id, {"val_accuracy": score}, step=0)
        trial.status = "COMPLETED"
        oracle.end_trial(trial)
        digest.update(trial.hyperparameters.values[space.ARCHITECTURE].encode())
        best, done = max(best, score), done + 1
        if done in checkpoints:
            results.append((done, best, digest.hexdigest()[:10]))
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", default="0,1,2")
    parser.add_argument("--trials", default="64,150,300")
    parser.add_argument("--workers", type=int, default=2)
    args = parser.parse_args()
    checkpoints = sorted(int(t) for t in args.trials.split(","))
    print(f"{'seed':>4} {'trials':>7} {'best':>7} {'digest':>10}")
    for seed in (int(s) for s in args.seeds.split(",")):
        for trials, best, digest in search(seed, checkpoints[-1], args.workers, checkpoints):
            print(f"{seed:>4} {trials:>7} {best:>7.4f} {digest:>10}", flush=True)


if __name__ == "__main__":
    main()
