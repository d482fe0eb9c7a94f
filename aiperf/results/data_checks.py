"""verify's checks of the data a run trained on, against its ruleset (rulesets from 1.2 pin it).

The dataset row of a run holds its manifest as staging computed it from the staged content: the
content digest, the classes in each split, the overlap check between the splits. A closed run
judged by a ruleset with a data pin must show the pinned data (its digest for generated data; its
classes and images per split for user data), no image in both splits and every class in both. An
open run, or one judged by a ruleset without pins (1.0, 1.1), passes with a detail saying so: its
data is recorded, not held to a pin. Editing the recorded digest, the counts or the overlap record
to agree with the pin does not help a forged dataset: the next run that stages it recomputes them,
and where generated data is still staged on the verifying machine, this check digests it again.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from aiperf.config import BenchmarkConfig
from aiperf.data.manifest import dataset_digest, sha256_file, shard_path
from aiperf.data.pins import arrays_digest, closed_problems
from aiperf.data.problems import DataError
from aiperf.results.division import classify
from aiperf.rules import DataPin, load_ruleset
from aiperf.store import CheckRecord, DatasetRecord

if TYPE_CHECKING:
    from aiperf.results.evidence import Evidence

DATASET_PINNED = "dataset_pinned"


def data_pin(config: BenchmarkConfig) -> tuple[str, DataPin | None, bool]:
    """(ruleset name, its pin for the run's profile or None, closed) for a run's config."""
    division = classify(config)
    if not division.closed:
        return division.ruleset, None, False
    return division.ruleset, load_ruleset(division.ruleset).for_profile(config.profile).data, True


def recorded_manifest(dataset: DatasetRecord) -> dict[str, Any]:
    """The manifest as recorded, its row's columns over the JSON copy (both are the record)."""
    return {
        **dataset.manifest,
        "kind": dataset.kind,
        "sha256": dataset.sha256,
        "classes": dataset.classes,
        "train_samples": dataset.train_samples,
        "val_samples": dataset.val_samples,
    }


def manifest_problems(config: BenchmarkConfig, manifest: dict[str, Any]) -> list[str]:
    """Why this data cannot give a closed result of this config (empty: it can, or the run is
    open, or its ruleset pins no data)."""
    _ruleset, pin, _closed = data_pin(config)
    return [] if pin is None else closed_problems(manifest, pin)


def refuse_unpinned(config: BenchmarkConfig, manifest: dict[str, Any]) -> None:
    """Before the search: a closed run on data other than its ruleset's is refused (DataError,
    one line). Open runs go on with whatever data they staged; it is recorded with them."""
    problems = manifest_problems(config, manifest)
    if problems:
        ruleset, _pin, _closed = data_pin(config)
        raise DataError(
            str(manifest.get("source") or manifest.get("name")),
            [
                *problems,
                f"a closed {config.profile} run needs the data {ruleset} pins "
                f"(`aiperf rules {config.profile}`)",
            ],
        )


def open_data_note(config: BenchmarkConfig, manifest: dict[str, Any]) -> str | None:
    """For an open run of a packaged profile whose ruleset pins a source corpus (enwik8), one line
    saying how its data differs from the pin (None: closed, pinned, or nothing to say): such a
    run goes on, open, and says that its data would not make it closed either."""
    division = classify(config)
    ruleset = load_ruleset(division.ruleset)
    if division.closed or config.profile not in ruleset.profiles:
        return None
    pin = ruleset.for_profile(config.profile).data
    if pin is None or not pin.source_sha256:
        return None
    problems = closed_problems(manifest, pin)
    if not problems:
        return None
    return f"open: the data is not {pin.name or pin.kind} as {ruleset.name} pins it: " + "; ".join(
        problems
    )


def digest_on_disk(manifest: dict[str, Any]) -> str | None:
    """The content digest of the data now at the manifest's path (None: it is not on this
    machine): a synthetic .npz's arrays, or the dataset digest of its shards hashed again."""
    path = Path(str(manifest.get("path") or ""))
    if manifest.get("format", "npz") == "npz":
        if not path.is_file():
            return None
        import numpy as np

        try:
            with np.load(path) as data:
                return arrays_digest(
                    [
                        ("train", data["x_train"], data["y_train"]),
                        ("validation", data["x_val"], data["y_val"]),
                    ]
                )
        except (OSError, ValueError, KeyError):
            return "unreadable"
    shards = manifest.get("shards") or []
    files = [Path(shard_path(path, s)) for s in shards]
    if not shards or not all(f.is_file() for f in files):
        return None
    return dataset_digest(
        [{**s, "sha256": sha256_file(f)} for s, f in zip(shards, files, strict=True)]
    )


def check_dataset_pinned(ev: Evidence) -> CheckRecord:
    """The recorded dataset is the one the run's ruleset pins, with no image in both splits and
    every class in both (closed runs under a ruleset with pins)."""
    ruleset, pin, closed = data_pin(ev.config)
    if not closed:
        return CheckRecord(
            DATASET_PINNED, True, "open division: the data is recorded, not held to a pin"
        )
    if pin is None:
        return CheckRecord(DATASET_PINNED, True, f"{ruleset} pins no dataset")
    if ev.dataset is None:
        return CheckRecord(DATASET_PINNED, False, "the run has no recorded dataset")
    problems = closed_problems(recorded_manifest(ev.dataset), pin)
    # Generated data still where it was staged is digested again: a record edited to the pin
    # does not hide other data trained on (user data is not re-read: ImageNet is too large).
    again = digest_on_disk(ev.dataset.manifest) if pin.sha256 else None
    if again is not None and again != ev.dataset.sha256:
        problems.append(
            f"the data at {ev.dataset.manifest.get('path')} has content sha256 {again[:12]}, "
            f"the record says {ev.dataset.sha256[:12]}"
        )
    if problems:
        shown = "; ".join(problems[:5]) + (
            f"; and {len(problems) - 5} more" if len(problems) > 5 else ""
        )
        return CheckRecord(DATASET_PINNED, False, shown)
    overlap = ev.dataset.manifest.get("overlap") or {}
    return CheckRecord(
        DATASET_PINNED,
        True,
        f"{pin.describe()}, as {ruleset} pins; {overlap.get('images_hashed', 0)} "
        + (
            "windows hashed, none in both splits"
            if pin.tokens
            else "images hashed, none in both splits; every class in both"
        )
        + ("; the staged data digested again" if again is not None else ""),
    )
