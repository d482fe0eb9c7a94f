"""The keras-tuner oracle a run uses, chosen by the profile's `search.oracle`.

The flow is the oracle's only client (the "chief"): it calls create_trial / update_trial /
end_trial itself, with no gRPC and no Tuner.search(). `morphism` is aiperf's own: morphism.py for
a CNN seed, growth.py for a transformer seed (the LM track); `random`, `bayesian` and `hyperband`
are keras-tuner's, searching the ResNet family (a transformer seed is refused: they have no
transformer space).
"""

from __future__ import annotations

import keras_tuner as kt

from aiperf import quality
from aiperf.arch import grow
from aiperf.arch.morph import Limits
from aiperf.arch.seeds import seed_spec
from aiperf.arch.transformer import transformer_seed, transformer_seed_names
from aiperf.config import BenchmarkConfig
from aiperf.errors import UserError
from aiperf.search import space, tuner_internals
from aiperf.search.growing import Growing
from aiperf.search.growth import GrowthOracle
from aiperf.search.morphism import MorphismOracle

# Large enough never to stop a run: the wall-clock budget is what ends the search.
MAX_TRIALS = 100_000


def make_oracle(
    config: BenchmarkConfig, input_shape: tuple[int, int, int], num_classes: int
) -> kt.Oracle:
    """An oracle for the profile, its state kept in memory for the orchestrator to store.
    `input_shape` and `num_classes` are the data's: for tokens, (seq_len, 1, 1) and the vocabulary."""
    search = config.search
    # val_loss (the LM track's quality) is better when lower; val_accuracy when higher.
    objective = kt.Objective(search.objective, direction=quality.direction(search.objective))
    # keras-tuner treats seed 0 as "no seed" and draws one at random: shift by one to stay reproducible.
    seed = config.seed + 1
    transformer = search.seed_architecture in transformer_seed_names()
    if transformer and search.oracle != "morphism":
        raise UserError(
            f"search.oracle {search.oracle} cannot search transformers (seed "
            f"{search.seed_architecture!r}): use search.oracle morphism, which grows them"
        )
    if search.oracle == "morphism":
        oracle = _growing_oracle(config, input_shape, num_classes, objective, seed)
    else:
        oracle = _tuner_oracle(config, objective, seed)
    oracle.verbose = 0
    _without_files(oracle)
    return oracle


def _growing_oracle(
    config: BenchmarkConfig,
    input_shape: tuple[int, int, int],
    num_classes: int,
    objective: kt.Objective,
    seed: int,
) -> kt.Oracle:
    """aiperf's own oracle, growing the seed: a transformer seed by growth.py, a CNN's by
    morphism.py. Both share the first round, the acquisition and the limits."""
    search = config.search
    growing = Growing(
        search_space=search.space,
        first_round=config.workers,
        objective=objective,
        seed=seed,
        max_trials=MAX_TRIALS,
        candidates=search.candidates,
        beta=search.ucb_beta,
    )
    bounds = {"max_layers": search.limits.max_layers, "max_params": search.limits.max_params}
    if search.seed_architecture in transformer_seed_names():
        seed_transformer = transformer_seed(
            search.seed_architecture, vocab_size=num_classes, seq_len=input_shape[0]
        )
        return GrowthOracle(seed_transformer, grow.Limits(**bounds), growing, search.inherit)
    seed_network = seed_spec(search.seed_architecture, input_shape, num_classes)
    return MorphismOracle(seed_network, Limits(**bounds), growing)


def _tuner_oracle(config: BenchmarkConfig, objective: kt.Objective, seed: int) -> kt.Oracle:
    """One of keras-tuner's oracles, searching the ResNet family's hyperparameters."""
    search = config.search
    if search.oracle == "random":
        return kt.oracles.RandomSearchOracle(
            objective=objective,
            max_trials=MAX_TRIALS,
            seed=seed,
            hyperparameters=space.family_hyperparameters(search.space),
            max_consecutive_failed_trials=MAX_TRIALS,
        )
    if search.oracle == "bayesian":
        tuner_internals.give_bayesian_oracle_scikit_learn()
        return kt.oracles.BayesianOptimizationOracle(
            objective=objective,
            max_trials=MAX_TRIALS,
            seed=seed,
            num_initial_points=max(2, config.workers),
            hyperparameters=space.family_hyperparameters(search.space),
            max_consecutive_failed_trials=MAX_TRIALS,
        )
    if search.oracle == "hyperband":
        return kt.oracles.HyperbandOracle(
            objective=objective,
            max_epochs=max(config.train.epochs),
            factor=3,
            seed=seed,
            hyperband_iterations=MAX_TRIALS,
            hyperparameters=space.family_hyperparameters(search.space),
            max_consecutive_failed_trials=MAX_TRIALS,
        )
    # pragma: no cover - config validation admits only the oracles above
    raise ValueError(f"unknown oracle {search.oracle!r}")


def _without_files(oracle: kt.Oracle) -> None:
    """Stop keras-tuner's bookkeeping that grows with every trial and that aiperf does not read.

    At every create_trial, update_trial and end_trial keras-tuner rewrites its whole state (every
    trial's id and hash) to a JSON file, and the trial to a file of its own; at every end_trial it
    walks every ended trial to count consecutive failures. Both grow with the trials, so a run's
    total grows with their square: at 1,024 simulated workers the files alone took half the oracle
    thread's time (benchmarks/bench_simulated_scale.py). aiperf keeps the oracle's state in the
    database instead, stored with each proposal (aiperf.lifecycle.orchestrator), and rebuilds its trials from
    the records (aiperf.search.resume); the orchestrator counts failures in a row itself
    (aiperf.lifecycle.orchestrator.max_consecutive_failures)."""
    oracle.save = lambda *_args, **_kwargs: None
    tuner_internals.skip_trial_files(oracle)
    tuner_internals.skip_failure_count(oracle)
