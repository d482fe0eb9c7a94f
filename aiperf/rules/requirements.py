"""What a closed result of one packaged profile requires and allows, as plain data.

`aiperf rules PROFILE` shows it so that a site knows, before it spends a night, whether the run it
plans can be closed and valid. It is read from the ruleset and the profile's search space alone
(no framework, no config validation), and its keys are a stable interface (`--json`,
docs/rules.md): a key is added, never renamed or removed.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict
from typing import Any

from aiperf.rules import PRECISION, DataPin, Ruleset


def closed_requirements(
    ruleset: Ruleset, profile: str, space: Mapping[str, Any] | None = None
) -> dict[str, Any]:
    """The profile's figures under `ruleset`, its closed choices and what a valid result needs.

    `precisions` is the closed choice of train.precision (a closed run may also give `auto`: the
    first of them, bfloat16 first, that its devices support); `choices` holds every other closed choice
    (train.backend, train.jit_compile) by its dotted name; `settable` lists what a closed run may
    change freely (a section name covers its keys). `batch_size`, from the profile's own
    search.space section (`space`), is the batch sizes a closed run trains with: `per_gib`
    (search.space.batch_per_gib, None when unset) times the smallest GPU's whole GiB on GPUs, at
    most `cap` per device (search.space.batch_cap, None when unset), and `listed`
    (search.space.batch_size) on CPUs or without `per_gib`. `data` is the dataset a closed
    result must train on (kind, classes, train_samples, val_samples, and the content sha256 of
    generated data; None where the ruleset pins none). `series` is how a ranked closed result is
    made (rulesets from 1.3): {runs, drop, statistic}, the runs of one config it needs, how many of
    the highest and lowest are dropped and the statistic of the rest; None where the ruleset ranks
    single runs. `loss_ceiling` is the LM track's floor (rulesets from 1.5): the highest best
    validation loss in nats per token a valid result may have (None: judged by accuracy_floor);
    `batch_size.tokens` its batches in tokens per device (search.space.batch_tokens).
    `entropy_floor` (rulesets from 1.7) is the LM track's validation split's entropy in nats per
    token, by which its score is regulated (aiperf.quality.loss_factor; None: ln V - loss)."""
    rules = ruleset.for_profile(profile)
    space = space or {}
    return {
        "profile": profile,
        "ruleset": ruleset.name,
        "min_budget_s": rules.min_budget_s,
        "accuracy_floor": rules.accuracy_floor,
        "loss_ceiling": rules.loss_ceiling,
        "entropy_floor": rules.entropy_floor,
        "seed_architecture": rules.seed_architecture,
        "precisions": list(ruleset.precisions),
        "choices": {
            dotted: list(values)
            for dotted, values in sorted(ruleset.choices.items())
            if dotted != PRECISION
        },
        "settable": list(ruleset.settable),
        "convention": ruleset.convention,
        "trainer": ruleset.trainer,
        "batch_size": {
            "per_gib": space.get("batch_per_gib"),
            "listed": space.get("batch_size"),
            "cap": space.get("batch_cap"),
            "tokens": space.get("batch_tokens"),
        },
        "data": _pin(rules.data),
        "series": asdict(ruleset.series) if ruleset.series is not None else None,
    }


def _pin(pin: DataPin | None) -> dict[str, Any] | None:
    """The pin as JSON; source_sha256 only where a corpus is pinned by its bytes (enwik8, 1.8)."""
    if pin is None:
        return None
    data = asdict(pin)
    if data.get("source_sha256") is None:
        del data["source_sha256"]
    return data
