"""`aiperf rules PROFILE [--json]`: what a closed, valid result of a packaged profile needs.

A site reads it before it spends a night on a run: the ruleset the profile is judged by, its minimum
budget, accuracy floor and seed network, the precisions and other choices a closed run may make,
the batch sizes it trains with (per GiB of GPU memory where the profile says so), what it may
change freely, and the convention and trainer a valid result needs. It reads the
profile's YAML and its ruleset only, so it imports no framework and answers at once. Registered by
aiperf/cli/main.py with `app.command("rules")(rules)`; an unknown profile is one line and exit
status 2.
"""

from __future__ import annotations

import json
import textwrap
from importlib import resources
from typing import Any

import typer
import yaml

from aiperf.cli.common import fail
from aiperf.config.workload import TOKEN_KINDS

WIDTH = 80
LABEL = 19  # the label column; the value wraps in the rest


def rules(
    profile: str = typer.Argument(
        ...,
        help="A packaged profile: quick, nightly, digits, imagenet, imagenet-shaped, lm-quick or lm.",
    ),
    json_output: bool = typer.Option(
        False, "--json", help="One JSON object, its keys as docs/rules.md lists them."
    ),
) -> None:
    """What a closed result of PROFILE requires and allows, by the ruleset the profile names."""
    from aiperf.rules import load_ruleset
    from aiperf.rules.requirements import closed_requirements

    required = closed_requirements(
        load_ruleset(packaged_ruleset(profile)), profile, packaged_space(profile)
    )
    if json_output:
        typer.echo(json.dumps(required, indent=2))
        return
    for line in plain(required):
        typer.echo(line)


def packaged_ruleset(profile: str) -> str:
    """The ruleset a packaged profile names (its `ruleset:` line), or a one-line error."""
    from aiperf.config import available_profiles

    known = available_profiles()
    if profile not in known:
        raise fail(
            f"unknown profile {profile!r}; aiperf rules takes a packaged profile: "
            f"{', '.join(known)} (a profile file's results are always in the open division)"
        )
    raw = yaml.safe_load((resources.files("aiperf") / "profiles" / f"{profile}.yaml").read_text())
    return str(raw["ruleset"])


def packaged_space(profile: str) -> dict[str, Any]:
    """A packaged profile's search space with the defaults it leaves out (its batch sizes)."""
    from aiperf.config import SpaceConfig

    raw = yaml.safe_load((resources.files("aiperf") / "profiles" / f"{profile}.yaml").read_text())
    space = (raw.get("search") or {}).get("space") or {}
    return SpaceConfig.model_validate(space).model_dump(mode="json")


def duration(seconds: float) -> str:
    """3600 -> 1h, 90 -> 1m30s: as a profile's budget is written."""
    whole = int(seconds)
    if whole != seconds or whole == 0:
        return f"{seconds:g}s"
    parts = []
    for unit, size in (("h", 3600), ("m", 60), ("s", 1)):
        if whole >= size:
            parts.append(f"{whole // size}{unit}")
            whole %= size
    return "".join(parts)


def _shown(value: Any) -> str:
    return str(value).lower() if isinstance(value, bool) else str(value)


def _batch(batch: dict[str, Any]) -> str:
    """The profile's batch sizes: per GiB of the smallest GPU, and its own list for CPUs."""
    listed = ", ".join(str(b) for b in batch.get("listed") or ())
    if batch.get("tokens"):  # the LM track: tokens a device steps on
        return ", ".join(f"{t:,}" for t in batch["tokens"]) + " tokens per device"
    if not batch.get("per_gib"):
        return listed
    per_gib = ", ".join(str(m) for m in batch["per_gib"])
    cap = batch.get("cap")
    capped = f" (at most {cap})" if cap else ""
    return f"{per_gib} x the smallest GPU's GiB per device{capped}; {listed} on CPUs"


def _pinned(data: dict) -> str:
    """The ruleset's pin of the dataset, in words."""
    what = data.get("name") or data["kind"]
    digest = f", content sha256 {data['sha256']}" if data.get("sha256") else ""
    if data.get("source_sha256"):
        digest += f", its bytes' sha256 {data['source_sha256']}"
    if data["kind"] in TOKEN_KINDS:
        return (
            f"{what}: a vocabulary of {data['classes']}; {data['train_samples']} train and "
            f"{data['val_samples']} validation windows, none in both{digest}"
        )
    return (
        f"{what}: {data['classes']} classes, each in both splits; {data['train_samples']} train "
        f"and {data['val_samples']} validation images, none in both{digest}"
    )


def _series(series: dict[str, Any]) -> str:
    """The ruleset's series rule, in words (aiperf run --repeat)."""
    dropped = (
        f", the {series['drop']} highest and {series['drop']} lowest dropped"
        if series.get("drop")
        else ""
    )
    return (
        f"a series of {series['runs']} valid runs (aiperf run --repeat {series['runs']})"
        f"{dropped}, ranked by the {series['statistic']} of the rest"
    )


def _entropy_floor(required: dict[str, Any]) -> list[tuple[str, str]]:
    """The LM track's entropy floor row (rulesets from 1.7), or none."""
    if required.get("entropy_floor") is None:
        return []
    return [
        (
            "entropy floor",
            f"{required['entropy_floor']:g} nats/token: the validation split's; the score "
            "is OPS x ln((ln V - floor) / (loss - floor))",
        )
    ]


def plain(required: dict[str, Any]) -> list[str]:
    """The requirements as lines of at most WIDTH characters: a label, then its value."""
    settable = [
        f"{s}.*" if s == "cluster" else s
        for s in required["settable"]
        if s != "budget_s"  # shown with the minimum budget
    ]
    rows = [
        (
            "budget",
            f"--budget {duration(required['min_budget_s'])} "
            f"({required['min_budget_s']:g} s) or longer",
        ),
        (
            (
                "loss ceiling",
                f"{required['loss_ceiling']:g} nats/token: the best validation loss of a complete epoch",
            )
            if required.get("loss_ceiling") is not None  # the LM track's (rulesets from 1.5)
            else (
                "accuracy floor",
                f"{required['accuracy_floor']:g}: the best validation accuracy of a complete epoch",
            )
        ),
        *_entropy_floor(required),
        ("seed network", required["seed_architecture"]),
        *(
            [("data", _pinned(required["data"]))] if required.get("data") else []
        ),  # rulesets from 1.2 pin the dataset
        (
            "train.precision",
            ", ".join(required["precisions"])
            + ", or auto: by what every worker's devices support (docs/rules.md)",
        ),
        ("batch size", _batch(required.get("batch_size") or {})),
        *(
            (dotted, ", ".join(_shown(v) for v in values))
            for dotted, values in required["choices"].items()
        ),
        ("may also change", ", ".join(settable)),
        ("convention", f"{required['convention']} (operations counted as docs/flops.md says)"),
        ("trainer", f"{required['trainer']} (models really trained)"),
        *(
            [("ranked result", _series(required["series"]))] if required.get("series") else []
        ),  # rulesets from 1.3 rank a series of runs
    ]
    lines = [f"A closed {required['profile']} result, by {required['ruleset']}:"]
    for label, value in rows:
        wrapped = textwrap.wrap(str(value), WIDTH - LABEL - 2) or [""]
        lines.append(f"  {label:<{LABEL}}{wrapped[0]}".rstrip())
        lines.extend(f"  {'':<{LABEL}}{more}" for more in wrapped[1:])
    lines += textwrap.wrap(
        f"Any other change from aiperf/profiles/{required['profile']}.yaml (--set data.*, "
        "search.*, train.* but the choices above, validity.*, --seed) makes the result open.",
        WIDTH,
    )
    return lines
