"""Proposal latency of the LM track's growth oracle (aiperf.search.growth) as a run's history
grows: median and p99 of populate_space with 100 and 1,000 finished trials. Target: p99 <= 50 ms
at 1,000 trials (a freed worker waits for its next trial that long at most).

The history is made by the oracle itself, as a run makes it: every trial it proposes is scored
with a made-up validation loss (lower for more weights, with noise: no training) and ended, until
the run has the asked number of finished trials; then `--proposals` more proposals are timed, each
scored and ended before the next, so the measurement is of the steady state a long run sees.

    .venv/bin/python benchmarks/bench_growth_oracle.py [--trials 100,1000] [--proposals 200]
                                                       [--seed lm-tiny] [--max-params 200000000]
"""

from __future__ import annotations

import argparse
import json
import math
import os
import random
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

SEQ_LEN, VOCAB = 64, 256  # the token data's sequence length and byte vocabulary


def machine() -> str:
    """The CPU model and core count, as the run's fingerprint reads them."""
    from aiperf.system.fingerprint import cpu_model

    return f"{cpu_model()}, {os.cpu_count()} CPUs"


def made_up_loss(architecture: str, rng: random.Random) -> float:
    """A validation loss in nats/token that falls with the model's weights, plus noise."""
    from aiperf.arch.transformer import TransformerSpec

    spec = TransformerSpec.from_json(architecture)
    return 5.5 - 0.25 * math.log2(spec.param_count) + rng.gauss(0.0, 0.1)


def new_oracle(seed: str, max_layers: int, max_params: int, workers: int):
    from aiperf.config import load_config
    from aiperf.search.oracles import make_oracle

    config = load_config(
        "lm-quick",  # the LM track: token data, judged by val_loss
        workers=1,
        overrides={
            "search": {
                "seed_architecture": seed,
                "objective": "val_loss",
                "limits": {"max_layers": max_layers, "max_params": max_params},
                "space": {
                    "learning_rate": [1e-4, 3e-3],
                    "batch_tokens": [8192, 16384, 32768],
                    "warmup_epochs": [0.0, 0.5],
                    "weight_decay": [0.0, 0.1],
                },
            }
        },
    )
    # A first round of `workers` seeds, as a run of that many workers has (the config's workers
    # are checked against this machine's cores; the oracle's first round is not).
    config = config.model_copy(update={"workers": workers})
    return make_oracle(config, (SEQ_LEN, 1, 1), VOCAB)


def run_trial(oracle, number: int, rng: random.Random) -> None:
    """One trial proposed, scored and ended, as the flow does."""
    from aiperf.search import space

    trial = oracle.create_trial(f"worker{number}")
    if trial.status != "RUNNING":
        raise RuntimeError(f"proposal {number}: {trial.status}, expected RUNNING")
    values = trial.hyperparameters.values
    oracle.update_trial(
        trial.trial_id, {"val_loss": made_up_loss(values[space.ARCHITECTURE], rng)}, step=0
    )
    trial.status = "COMPLETED"
    oracle.end_trial(trial)


def measure(args: argparse.Namespace, trials: int) -> dict[str, object]:
    """Seconds of `args.proposals` proposals after `trials` finished ones (populate_space alone)."""
    oracle = new_oracle(args.seed, args.max_layers, args.max_params, args.workers)
    seconds: list[float] = []
    original = oracle.populate_space

    def timed(trial_id: str) -> dict:
        started = time.perf_counter()
        result = original(trial_id)
        seconds.append(time.perf_counter() - started)
        return result

    oracle.populate_space = timed
    rng = random.Random(args.rng_seed)
    for number in range(trials):
        run_trial(oracle, number, rng)
    seconds.clear()
    for number in range(trials, trials + args.proposals):
        run_trial(oracle, number, rng)
    ordered = sorted(seconds)
    p99 = ordered[min(len(ordered) - 1, math.ceil(0.99 * len(ordered)) - 1)]
    operators: dict[str, int] = {}
    for trial in oracle.trials.values():
        operator = trial.hyperparameters.values["operator"]
        operators[operator] = operators.get(operator, 0) + 1
    return {
        "seed": args.seed,
        "finished_trials": trials,
        "proposals": len(seconds),
        "p50_ms": round(1000 * statistics.median(seconds), 2),
        "p99_ms": round(1000 * p99, 2),
        "max_ms": round(1000 * ordered[-1], 2),
        "operators": operators,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", default="100,1000")
    parser.add_argument("--proposals", type=int, default=200)
    parser.add_argument("--seed", default="lm-tiny")
    parser.add_argument("--workers", type=int, default=8, help="the first round's seeds")
    parser.add_argument("--max-layers", type=int, default=48)
    parser.add_argument("--max-params", type=int, default=200_000_000)
    parser.add_argument("--rng-seed", type=int, default=0)
    args = parser.parse_args()
    print(f"machine: {machine()}", flush=True)
    for trials in (int(t) for t in args.trials.split(",")):
        print(json.dumps(measure(args, trials)), flush=True)


if __name__ == "__main__":
    main()
