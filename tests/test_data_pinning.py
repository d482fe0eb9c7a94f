"""Pinned data (issue 25 item 1) and staging's limits on untrusted files (item 10).

aiperf-rules-1.2 pins each profile's dataset; staging computes the dataset's digest, the overlap
between its splits and its classes per split from the staged content every time a run uses it, so
a cache whose validation split was swapped for training images (its sidecar rewritten to match)
gives another digest and an overlap, and a closed run on it is refused before its search. verify's
dataset_pinned check judges the recorded dataset against the same pin. No test here trains.
"""

from __future__ import annotations

import json
import os
import shutil
import sqlite3
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from aiperf.config import DataConfig, load_config
from aiperf.data.images import MAX_IMAGE_BYTES, MAX_IMAGE_PIXELS, check_image
from aiperf.data.manifest import MANIFEST_FILE, read_manifest, sha256_file, write_json_atomic
from aiperf.data.pins import arrays_digest, content_problems, row_keys
from aiperf.data.problems import DataError
from aiperf.data.staging import stage
from aiperf.data.staging_npz import arrays_manifest
from aiperf.data.synthetic import ImageArrays
from aiperf.lifecycle import run
from aiperf.lifecycle.staging import stage_dataset
from aiperf.results import verify
from aiperf.results.data_checks import (
    DATASET_PINNED,
    check_dataset_pinned,
    refuse_unpinned,
)
from aiperf.rules import load_ruleset
from aiperf.store import DatasetRecord, Store

V12 = "aiperf-rules-1.2"
SHARDS = {"data.source": "/data"}  # imagenet needs a source to load; replaced where it is read


def pin(profile: str):
    rules = load_ruleset(V12).for_profile(profile).data
    assert rules is not None
    return rules


def closed(profile: str, **overrides):
    config = load_config(profile, workers=1, overrides=overrides or None, runs_here=False)
    from aiperf.results.division import classify

    assert classify(config).closed, profile
    return config


def evidence(config, dataset: DatasetRecord | None) -> verify.Evidence:
    """What check_dataset_pinned reads: the run's config and its dataset record."""
    return verify.Evidence(None, config, dataset, {}, 0.0, None)  # type: ignore[arg-type]


def record_of(manifest: dict) -> DatasetRecord:
    return DatasetRecord(
        name=manifest["name"],
        kind=manifest["kind"],
        sha256=manifest["sha256"],
        train_samples=manifest["train_samples"],
        val_samples=manifest["val_samples"],
        classes=manifest["classes"],
        manifest=manifest,
    )


# --- the pins are the content's, and reproducible ----------------------------------------------------


def test_generated_pins_are_what_staging_computes_in_another_folder_and_process(tmp_path):
    """quick's and nightly's synthetic arrays and digits' shards, staged here and in another
    process into other folders: the same content digest both times, and the ruleset's."""
    code = (
        "import sys; from pathlib import Path; from aiperf.config import load_config; "
        "from aiperf.data.staging import stage; "
        "c = load_config(sys.argv[1], workers=1, runs_here=False); "
        "print(stage(c.data, c.seed, Path(sys.argv[2])).sha256)"
    )
    for profile in ("quick", "nightly", "digits"):
        config = closed(profile)
        here = stage(config.data, config.seed, tmp_path / "here" / profile)
        there = subprocess.run(
            [sys.executable, "-c", code, profile, str(tmp_path / "there" / profile)],
            capture_output=True,
            text=True,
            timeout=300,
            check=True,
        ).stdout.split()[-1]
        assert here.sha256 == there == pin(profile).sha256, profile
        assert here.overlap == {
            "images_hashed": here.train_samples + here.val_samples,
            "rate": 1.0,
            "overlaps": 0,
            "examples": [],
        }
        assert content_problems(here.to_dict()) == [], profile


def test_the_npz_file_is_not_reproducible_but_its_content_digest_is(tmp_path):
    """np.savez stamps zip times: two stagings' files may differ; their arrays' digest does not."""
    config = DataConfig(kind="synthetic", image_size=8, train_samples=64, val_samples=16)
    one = stage(config, 0, tmp_path / "one")
    two = stage(config, 0, tmp_path / "two")
    assert one.sha256 == two.sha256
    with np.load(one.path) as data:
        again = arrays_digest(
            [
                ("train", data["x_train"], data["y_train"]),
                ("validation", data["x_val"], data["y_val"]),
            ]
        )
    assert again == one.sha256 != sha256_file(one.path)


# --- a swapped validation split -------------------------------------------------------------------


def _swap_validation_for_training(npz: Path) -> None:
    """The attack of the issue: the validation split replaced by training images, the sidecar
    rewritten so that its sha256 matches the new file."""
    with np.load(npz) as data:
        arrays = {k: data[k] for k in data.files}
    n = len(arrays["y_val"])
    arrays["x_val"], arrays["y_val"] = arrays["x_train"][:n], arrays["y_train"][:n]
    np.savez(npz, **arrays)
    sidecar = npz.with_suffix(".json")
    meta = json.loads(sidecar.read_text())
    meta["sha256"] = sha256_file(npz)
    sidecar.write_text(json.dumps(meta))


def test_a_swapped_synthetic_validation_split_is_refused_before_the_search(tmp_path):
    config = load_config(
        "quick", workers=1, db=f"sqlite:///{tmp_path / 'a.db'}", out=str(tmp_path / "out")
    )
    clean = stage(config.data, config.seed, tmp_path / "out" / "data")
    assert clean.sha256 == pin("quick").sha256
    _swap_validation_for_training(Path(clean.path))

    with Store.open(config.db) as store:
        claim = run.record_run(store, config).claim
    run_id = claim.run_id
    assert run.classify(config).closed
    with pytest.raises(DataError) as caught:
        stage_dataset(config, claim, None)
    message = str(caught.value)
    assert "\n" not in message
    assert "1000 validation images are also training images" in message
    assert f"the ruleset pins {pin('quick').sha256[:12]}" in message
    with Store.open(config.db) as store:
        recorded = store.run_dataset(run_id)
    assert recorded is not None and recorded.sha256 != clean.sha256, "the recomputed digest"
    assert recorded.manifest["overlap"]["overlaps"] == 1000
    # verify says the same of the record: not a closed valid result.
    failed = check_dataset_pinned(evidence(config, recorded))
    assert not failed.passed and "also training images" in failed.detail


def test_an_open_run_may_use_other_data_and_records_its_digest(tmp_path):
    config = load_config("quick", workers=1, seed=5, runs_here=False)
    manifest = stage(config.data, config.seed, tmp_path).to_dict()
    refuse_unpinned(config, manifest)  # open: not held to the pin
    check = check_dataset_pinned(evidence(config, record_of(manifest)))
    assert check.passed and "open division" in check.detail


def test_swapped_digits_shards_are_read_again_and_refused(tmp_path):
    """The same attack on shards: a validation shard replaced by a training shard, manifest.json
    and the shard's sidecar rewritten to its checksum. Staging re-reads the files."""
    config = closed("digits")
    clean = stage(config.data, config.seed, tmp_path)
    assert clean.sha256 == pin("digits").sha256
    folder = Path(clean.path)
    train, val = (folder / "train-00000-of-00001"), (folder / "validation-00000-of-00001")
    shutil.copy(train, val)
    data = read_manifest(folder)
    for shard in data["shards"]:
        if shard["split"] == "validation":
            shard["sha256"], shard["size_bytes"] = sha256_file(val), val.stat().st_size
    data["sha256"] = pin("digits").sha256  # the manifest's own field is never read
    write_json_atomic(folder / MANIFEST_FILE, data)
    swapped = stage(config.data, config.seed, tmp_path)
    assert swapped.sha256 != pin("digits").sha256
    assert swapped.overlap is not None and swapped.overlap["overlaps"] == 1437
    with pytest.raises(DataError, match="validation images are also training images"):
        refuse_unpinned(config, swapped.to_dict())


# --- imagenet: user shards of two classes --------------------------------------------------------


def test_two_class_shards_under_the_imagenet_profile_are_refused(tmp_path, make_image_folder):
    made = stage(
        DataConfig(kind="folder", source=str(make_image_folder(tmp_path / "img", ("cat", "dog")))),
        0,
        tmp_path / "made",
    )
    shards = tmp_path / "shards"
    shards.mkdir()
    for s in made.shards:
        shutil.copy(Path(made.path) / s["file"], shards / s["name"])
    config = closed("imagenet", **{"data.source": str(shards)})
    manifest = stage(config.data, config.seed, tmp_path / "out").to_dict()
    assert manifest["classes"] == 1000 and manifest["overlap"]["overlaps"] == 0
    with pytest.raises(DataError) as caught:
        refuse_unpinned(config, manifest)
    problems = caught.value.problems
    assert "20 train images, the ruleset pins 1281167" in problems
    assert any(p.startswith("998 of 1000 classes have no train images") for p in problems)
    assert any(p.startswith("998 of 1000 classes have no validation images") for p in problems)
    check = check_dataset_pinned(evidence(config, record_of(manifest)))
    assert not check.passed and check.check == DATASET_PINNED


# --- overlap and missing classes ---------------------------------------------------------------


def test_an_image_in_both_splits_of_a_folder_is_found_by_its_hash(tmp_path, make_image_folder):
    root = make_image_folder(tmp_path / "img", ("cat", "dog"))
    shutil.copy(root / "train" / "dog" / "dog_0003.jpg", root / "val" / "dog" / "copy.jpg")
    manifest = stage(DataConfig(kind="folder", source=str(root)), 0, tmp_path / "out")
    assert manifest.overlap is not None
    assert (manifest.overlap["images_hashed"], manifest.overlap["overlaps"]) == (29, 1)
    [example] = manifest.overlap["examples"]
    assert example.startswith("validation-00000-of-00001 record ") and " = train-" in example
    assert any(
        "1 validation images are also training images" in p
        for p in content_problems(manifest.to_dict())
    )


def test_a_class_missing_from_a_split_is_named():
    rng = np.random.default_rng(0)
    x = rng.standard_normal((40, 4, 4, 1)).astype(np.float32)
    y = np.arange(40, dtype=np.int32) % 4
    val_y = np.zeros(8, dtype=np.int32)  # class 0 only
    arrays = ImageArrays(x[:32], y[:32], x[32:], val_y)
    path = Path(os.devnull)
    manifest = arrays_manifest(arrays, "tiny", path, 4).to_dict()
    assert content_problems(manifest) == [
        "3 of 4 classes have no validation images (1, 2, 3): every class needs images in both splits"
    ]
    assert len(row_keys(x)) == 40 * 8


def test_verify_fails_a_record_whose_digest_was_edited(tmp_path):
    """The digest as the database keeps it, edited to another value: dataset_pinned fails."""
    config = closed("quick")
    config = config.model_copy(update={"db": f"sqlite:///{tmp_path / 'a.db'}"})
    manifest = stage(config.data, config.seed, tmp_path / "data").to_dict()
    with Store.open(config.db) as store:
        recorder = run.record_run(store, config)
        run_id = recorder.run_id
        store.record_dataset(recorder.claim, manifest)
        clean = store.run_dataset(run_id)
    passed = check_dataset_pinned(evidence(config, clean))
    assert passed.passed and "3000 images hashed, none in both splits" in passed.detail, passed
    with sqlite3.connect(tmp_path / "a.db") as sql:
        sql.execute("UPDATE datasets SET sha256 = ?", ("0" * 64,))
    with Store.open_existing(config.db) as store:
        edited = store.run_dataset(run_id)
    failed = check_dataset_pinned(evidence(config, edited))
    assert not failed.passed and "content sha256 000000000000, the ruleset pins" in failed.detail


def test_a_record_forged_to_the_pin_fails_on_the_data_still_staged(tmp_path):
    """Trained on a swapped cache, then the record edited to say the pinned digest and no overlap:
    the staged data is digested again by verify and does not match."""
    config = closed("quick")
    clean = stage(config.data, config.seed, tmp_path).to_dict()
    check = check_dataset_pinned(evidence(config, record_of(clean)))
    assert check.passed and check.detail.endswith("the staged data digested again"), check
    _swap_validation_for_training(Path(clean["path"]))
    swapped = stage(config.data, config.seed, tmp_path).to_dict()
    forged = {**swapped, "sha256": clean["sha256"], "overlap": clean["overlap"]}
    check = check_dataset_pinned(evidence(config, record_of(forged)))
    assert not check.passed
    assert check.detail == (
        f"the data at {clean['path']} has content sha256 {swapped['sha256'][:12]}, "
        f"the record says {clean['sha256'][:12]}"
    )


def test_rulesets_without_pins_pass_with_a_detail_saying_so():
    config = closed("quick").model_copy(update={"ruleset": "aiperf-rules-1.0"})
    check = check_dataset_pinned(evidence(config, None))
    assert check.passed and check.detail == "aiperf-rules-1.0 pins no dataset"


# --- staging's limits (item 10) ------------------------------------------------------------------


def _png_header(width: int, height: int) -> bytes:
    """A PNG whose IHDR claims this size (the rest is not there: it is never decoded)."""
    import struct
    import zlib

    ihdr = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    chunk = b"IHDR" + ihdr
    return (
        b"\x89PNG\r\n\x1a\n"
        + struct.pack(">I", len(ihdr))
        + chunk
        + struct.pack(">I", zlib.crc32(chunk))
        + b"IEND\xaeB`\x82"
    )


def test_a_decompression_bomb_is_refused_from_its_header():
    problem, _shape = check_image("train/cat/bomb.png", _png_header(30000, 30000))
    assert problem is not None and f"more than the {MAX_IMAGE_PIXELS}" in problem
    assert "30000x30000 pixels" in problem


def test_jpeg_and_png_sizes_are_read_from_their_headers(tmp_path, make_image_folder):
    from PIL import Image

    from aiperf.data.images import header_size

    root = make_image_folder(tmp_path / "img", ("cat",), train_per_class=3, val_per_class=1)
    for path in sorted((root / "train" / "cat").iterdir()):
        with Image.open(path) as image:
            width, height = image.size
        assert header_size(path.read_bytes()) == (height, width), path
    assert header_size(_png_header(7, 5)) == (5, 7)
    real = next((root / "train" / "cat").iterdir()).read_bytes()
    at = real.index(b"\xff\xc0")  # baseline start of frame: length, precision, height, width
    bomb = real[: at + 5] + (40000).to_bytes(2, "big") * 2 + real[at + 9 :]
    problem, _shape = check_image("train/cat/bomb.jpg", bomb)
    assert problem is not None and "40000x40000 pixels" in problem


def test_a_shard_named_in_other_bytes_than_utf8_is_named_in_one_line(tmp_path):
    shards = Path(os.fsdecode(os.fsencode(tmp_path) + b"/shards"))
    shards.mkdir()
    (shards / "validation-00000-of-00001").write_bytes(b"")
    Path(os.fsdecode(os.fsencode(shards) + b"/train-\xff-of-00001")).write_bytes(b"")
    with pytest.raises(DataError) as caught:
        stage(DataConfig(kind="tfrecord", source=str(shards), classes=2), 0, tmp_path / "out")
    assert caught.value.problems == [
        "train-\\xff-of-00001 has a name that is not UTF-8; rename it"
    ]
    assert str(caught.value).encode("utf-8")  # printable as it is


def _aiperf_stage(folder: Path, out: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [str(Path(sys.executable).parent / "aiperf"), "stage", str(folder), "--to", str(out)],
        capture_output=True,
        timeout=120,  # a FIFO opened for reading would block here forever
    )


@pytest.mark.parametrize("bad", ["fifo", "non-utf8", "oversized"])
def test_a_bad_file_in_the_image_folder_is_one_line_and_exit_2(tmp_path, make_image_folder, bad):
    root = make_image_folder(tmp_path / "img", ("cat", "dog"), train_per_class=2, val_per_class=1)
    cat = root / "train" / "cat"
    if bad == "fifo":
        os.mkfifo(cat / "pipe.jpg")
        expected = "train/cat/pipe.jpg is not a regular file"
    elif bad == "non-utf8":
        (Path(os.fsdecode(os.fsencode(cat) + b"/caf\xe9.jpg"))).write_bytes(b"\xff\xd8\xff")
        expected = "train/cat/caf\\xe9.jpg has a name that is not UTF-8"
    else:
        with open(cat / "huge.jpg", "wb") as handle:  # sparse: no disk is spent
            handle.truncate(MAX_IMAGE_BYTES + 1)
        expected = f"more than the {MAX_IMAGE_BYTES >> 20} MiB an image may be"
    result = _aiperf_stage(root, tmp_path / "out")
    stderr = result.stderr.decode("utf-8", "replace")
    assert result.returncode == 2, stderr
    assert expected in stderr and "Traceback" not in stderr, stderr
    assert len([line for line in stderr.splitlines() if line.strip()]) == 1, stderr
