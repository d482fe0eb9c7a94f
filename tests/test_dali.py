"""The DALI feed (aiperf.data.dali) on DALI's CPU operators, the part of it that runs without a GPU:
the same batches, counts and crops as the tf.data feed, so a trial and its records do not change
with the feed. The GPU path (nvJPEG, one pipeline per device, a sharded global batch) runs in
benchmarks/gpu_check.sh where a GPU is lent."""

from __future__ import annotations

import numpy as np
import pytest

from aiperf.config import DataConfig
from aiperf.data.dali import installed, record_index
from aiperf.data.feed import choose_feed, open_feed
from aiperf.data.manifest import read_manifest, shard_path
from aiperf.data.staging import stage

pytestmark = pytest.mark.skipif(not installed(), reason="NVIDIA DALI is not installed")

SIZE = 32


@pytest.fixture(scope="module")
def shards(tmp_path_factory):
    """Generated ImageNet-format shards: 3 training shards, one validation shard (so tf.data
    reads the validation images in the file's order, as DALI's reader does)."""
    config = DataConfig(
        kind="generated-imagenet",
        image_size=SIZE,
        train_samples=100,
        val_samples=30,
        classes=4,
        shard_images=40,
    )
    return stage(config, 0, tmp_path_factory.mktemp("data")).path


def test_the_index_has_every_record_of_every_shard(shards):
    manifest = read_manifest(shards)
    for shard in manifest["shards"]:
        lines = record_index(shard_path(shards, shard)).splitlines()
        assert len(lines) == shard["images"]
        offsets = [int(line.split()[0]) for line in lines]
        sizes = [int(line.split()[1]) for line in lines]
        assert offsets[0] == 0 and offsets[1:] == list(np.cumsum(sizes)[:-1])
        assert sum(sizes) == shard["size_bytes"]


def test_a_cut_file_is_named(tmp_path, shards):
    manifest = read_manifest(shards)
    cut = tmp_path / "cut"
    cut.write_bytes(open(shard_path(shards, manifest["shards"][0]), "rb").read()[:-3])
    with pytest.raises(ValueError, match="past the end"):
        record_index(cut)


def test_auto_takes_tf_data_without_gpus_and_dali_when_asked():
    assert choose_feed("auto") == "tf.data"  # no GPU here
    assert choose_feed("tf.data") == "tf.data"
    assert choose_feed("dali") == "dali"


def test_training_batches_are_whole_uint8_pixels_with_their_labels(shards):
    feed = open_feed(shards, batch_size=16, input_shape=(SIZE, SIZE, 3), seed=1, feed="dali")
    assert (feed.kind, feed.pixels) == ("dali", True)
    assert (feed.train_samples, feed.val_samples) == (96, 30)
    assert feed.epochs["steps_per_epoch"] == 6
    stream = iter(feed.epochs["x"])
    labels = []
    for _ in range(12):  # two passes of one endless stream
        images, batch_labels = next(stream)
        assert images.shape == (16, SIZE, SIZE, 3) and images.dtype == np.uint8
        assert batch_labels.shape == (16,) and batch_labels.dtype == np.int32
        labels.extend(batch_labels.tolist())
    assert set(labels) <= {0, 1, 2, 3} and len(set(labels)) == 4  # label_offset 1 taken off
    assert feed.train["x"].num_batches == 6  # one pass: whole batches


def test_validation_is_every_image_once_a_pass_as_tf_data_crops_it(shards):
    dali = open_feed(shards, batch_size=16, input_shape=(SIZE, SIZE, 3), seed=1, feed="dali")
    tfdata = open_feed(shards, batch_size=16, input_shape=(SIZE, SIZE, 3), seed=1)
    passes = [[dali.val["x"][i] for i in range(dali.val["x"].num_batches)] for _ in range(2)]
    assert [len(labels) for _, labels in passes[0]] == [16, 14]
    for first, second in zip(*passes, strict=True):  # a new pass starts at the first image
        np.testing.assert_array_equal(first[0], second[0])
        np.testing.assert_array_equal(first[1], second[1])
    ours = np.concatenate([images for images, _ in passes[0]]).astype(float)
    theirs_batches = [(x.numpy(), y.numpy()) for x, y in tfdata.val["x"]]
    np.testing.assert_array_equal(
        np.concatenate([labels for _, labels in passes[0]]),
        np.concatenate([labels for _, labels in theirs_batches]),
    )
    theirs = np.concatenate([images for images, _ in theirs_batches]).astype(float)
    # The same window of the same images: another decoder and resampler move pixels by a few grey
    # levels on average; another crop (a shifted or scaled window) moves them by tens.
    assert np.abs(ours - theirs).mean() < 6.0


def test_an_evaluation_cut_short_starts_the_next_pass_at_its_first_image(shards):
    feed = open_feed(shards, batch_size=8, input_shape=(SIZE, SIZE, 3), seed=1, feed="dali")
    val = feed.val["x"]
    first = val[0]
    val[1]  # stopped here (a deadline), then evaluated again from the start
    again = val[0]
    np.testing.assert_array_equal(first[1], again[1])
    np.testing.assert_array_equal(first[0], again[0])


def test_keras_trains_and_evaluates_on_the_dali_feed(shards):
    import keras

    feed = open_feed(shards, batch_size=16, input_shape=(SIZE, SIZE, 3), seed=1, feed="dali")
    model = keras.Sequential(
        [
            keras.Input((SIZE, SIZE, 3), dtype="uint8"),
            keras.layers.Rescaling(1 / 127.5, offset=-1),
            keras.layers.Conv2D(4, 3, strides=4),
            keras.layers.GlobalAveragePooling2D(),
            keras.layers.Dense(4),
        ]
    )
    model.compile("sgd", keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    history = model.fit(**feed.epochs, epochs=2, verbose=0)
    assert len(history.history["loss"]) == 2
    evaluated = model.evaluate(**feed.val, verbose=0, return_dict=True)
    assert np.isfinite(evaluated["loss"])


def test_dali_asked_for_where_it_is_not_installed_is_one_line_before_anything_runs(tmp_path):
    """A Python without DALI (its import blocked, as where the package was never installed) refuses
    data.feed dali as the config loads, naming the fix."""
    import subprocess
    import sys

    script = (
        "import sys, importlib.abc\n"
        "class NoDali(importlib.abc.MetaPathFinder):\n"
        "    def find_spec(self, name, path=None, target=None):\n"
        "        if name == 'nvidia.dali' or name.startswith('nvidia.dali.'):\n"
        "            raise ModuleNotFoundError(name)\n"
        "sys.meta_path.insert(0, NoDali())\n"
        "from aiperf.cli.main import main\n"
        "sys.argv = ['aiperf', 'run', '--profile', 'quick', '--set', 'data.feed=dali',\n"
        f"            '--db', 'sqlite:///{tmp_path}/x.db', '--out', '{tmp_path}/out']\n"
        "main()\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 2, (done.stdout, done.stderr)
    assert "data.feed is dali, but NVIDIA DALI is not installed" in done.stderr
    assert "Traceback" not in done.stderr and not (tmp_path / "x.db").exists()
