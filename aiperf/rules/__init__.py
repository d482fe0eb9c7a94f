"""Rules as versioned data: what a closed-division run may change, and what makes a result valid.

A ruleset is a YAML file beside this module (aiperf-rules-1.0.yaml, aiperf-rules-1.1.yaml). Every
packaged profile names the ruleset it is judged by; the ruleset's id and version are stored with
every run and score, so a result says which rules it met, and results of different rulesets are
never compared. A new rule or a changed figure is a new file and a new version, never an edit of a
published one: a run is judged by the version it recorded, whichever its profile names today.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cache
from importlib import resources
from typing import Any

import yaml

from aiperf.errors import UserError
from aiperf.units import parse_duration

# The ruleset of a config that names none (a profile file's): such a run is open and judged by its own
# settings; this ruleset only says which settings its workload hash leaves out.
DEFAULT_RULESET = "aiperf-rules-1.0"
PRECISION = "train.precision"
# Not a precision but a request for one: aiperf.config.AUTO (this module is below the config).
AUTO_PRECISION = "auto"


@dataclass(frozen=True)
class DataPin:
    """The dataset a closed result of one profile must have trained on (rulesets from 1.2).

    Generated data (synthetic, digits, generated-imagenet) is pinned by `sha256`, the digest of its
    content that staging computes afresh from the staged files each time a run uses them (never
    read from a sidecar); user data (imagenet) cannot be, so it is pinned by its classes and the
    images in each split. Either way every class must be in both splits and no image in both.
    A corpus the user brings whose bytes are published (enwik8, rulesets from 1.8) is pinned by
    their sha256 too, `source_sha256`, which staging computes from the file each time."""

    kind: str  # data.kind of the profile
    classes: int
    train_samples: int
    val_samples: int
    sha256: str | None = None  # the content digest, for generated data
    name: str | None = None  # what the data is called (ImageNet-1k)
    source_sha256: str | None = None  # the user's corpus's bytes (enwik8: the zip's member)

    def describe(self) -> str:
        """One line for `aiperf rules` and the check details."""
        what = self.name or self.kind
        digest = f", sha256 {self.sha256[:12]}" if self.sha256 else ""
        if self.source_sha256:
            digest += f", its bytes' sha256 {self.source_sha256[:12]}"
        if self.tokens:
            return (
                f"{what}: a vocabulary of {self.classes}, {self.train_samples} train / "
                f"{self.val_samples} validation windows{digest}"
            )
        return (
            f"{what}: {self.classes} classes, {self.train_samples} train / "
            f"{self.val_samples} validation images{digest}"
        )

    @property
    def tokens(self) -> bool:
        """Whether the pinned data is the LM track's tokens (its samples are windows)."""
        return self.kind in ("synthetic-text", "text", "enwik8")


@dataclass(frozen=True)
class SeriesRule:
    """How many runs a ranked closed result needs, and how their figures become the one that ranks
    (rulesets from 1.3; aiperf.results.series.summarise applies it).

    One run on a shared machine moves by a few percent from the next, so a ranking of single runs
    orders noise: a result is a series of `runs` runs of one config (aiperf run --repeat), its
    `drop` highest and `drop` lowest figures are set aside, and the `statistic` ("mean" or
    "median") of the rest ranks it, in the manner of MLPerf HPC (N runs, fastest and slowest
    dropped, mean of the rest)."""

    runs: int
    drop: int = 1
    statistic: str = "mean"

    def __post_init__(self) -> None:
        if self.runs < 1 or self.drop < 0 or self.runs <= 2 * self.drop:
            raise ValueError(
                f"a series rule needs runs >= 1 and more runs than it drops; got runs={self.runs}, "
                f"drop={self.drop}"
            )
        if self.statistic not in ("mean", "median"):
            raise ValueError(f"a series statistic is mean or median; got {self.statistic!r}")

    def describe(self) -> str:
        """One line for `aiperf rules` and the series table."""
        dropped = f", the {self.drop} highest and {self.drop} lowest dropped" if self.drop else ""
        return (
            f"{self.runs} runs of one config{dropped}, ranked by the {self.statistic} of the rest"
        )


@dataclass(frozen=True)
class FitRule:
    """How a run fits its steps to its devices' memory (docs/rules.md, "Fit before paying";
    aiperf.train.fit applies it). Rulesets before 1.6 name none and take these packaged defaults.

    `headroom`: the fraction of what JAX's allocator may take of a device that a step's planned
    memory (XLA's analysis) must leave free, for what the analysis does not see (fragmentation,
    the feed's buffers on the device). `reduce`: how a run's batch sizes are reduced before the
    window when the seed at the largest does not fit: "halve" sizes them by half the GiB count
    (per-GiB batches) or halves each listed size, again until the seed fits or `min_batch` per
    device is reached. A proposal that does not fit is never trained: it ends too_large."""

    headroom: float = 0.1
    reduce: str = "halve"
    min_batch: int = 1

    def __post_init__(self) -> None:
        if not 0 <= self.headroom < 1 or self.reduce != "halve" or self.min_batch < 1:
            raise ValueError(
                "a fit rule needs 0 <= headroom < 1, reduce: halve and min_batch >= 1; got "
                f"headroom={self.headroom}, reduce={self.reduce!r}, min_batch={self.min_batch}"
            )


@dataclass(frozen=True)
class ProfileRules:
    """What the ruleset requires of one packaged profile's results."""

    min_budget_s: float
    accuracy_floor: float
    seed_architecture: str
    data: DataPin | None = None  # None: the ruleset pins no data (1.0, 1.1)
    # The LM track's profiles (rulesets from 1.5): the highest best validation loss (nats per
    # token) a valid result may have; None: judged by accuracy_floor.
    loss_ceiling: float | None = None
    # The LM track's entropy floor of the profile's validation split, nats per token (rulesets from
    # 1.7): the regulation's zero point (aiperf.quality.loss_factor); None: ln V - loss.
    entropy_floor: float | None = None
    # The training recipe a closed result of the profile trains with, dotted setting -> value
    # (rulesets from 1.6; the profile sets the same), and the one the versions before it closed
    # in its place (`recipe_before`), by which a run recorded under those is judged.
    recipe: dict[str, Any] = field(default_factory=dict)
    recipe_before: dict[str, Any] = field(default_factory=dict)

    def validity(self) -> dict[str, Any]:
        """The config's validity section (aiperf.config.ValidityConfig) these rules give: the one
        place that maps a ruleset's figures onto the settings a run is judged by."""
        return {
            "min_budget_s": self.min_budget_s,
            "accuracy_floor": self.accuracy_floor,
            "loss_ceiling": self.loss_ceiling,
            "entropy_floor": self.entropy_floor,
        }


@dataclass(frozen=True)
class Ruleset:
    id: str
    version: str
    settable: tuple[
        str, ...
    ]  # dotted settings a closed run may change ("cluster" covers cluster.*)
    convention: str
    trainer: str
    profiles: dict[str, ProfileRules]
    # dotted settings a closed run may set to any of the listed values (train.precision, ...)
    choices: dict[str, tuple[Any, ...]] = field(default_factory=dict)
    # How far the best trial's accuracy, evaluated again by verify from its kept weights, may be
    # from the recorded one (absolute). None: the ruleset keeps no weights (1.0, 1.1).
    accuracy_tolerance: float | None = None
    # The same for the LM track's best validation loss, in nats per token (rulesets from 1.5).
    loss_tolerance: float | None = None
    # How many runs a ranked closed result needs and how they are summarised. None: the ruleset
    # ranks single runs (1.0-1.2).
    series: SeriesRule | None = None
    # How steps are fitted to the devices' memory (rulesets from 1.6; earlier ones: the defaults).
    fit: FitRule = FitRule()
    # Whether the YAML names its fit rule (1.6+): only then may a run's batch sizes be reduced.
    fit_declared: bool = False

    @property
    def precisions(self) -> tuple[str, ...]:
        """The training precisions a closed result may use."""
        return self.choices.get("train.precision", ("float32",))

    def closed_choice(self, dotted: str, value: Any) -> str | None:
        """Why `value` of the choice `dotted` makes a run open (None: a closed run may use it).

        train.precision auto is closed wherever precisions are a choice: a run resolves it, before
        its first trial, to one of the listed precisions (aiperf.train.auto) and stores that one,
        so the run is judged by the precision it trained in."""
        allowed = self.choices[dotted]
        if value in allowed or (dotted == PRECISION and value == AUTO_PRECISION):
            return None
        listed = ", ".join(str(a).lower() if isinstance(a, bool) else str(a) for a in allowed)
        shown = str(value).lower() if isinstance(value, bool) else value
        return f"{dotted}: {shown} is not allowed in the closed division by {self.name} (allowed: {listed})"

    @property
    def name(self) -> str:
        """id-version, as stored with every run and score."""
        return f"{self.id}-{self.version}"

    def for_profile(self, profile: str) -> ProfileRules:
        try:
            return self.profiles[profile]
        except KeyError:
            raise UserError(
                f"ruleset {self.name} has no rules for profile {profile!r}; it judges "
                f"{', '.join(sorted(self.profiles))}"
            ) from None

    def is_settable(self, dotted: str) -> bool:
        """Whether a closed run may change this setting (a section name covers its keys)."""
        return any(dotted == s or dotted.startswith(s + ".") for s in self.settable)


def available_rulesets() -> list[str]:
    folder = resources.files("aiperf") / "rules"
    return sorted(
        p.name.removesuffix(".yaml") for p in folder.iterdir() if p.name.endswith(".yaml")
    )


def _data_pin(raw: dict[str, Any] | None) -> DataPin | None:
    """A profile's `data` entry, typed (None where the ruleset pins no data)."""
    if raw is None:
        return None
    return DataPin(
        kind=str(raw["kind"]),
        classes=int(raw["classes"]),
        train_samples=int(raw["train_samples"]),
        val_samples=int(raw["val_samples"]),
        sha256=str(raw["sha256"]) if raw.get("sha256") else None,
        name=str(raw["name"]) if raw.get("name") else None,
        source_sha256=str(raw["source_sha256"]) if raw.get("source_sha256") else None,
    )


def _series_rule(raw: dict[str, Any] | None) -> SeriesRule | None:
    """A ruleset's `ranking` entry, typed (None where it has none)."""
    if raw is None:
        return None
    return SeriesRule(
        runs=int(raw["runs"]), drop=int(raw.get("drop", 0)), statistic=str(raw["statistic"])
    )


def _fit_rule(raw: dict[str, Any] | None) -> FitRule:
    """A ruleset's `fit` entry, typed (the packaged defaults where it has none)."""
    if raw is None:
        return FitRule()
    defaults = FitRule()
    return FitRule(
        headroom=float(raw.get("headroom", defaults.headroom)),
        reduce=str(raw.get("reduce", defaults.reduce)),
        min_batch=int(raw.get("min_batch", defaults.min_batch)),
    )


def _optional_float(value: Any) -> float | None:
    return None if value is None else float(value)


@cache
def load_ruleset(name: str = DEFAULT_RULESET) -> Ruleset:
    """A packaged ruleset by its id-version name."""
    if name not in available_rulesets():
        raise UserError(
            f"unknown ruleset {name!r}; aiperf knows {', '.join(available_rulesets())}"
        )
    raw: dict[str, Any] = yaml.safe_load(
        (resources.files("aiperf") / "rules" / f"{name}.yaml").read_text()
    )
    profiles = {
        profile: ProfileRules(
            min_budget_s=parse_duration(rules["min_budget"]),
            accuracy_floor=float(rules.get("accuracy_floor", 0.0)),  # none for the LM track's
            seed_architecture=str(rules["seed_architecture"]),
            data=_data_pin(rules.get("data")),
            loss_ceiling=_optional_float(rules.get("loss_ceiling")),
            entropy_floor=_optional_float(rules.get("entropy_floor")),
            recipe=dict(rules.get("recipe") or {}),
            recipe_before=dict(rules.get("recipe_before") or {}),
        )
        for profile, rules in raw["profiles"].items()
    }
    choices = {
        dotted: tuple(values) for dotted, values in (raw["closed"].get("choices") or {}).items()
    }
    ruleset = Ruleset(
        id=raw["id"],
        version=str(raw["version"]),
        settable=tuple(raw["closed"]["settable"]),
        convention=raw["valid"]["convention"],
        trainer=raw["valid"]["trainer"],
        profiles=profiles,
        choices=choices,
        accuracy_tolerance=_optional_float(raw["valid"].get("accuracy_tolerance")),
        loss_tolerance=_optional_float(raw["valid"].get("loss_tolerance")),
        series=_series_rule(raw.get("ranking")),
        fit=_fit_rule(raw.get("fit")),
        fit_declared="fit" in raw,
    )
    if ruleset.name != name:  # pragma: no cover - a packaging mistake
        raise RuntimeError(f"ruleset file {name}.yaml says it is {ruleset.name}")
    return ruleset
