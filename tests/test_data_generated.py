"""Generated ImageNet-shaped data (data.kind generated-imagenet, the imagenet-shaped profile): JPEG
shards in ImageNet's format, made from the settings and the seed, cached and checked by their
checksums like the others, and trained on through the same feed and pipeline as real ImageNet
shards. At a tiny size: 32 px, 4 classes, 64 training images."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from aiperf.config import DataConfig
from aiperf.data.manifest import sha256_file
from aiperf.data.staging import stage
from aiperf.search.space import architecture
from aiperf.train.messages import EpochReport, TrialRequest
from aiperf.train.trial import run_trial

TINY = DataConfig(
    kind="generated-imagenet",
    image_size=32,
    classes=4,
    train_samples=64,
    val_samples=16,
    shard_images=16,
)


@pytest.fixture(scope="module")
def generated(tmp_path_factory):
    out = tmp_path_factory.mktemp("generated")
    return out, stage(TINY, 3, out)


def _records(path: Path) -> list[dict]:
    """Every record of a shard, parsed with the feature keys of ImageNet's shards."""
    import tensorflow as tf

    spec = {
        "image/encoded": tf.io.FixedLenFeature([], tf.string),
        "image/class/label": tf.io.FixedLenFeature([], tf.int64),
        "image/class/synset": tf.io.FixedLenFeature([], tf.string),
        "image/height": tf.io.FixedLenFeature([], tf.int64),
        "image/format": tf.io.FixedLenFeature([], tf.string),
    }
    return [
        {k: v.numpy() for k, v in tf.io.parse_single_example(r, spec).items()}
        for r in tf.data.TFRecordDataset(str(path))
    ]


def test_shards_are_imagenets_format_with_jpegs(generated):
    _out, manifest = generated
    assert (manifest.kind, manifest.format, manifest.preprocess) == (
        "generated-imagenet",
        "tfrecord",
        "imagenet",
    )
    assert (manifest.label_offset, manifest.classes, manifest.image_shape) == (1, 4, (32, 32, 3))
    assert (manifest.train_samples, manifest.val_samples) == (64, 16)
    assert [s["name"] for s in manifest.shards] == [
        *(f"train-{i:05d}-of-00004" for i in range(4)),
        "validation-00000-of-00001",
    ]
    records = [r for s in manifest.shards for r in _records(Path(manifest.path) / s["file"])]
    assert len(records) == 80
    assert all(r["image/encoded"].startswith(b"\xff\xd8\xff") for r in records), "JPEG bytes"
    assert {r["image/format"] for r in records} == {b"JPEG"}
    assert {r["image/height"] for r in records} == {37}, "stored at 32 / 0.875, as 256 for 224"
    labels = [int(r["image/class/label"]) for r in records]
    assert set(labels) == {1, 2, 3, 4}, "labels from 1, as in ImageNet's shards"
    assert {r["image/class/synset"].decode() for r in records} <= set(manifest.class_names)
    assert sum(manifest.images_per_class.values()) == 64


def test_cached_by_settings_and_seed_and_checked_by_checksum(generated):
    out, manifest = generated
    folder = Path(manifest.path)
    stamps = {s["file"]: (folder / s["file"]).stat().st_mtime_ns for s in manifest.shards}
    started = time.perf_counter()
    again = stage(TINY, 3, out)
    assert again.sha256 == manifest.sha256 and again.path == manifest.path
    assert stamps == {f: (folder / f).stat().st_mtime_ns for f in stamps}, "nothing made again"
    assert time.perf_counter() - started < 5
    # A damaged shard fails its checksum and is made again, identical: the data is the seed's.
    victim = folder / manifest.shards[1]["file"]
    victim.write_bytes(victim.read_bytes()[:-10])
    repaired = stage(TINY, 3, out)
    assert repaired.sha256 == manifest.sha256
    assert sha256_file(victim) == manifest.shards[1]["sha256"]
    # Another seed or another size is other data, in a folder of its own.
    other = stage(TINY, 4, out)
    assert other.sha256 != manifest.sha256 and other.path != manifest.path
    assert Path(manifest.path).is_dir()


def test_another_process_makes_the_same_shards(generated, tmp_path):
    """Workers are other processes (other machines): the same settings and seed must give the same
    checksums there, or a resumed run would not find the data it started on."""
    from aiperf.data.staging_npz import settings_key

    _out, manifest = generated
    code = (
        "import sys; from pathlib import Path; from aiperf.data import generated; "
        "from aiperf.config import DataConfig; "
        "c = DataConfig.model_validate_json(sys.argv[1]); "
        "tasks = generated.plan(Path(sys.argv[2]), sys.argv[3], 3, c); "
        "print(generated.generate_shard(tasks[-1])['sha256'])"
    )
    made = subprocess.run(
        [sys.executable, "-c", code, TINY.model_dump_json(), str(tmp_path), settings_key(TINY, 3)],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    assert made.stdout.split()[-1] == manifest.shards[-1]["sha256"]


def test_the_feed_decodes_them_as_imagenet_shards(generated):
    from aiperf.data.pipeline import BatchShape, make_dataset

    _out, manifest = generated
    x, y = next(
        iter(
            make_dataset(
                manifest.path,
                "validation",
                BatchShape(batch_size=16, image_size=32, channels=3),
                training=False,
            )
        )
    )
    assert x.shape == (16, 32, 32, 3) and x.dtype.name == "uint8"  # pixels, scaled on the device
    assert set(y.numpy().tolist()) <= {0, 1, 2, 3}
    # Each class is its own colour: the class means differ well beyond the noise.
    means = [x.numpy()[y.numpy() == c].mean(axis=(0, 1, 2)) for c in sorted(set(y.numpy()))]
    gaps = [np.abs(a - b).max() for i, a in enumerate(means) for b in means[i + 1 :]]
    assert min(gaps) > 0.1 * 127.5


def test_a_trial_trains_on_them_through_the_real_feed(generated):
    _out, manifest = generated
    arch = architecture(
        {"stages": 1, "blocks_per_stage": 1, "base_filters": 4, "kernel_size": 3},
        manifest.image_shape,
        manifest.classes,
    )
    request = TrialRequest(
        run_id=1,
        trial_key="g0",
        architecture=arch.to_dict(),
        learning_rate=0.05,
        batch_size=16,
        epochs=1,
        deadline=time.time() + 120,
        data_path=manifest.path,
        seed=1,
    )
    reports: list = []
    result = run_trial(request, reports.append)
    assert result.status == "completed", result.message
    epochs = [r for r in reports if isinstance(r, EpochReport)]
    assert [(e.samples_trained, e.samples_evaluated) for e in epochs] == [(64, 16)]
    assert epochs[0].val_accuracy is not None


def test_generating_a_few_hundred_images_takes_seconds(tmp_path):
    import tensorflow  # noqa: F401  (loaded before the clock starts: workers have it loaded)

    config = TINY.model_copy(update={"train_samples": 320, "val_samples": 80})
    started = time.perf_counter()
    manifest = stage(config, 0, tmp_path)
    assert manifest.train_samples + manifest.val_samples == 400
    assert time.perf_counter() - started < 15
