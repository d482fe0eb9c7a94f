"""Closed or open: which division a run is in, and every way it deviates from its packaged profile.

The division is decided from the effective config alone, whatever path a change came by (--set,
--seed, a deployment's overrides, a profile file): the run's config is compared with the packaged
profile as it would run with this run's settable settings (where and how long). Equal: closed,
judged by the packaged ruleset. Anything else: open, with each difference listed.

A run is judged by the ruleset it recorded (its config's `ruleset`), not by the one its profile
names today: a new version changes what new runs are judged by, never an earlier run's verdict.

The ruleset's choices (train.precision, train.backend, train.jit_compile) may differ from the
packaged profile's in a closed run, but only among the values the ruleset lists; another value makes
the run open, the reason named.

What a profile leaves to the devices is judged as the run resolved it (aiperf.train.auto): the run
stores the precision train.precision auto chose (auto itself is closed: it resolves to a listed
precision before the first trial), and search.space.batch_per_gib's batch sizes, which stay closed
when they are its multipliers times a whole number of GiB; `batch_problem` checks that number
against the GPU memory the workers recorded.

The config hash identifies the workload: every setting but the settable ones and the implementation
choices (see `config_hash`). Two runs with equal hashes ran the same workload; history, compare and
the nightly baseline only put those together.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from aiperf.config import CUSTOM_PREFIX, BenchmarkConfig, ValidityConfig, load_config
from aiperf.errors import UserError
from aiperf.rules import DEFAULT_RULESET, Ruleset, load_ruleset

CLOSED = "closed"
OPEN = "open"


@dataclass(frozen=True)
class Division:
    name: str  # closed or open
    ruleset: str  # id-version of the rules the run is judged by
    deviations: tuple[str, ...]  # "setting: packaged value -> this run's value", or why it is open
    config_hash: str  # sha256 of the workload settings (all but the settable ones)

    @property
    def closed(self) -> bool:
        return self.name == CLOSED


def flatten(settings: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    """{"data": {"noise": 1}} -> {"data.noise": 1}: every leaf setting by its dotted name."""
    flat: dict[str, Any] = {}
    for key, value in settings.items():
        dotted = f"{prefix}{key}"
        if isinstance(value, dict):
            flat.update(flatten(value, dotted + "."))
        else:
            flat[dotted] = value
    return flat


# How the same training is carried out: Keras' backend, XLA (or jax.jit) compilation and the kernel
# of an LM's attention. Recorded with the run (runs.backend, runs.jit_compile, the config's
# train.attention) and its system (systems.keras_backend), never part of the workload's identity,
# so a result compares with the same workload run on another backend.
IMPLEMENTATION = ("train.backend", "train.jit_compile", "train.attention")
# Implementation choices no ruleset lists, each value of which is the same arithmetic in another
# kernel: never a deviation, under any ruleset. train.attention (aiperf.train.attention): fused or
# unfused computes the same attention, and its auto is stored as the kernel the devices took.
KERNELS = ("train.attention",)
# Settings that joined the workload after runs were recorded, with the value every earlier run had:
# at that value a setting stays out of the hash, so an earlier run keeps its hash (and `aiperf verify`
# still finds it) and stays comparable with later runs of the same workload.
ADDED_LATER = {
    "train.precision": "float32",
    # the training recipe (aiperf/train/recipe.py): at these, plain SGD at a constant rate
    "train.lr_schedule": "constant",
    "train.warmup_epochs": 0.0,
    "train.weight_decay": 0.0,
    "train.label_smoothing": 0.0,
    # the per-device batch from the devices' memory (aiperf.train.auto): unset, batch_size as listed
    "search.space.batch_per_gib": None,
    # rulesets from 1.4: the cap on that batch, and the learning rate scaled with the global batch
    "search.space.batch_cap": None,
    "train.lr_reference_batch": None,
    # what decodes the shards (aiperf.data.feed.choose_feed): auto, the one a ranked run uses. A
    # feed forced by hand is a deviation under rulesets up to 1.4, which do not list it as a choice.
    "data.feed": "auto",
    # what the trials train on (issue 48): auto, the node's GPUs where it has them; cpu, asked for
    "train.device": "auto",
    # the token kinds' settings (issue 35): at these defaults, as every image run had them
    "data.seq_len": 128,
    "data.train_tokens": 2_000_000,
    "data.val_tokens": 200_000,
    "data.val_fraction": 0.1,
    # the LM track's (issue 35): searched batch in tokens, warm-up and weight decay, and the loss
    # ceiling its rulesets (from 1.5) judge by; unset on every image run
    "search.space.batch_tokens": None,
    "search.space.warmup_epochs": None,
    "search.space.weight_decay": None,
    "validity.loss_ceiling": None,
    # the LM track's entropy floor (issue 49, rulesets from 1.7); unset on every earlier run
    "validity.entropy_floor": None,
    # the LM track's inheritance (issue 49, rulesets from 1.8): children grew from fresh weights
    "search.inherit": False,
    # Adam's second-moment decay and gradient clipping (issue 49, the LM track's AdamW from 1.8):
    # Keras' 0.999 and no clipping, as every earlier run trained
    "train.beta_2": 0.999,
    "train.clip_norm": None,
    # where a cosine ends (issue 49, the LM track's from 1.8): at 0, as every earlier run's did
    "train.lr_floor": 0.0,
}
BATCH_SIZE = "search.space.batch_size"
# Facts about the machine, not the work (config.SystemConfig: its name, submitter, notes): never in
# the hash nor a deviation, so naming a machine changes neither a run's workload nor its division.
DESCRIPTIVE = "system."


def config_hash(config: BenchmarkConfig, ruleset: Ruleset) -> str:
    """sha256 of the workload's settings: all but the settable ones (where and how long it runs) and
    the implementation choices. train.precision enters it: bfloat16 or float16 arithmetic trains to
    other accuracies than float32 does, so a mixed-precision run is another workload (float32 is
    left out, as runs before the setting existed trained in it)."""
    workload = {
        k: v
        for k, v in flatten(config.model_dump(mode="json")).items()
        if not ruleset.is_settable(k)
        and k not in IMPLEMENTATION
        and not k.startswith(DESCRIPTIVE)
        and not (k in ADDED_LATER and v == ADDED_LATER[k])
    }
    return hashlib.sha256(json.dumps(workload, sort_keys=True).encode()).hexdigest()


def packaged_equivalent(config: BenchmarkConfig, ruleset: Ruleset) -> BenchmarkConfig:
    """The packaged profile as it would run with this run's settable settings and nothing else.

    A run that changed its data's kind may have a data.source its packaged profile cannot take (a
    synthetic profile has none): its packaged equivalent then keeps the profile's own data section,
    and the run is open by the kind it changed."""
    try:
        packaged = _packaged(config, ruleset, ruleset.settable)
    except UserError:
        packaged = _packaged(
            config, ruleset, tuple(s for s in ruleset.settable if not s.startswith("data."))
        )
    return as_judged_by(packaged, ruleset)


def as_judged_by(packaged: BenchmarkConfig, ruleset: Ruleset) -> BenchmarkConfig:
    """The packaged profile under `ruleset`, the version its run recorded: its name and its figures
    for the profile. A profile that names a newer version today (imagenet: aiperf-rules-1.1) still
    judges a run recorded under an earlier one by that one, as it was judged when it ran."""
    if packaged.ruleset == ruleset.name:
        return packaged
    rules = ruleset.for_profile(packaged.profile)
    validity = ValidityConfig(**rules.validity())
    judged = packaged.model_copy(update={"ruleset": ruleset.name, "validity": validity})
    return with_recipe_of(judged, ruleset, packaged.ruleset)


def with_recipe_of(
    config: BenchmarkConfig, ruleset: Ruleset, named: str | None
) -> BenchmarkConfig:
    """`config` with the training recipe `ruleset` closed for its profile. A ruleset that states
    none (before 1.6) closed what the profile set before the version it names today (`named`)
    stated its own: that version's `recipe_before` (imagenet under 1.4-1.5: SGD, the rate scaled
    with the batch)."""
    if ruleset.for_profile(config.profile).recipe or named is None:
        return config
    before = load_ruleset(named).for_profile(config.profile).recipe_before
    if not before:
        return config
    flat = flatten(config.model_dump(mode="json"))
    return BenchmarkConfig.model_validate(unflatten({**flat, **before}))


def unflatten(flat: dict[str, Any]) -> dict[str, Any]:
    """{"data.noise": 1} -> {"data": {"noise": 1}}: `flatten` undone."""
    nested: dict[str, Any] = {}
    for dotted, value in flat.items():
        *sections, key = dotted.split(".")
        place = nested
        for section in sections:
            place = place.setdefault(section, {})
        place[key] = value
    return nested


def _packaged(
    config: BenchmarkConfig, ruleset: Ruleset, settable: tuple[str, ...]
) -> BenchmarkConfig:
    flat = flatten(config.model_dump(mode="json"))
    overrides: dict[str, Any] = {}
    for setting in settable:
        if setting in flat:
            overrides[setting] = flat[setting]
        else:  # a whole section, e.g. cluster (with its own sections: cluster.bmc)
            overrides[setting] = unflatten(
                {
                    k.removeprefix(setting + "."): v
                    for k, v in flat.items()
                    if k.startswith(setting + ".")
                }
            )
    budget, workers = overrides.pop("budget_s", None), overrides.pop("workers", config.workers)
    # The worker count is copied in after loading, so that judging a run never depends on how many
    # cores the judging machine has.
    packaged = load_config(
        config.profile, budget=budget, workers=1, overrides=overrides, runs_here=False
    )
    return packaged.model_copy(update={"workers": workers})


def classify(config: BenchmarkConfig) -> Division:
    """The run's division, its ruleset, its deviations and its workload hash."""
    ruleset = load_ruleset(config.ruleset or DEFAULT_RULESET)
    digest = config_hash(config, ruleset)
    if config.profile.startswith(CUSTOM_PREFIX) or config.ruleset is None:
        return Division(
            OPEN, ruleset.name, (f"profile {config.profile} is not a packaged profile",), digest
        )
    run = flatten(config.model_dump(mode="json"))
    packaged = flatten(packaged_equivalent(config, ruleset).model_dump(mode="json"))
    deviations = tuple(
        f"{key}: {packaged.get(key)!r} -> {run.get(key)!r}"
        for key in sorted(set(run) | set(packaged))
        if run.get(key) != packaged.get(key)
        and not ruleset.is_settable(key)
        and key not in ruleset.choices
        and key not in KERNELS
        and not key.startswith(DESCRIPTIVE)
        and not (key == BATCH_SIZE and sized_by_memory(run, packaged))
    )
    # A choice may differ from the profile's, among the values the ruleset lists.
    deviations += tuple(
        reason
        for key in sorted(ruleset.choices)
        if key in run and (reason := ruleset.closed_choice(key, run[key])) is not None
    )
    return Division(OPEN if deviations else CLOSED, ruleset.name, deviations, digest)


def sized_by_memory(run: dict[str, Any], packaged: dict[str, Any]) -> bool:
    """Whether the run's batch sizes are its packaged profile's per-device batch for GPUs of some
    whole number of GiB: search.space.batch_per_gib unchanged and batch_size each of its multipliers
    times one GiB count (aiperf.train.auto.batch_sizes), as a run on GPUs resolves it. Which GiB
    count the workers' memory gives is checked by `batch_problem` against the recorded devices."""
    per_gib = packaged.get("search.space.batch_per_gib")
    sizes = run.get(BATCH_SIZE)
    if not per_gib or run.get("search.space.batch_per_gib") != per_gib or not sizes:
        return False
    gib, remainder = divmod(min(sizes), min(per_gib))
    return remainder == 0 and gib >= 1 and sizes == sorted({m * gib for m in per_gib})


def batch_problem(
    config: BenchmarkConfig, worker_peaks: Sequence[Mapping[str, Any]]
) -> str | None:
    """Why the run's batch sizes are not what search.space.batch_per_gib gives for the devices its
    workers recorded in their peaks (None: they are, or nothing says otherwise). On GPUs: each
    multiplier times the smallest GPU's whole GiB; on CPUs a closed run keeps its packaged
    profile's list. A run without recorded devices (no probe ran) is not judged here."""
    from aiperf.train.auto import DeviceFacts, batch_sizes, capped_gib, smallest_gib

    per_gib = config.search.space.batch_per_gib
    facts = [DeviceFacts.from_dict(p["device_facts"]) for p in worker_peaks if "device_facts" in p]
    if not per_gib or not facts or len(facts) != len(worker_peaks):
        return None
    gib = smallest_gib(facts)
    if gib is not None:
        cap = config.search.space.batch_cap
        sized = capped_gib(per_gib, gib, cap)
        expected = batch_sizes(per_gib, gib, cap)
        why = f"{per_gib} x {gib} GiB, its smallest GPU's" + (
            f", capped at {sized} GiB by search.space.batch_cap {cap}" if sized < gib else ""
        )
    else:
        division = classify(config)
        if not division.closed:
            return None
        ruleset = load_ruleset(division.ruleset)
        expected = packaged_equivalent(config, ruleset).search.space.batch_size
        why = "the profile's own list: its workers recorded no GPU memory"
    actual = config.search.space.batch_size
    if actual == expected:
        return None
    if gib is not None and reduced_by_fit(config, expected, worker_peaks):
        return None
    return f"search.space.batch_size {actual} is not {expected} ({why})"


def reduced_by_fit(
    config: BenchmarkConfig, expected: list[int], worker_peaks: Sequence[Mapping[str, Any]]
) -> bool:
    """Whether the run's batch sizes are `expected` reduced by fit before paying
    (aiperf.lifecycle.fitcheck), with the evidence: its ruleset names a fit rule (1.6+; under
    1.0-1.5 a reduced list is judged as any other), the list is one of that rule's reductions of
    `expected`, and a worker's stored seed figures (its peak record's seed_fit) show the seed's
    step at the reduction before it did not fit."""
    from aiperf.train.fit import SEED_FIT, reductions

    ruleset = load_ruleset(config.ruleset or DEFAULT_RULESET)
    if not ruleset.fit_declared:
        return False
    lists = reductions(expected, ruleset.fit, config.search.space.batch_per_gib)
    actual = sorted(config.search.space.batch_size)
    if actual not in lists[1:]:
        return False
    larger = lists.index(actual) - 1  # the list the seed was checked at before this one
    for peak in worker_peaks:
        checked = (peak.get(SEED_FIT) or {}).get("checked") or []
        if len(checked) > larger and not checked[larger]["fits"]:
            figure = checked[larger]
            if figure["global_batch"] // max(1, figure["devices"]) == max(lists[larger]):
                return True
    return False


def judging_rules(config: BenchmarkConfig) -> ValidityConfig:
    """The rules a run is judged by: a closed run's are its packaged ruleset's for its profile; an
    open one's its own settings. The one lookup `aiperf verify` and the report's figures share."""
    division = classify(config)
    if not division.closed:
        return config.validity
    rules = load_ruleset(division.ruleset).for_profile(config.profile)
    return ValidityConfig(**rules.validity())


def recorded_rules(config: Mapping[str, Any]) -> ValidityConfig:
    """The judging rules of a recorded run, from the config it stored. A stored config that is not a
    whole one (a record planted by hand) is judged by the validity section it has, as its headline
    score was (aiperf.lifecycle.scoring takes the config's validity)."""
    try:
        whole = BenchmarkConfig.model_validate(dict(config))
    except ValueError:  # pydantic's ValidationError is one
        return ValidityConfig.model_validate(config.get("validity") or {})
    return judging_rules(whole)
