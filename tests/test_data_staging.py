"""Staging real JPEG folders, ImageNet-format shards and scikit-learn's digits: manifests with
counts, shard names, sizes and checksums; work already done is skipped; node-local copies are
verified; and the tf.data pipeline yields exactly the staged images, preprocessed."""

from __future__ import annotations

import json
import os
import shutil
import socket
from pathlib import Path

import numpy as np
import pytest

from aiperf.config import DataConfig
from aiperf.data.manifest import MANIFEST_FILE, read_manifest, sha256_file
from aiperf.data.pipeline import BatchShape, ReadOptions, make_dataset
from aiperf.data.problems import DataError
from aiperf.data.staging import stage


@pytest.fixture(scope="module")
def images(make_image_folder, tmp_path_factory) -> Path:
    return make_image_folder(
        tmp_path_factory.mktemp("src") / "images", train_per_class=10, val_per_class=4
    )


@pytest.fixture(scope="module")
def staged(images, tmp_path_factory):
    out = tmp_path_factory.mktemp("staged")
    config = DataConfig(kind="folder", source=str(images), image_size=16, shard_images=8)
    return config, out, stage(config, 0, out)


def test_manifest_describes_the_shards(staged):
    _config, _out, manifest = staged
    assert (manifest.kind, manifest.format, manifest.classes) == ("folder", "tfrecord", 3)
    assert (manifest.train_samples, manifest.val_samples) == (30, 12)
    assert manifest.images_per_class == {"cat": 10, "dog": 10, "fish": 10}
    assert manifest.val_images_per_class == {"cat": 4, "dog": 4, "fish": 4}
    assert manifest.image_shape == (16, 16, 3)
    names = [s["name"] for s in manifest.shards]
    assert names == [
        "train-00000-of-00004",
        "train-00001-of-00004",
        "train-00002-of-00004",
        "train-00003-of-00004",
        "validation-00000-of-00002",
        "validation-00001-of-00002",
    ]
    folder = Path(manifest.path)
    for shard in manifest.shards:
        path = folder / shard["file"]
        assert path.stat().st_size == shard["size_bytes"] and sha256_file(path) == shard["sha256"]
    assert sum(s["images"] for s in manifest.shards) == 42
    assert read_manifest(folder)["sha256"] == manifest.sha256


def test_second_staging_skips_done_work_and_redoes_changed_shards(staged, images, tmp_path):
    config, out, manifest = staged
    folder = Path(manifest.path)
    before = {p.name: p.stat().st_mtime_ns for p in folder.iterdir()}
    again = stage(config, 0, out)
    assert again.sha256 == manifest.sha256
    assert all(
        folder.joinpath(s["file"]).stat().st_mtime_ns == before[s["file"]] for s in again.shards
    )
    # A changed image changes one shard's inputs: that shard alone is rewritten.
    copy = Path(shutil.copytree(images, tmp_path / "images"))
    config2 = config.model_copy(update={"source": str(copy)})
    first = stage(config2, 0, tmp_path / "out")
    stamps = {s["name"]: (Path(first.path) / s["file"]).stat().st_mtime_ns for s in first.shards}
    victim = copy / "val" / "dog" / "dog_0000.jpg"
    shutil.copy(copy / "val" / "cat" / "cat_0000.jpg", victim)
    second = stage(config2, 0, tmp_path / "out")
    changed = [
        s["name"]
        for s in second.shards
        if (Path(second.path) / s["file"]).stat().st_mtime_ns != stamps[s["name"]]
    ]
    assert len(changed) == 1 and changed[0].startswith("validation-")
    assert second.sha256 != first.sha256


@pytest.mark.parametrize("threads", [None, 1, 3])
def test_pipeline_yields_every_image_once_per_pass(staged, threads):
    _config, _out, manifest = staged
    for split, training, count in (("train", True, 30), ("validation", False, 12)):
        ds = make_dataset(
            manifest.path,
            split,
            BatchShape(batch_size=8, image_size=16, channels=3),
            training=training,
            seed=1,
            read=ReadOptions(drop_remainder=False, threads=threads),
        )
        # A worker's cores set the parallelism, untuned: tf.data's autotuner left a small VM's cores idle.
        assert ds.options().autotune.enabled is (False if threads else None)
        sizes, labels = [], []
        for x, y in ds:
            # Pixels travel as uint8; the model scales them on its device (aiperf.data.normalise).
            assert x.shape[1:] == (16, 16, 3) and x.dtype.name == "uint8"
            sizes.append(len(y))
            labels.extend(y.numpy().tolist())
        assert sum(sizes) == count and all(s == 8 for s in sizes[:-1]), (
            "only the last batch is short"
        )
        assert sorted(set(labels)) == [0, 1, 2]
        assert np.bincount(labels).tolist() == [count // 3] * 3


def test_an_evaluation_can_take_the_first_images_only(staged):
    """`limit`: the validation split's first N images, in order (an evaluation on N devices off
    TensorFlow takes the largest multiple of N: aiperf.data.feed.evaluated)."""
    _config, _out, manifest = staged
    shape = BatchShape(batch_size=5, image_size=16, channels=3)
    every = make_dataset(manifest.path, "validation", shape, training=False)
    first = make_dataset(
        manifest.path, "validation", shape, training=False, read=ReadOptions(limit=10)
    )
    labels = np.concatenate([y.numpy() for _x, y in every])
    limited = [y.numpy() for _x, y in first]
    assert [len(y) for y in limited] == [5, 5] and len(labels) == 12
    assert np.array_equal(np.concatenate(limited), labels[:10])
    assert first.cardinality().numpy() == 2


def test_labels_follow_the_class_folders(staged):
    """The eval pipeline's labels match each image's folder: class colours are distinct."""
    _config, _out, manifest = staged
    ds = make_dataset(
        manifest.path,
        "validation",
        BatchShape(batch_size=64, image_size=16, channels=3),
        training=False,
    )
    x, y = next(iter(ds))
    means = np.array([x.numpy()[y.numpy() == c].mean(axis=(0, 1, 2)) for c in range(3)])
    # The fixture's colours: cat (0, 80, 30), dog (97, 137, 181), fish (194, 194, 76) on 0..255.
    expected = np.array([[0, 80, 30], [97, 137, 181], [194, 194, 76]])
    assert np.abs(means - expected).max() < 0.2 * 127.5


def test_training_augmentation_is_random_and_eval_is_not(staged):
    _config, _out, manifest = staged
    shape = BatchShape(batch_size=64, image_size=16, channels=3)
    kwargs = dict(seed=3, read=ReadOptions(drop_remainder=False))
    train = [
        next(iter(make_dataset(manifest.path, "validation", shape, training=True, **kwargs)))[
            0
        ].numpy()
        for _ in range(2)
    ]
    evals = [
        next(iter(make_dataset(manifest.path, "validation", shape, training=False, **kwargs)))[
            0
        ].numpy()
        for _ in range(2)
    ]
    assert np.array_equal(evals[0], evals[1])
    assert not np.allclose(np.sort(train[0].ravel()), np.sort(train[1].ravel()))


def test_user_tfrecord_shards_are_checked_in_place(staged, tmp_path):
    _config, _out, manifest = staged
    shards = tmp_path / "shards"
    shards.mkdir()
    for s in manifest.shards:
        shutil.copy(Path(manifest.path) / s["file"], shards / s["name"])
    config = DataConfig(kind="tfrecord", source=str(shards), classes=3, image_size=16)
    checked = stage(config, 0, tmp_path / "out")
    assert (checked.kind, checked.train_samples, checked.val_samples) == ("tfrecord", 30, 12)
    assert checked.class_names == ["cat", "dog", "fish"]  # from image/class/synset
    assert checked.sha256 == manifest.sha256  # same shard checksums: the same dataset
    assert all(
        Path(s["file"]).is_absolute() and Path(s["file"]).parent == shards for s in checked.shards
    )
    ds = make_dataset(
        checked.path, "train", BatchShape(batch_size=8, image_size=16, channels=3), training=True
    )
    assert [len(y) for _x, y in ds] == [8, 8, 8], (
        "training batches are full; the partial one is dropped"
    )

    with pytest.raises(DataError) as caught:  # labels 1..3 do not fit 2 classes
        stage(config.model_copy(update={"classes": 2}), 0, tmp_path / "out")
    assert "has label 3, outside 1..2" in caught.value.problems[0]

    victim = shards / "train-00001-of-00004"
    victim.write_bytes(victim.read_bytes()[:-40])
    with pytest.raises(DataError) as caught:
        stage(config, 0, tmp_path / "out")
    assert caught.value.problems == [
        "train-00001-of-00004 is corrupt or truncated after record 1; re-copy it"
    ] or caught.value.problems[0].startswith("train-00001-of-00004 is corrupt or truncated")
    assert not (Path(checked.path) / MANIFEST_FILE).exists()

    os.remove(victim)
    for p in shards.glob("validation-*"):
        p.unlink()
    with pytest.raises(DataError, match="has no validation-\\* shards"):
        stage(config, 0, tmp_path / "out")


def test_stage_to_copies_and_verifies_node_local_shards(staged, tmp_path):
    from aiperf.data.feed import open_feed

    config, out, manifest = staged
    local = tmp_path / "node-local"
    placed = stage(config.model_copy(update={"stage_to": str(local)}), 0, out)
    assert (
        placed.path == manifest.path
        and placed.stage_to == str(local)
        and placed.sha256 == manifest.sha256
    )
    assert placed.copies and all(str(local) in where for where in placed.copies.values())
    copy_folder = local / manifest.name
    copy = read_manifest(copy_folder)
    assert copy["path"] == str(copy_folder)
    for s in copy["shards"]:
        assert sha256_file(copy_folder / s["file"]) == s["sha256"]
    # A damaged copy is found by its checksum and replaced by the next staging.
    first = copy_folder / copy["shards"][0]["file"]
    first.write_bytes(b"damaged")
    stage(config.model_copy(update={"stage_to": str(local)}), 0, out)
    assert sha256_file(first) == copy["shards"][0]["sha256"]
    # A worker that joined after staging (no copy on its node yet) makes its own when a trial opens the data.
    shutil.rmtree(local)
    feed = open_feed(placed.path, batch_size=8, input_shape=(16, 16, 3), seed=0)
    assert (copy_folder / MANIFEST_FILE).is_file() and feed.train_samples == 24
    # A later staging without stage_to reads the shared shards again.
    plain = stage(config, 0, out)
    assert plain.stage_to is None and read_manifest(plain.path).get("stage_to") is None


def test_digits_are_real_images_split_by_seed(tmp_path):
    config = DataConfig(
        kind="digits", image_size=16, channels=1, train_samples=1437, val_samples=360
    )
    manifest = stage(config, 7, tmp_path)
    assert (manifest.kind, manifest.classes, manifest.train_samples, manifest.val_samples) == (
        "digits",
        10,
        1437,
        360,
    )
    assert manifest.preprocess == "resize" and manifest.image_shape == (16, 16, 1)
    assert (
        sum(manifest.images_per_class.values()) == 1437
        and min(manifest.images_per_class.values()) > 100
    )
    again = stage(config, 7, tmp_path)
    assert again.sha256 == manifest.sha256
    assert stage(config, 8, tmp_path).sha256 != manifest.sha256
    x, y = next(
        iter(
            make_dataset(
                manifest.path,
                "validation",
                BatchShape(batch_size=360, image_size=16, channels=1),
                training=False,
            )
        )
    )
    assert x.shape == (360, 16, 16, 1) and set(y.numpy().tolist()) == set(range(10))
    assert x.dtype.name == "uint8" and int(x.numpy().max()) >= 250  # full-range pixels
    assert (
        json.loads((Path(manifest.path) / MANIFEST_FILE).read_text())["source"]
        == "sklearn.datasets.load_digits"
    )


def test_the_workers_of_one_node_share_one_verified_copy(tmp_path):
    """Two Dask workers on this one machine are one node: one copy is made and verified, by
    whichever worker takes the node's lock first; the other finds it verified and reuses it."""
    from distributed import Client, LocalCluster

    from aiperf.data.placement import LOCK_FILE, place_on_nodes

    config = DataConfig(
        kind="synthetic",
        image_size=8,
        train_samples=64,
        val_samples=16,
        stage_to=str(tmp_path / "node-local"),
    )
    with (
        LocalCluster(
            n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None
        ) as cluster,
        Client(cluster) as client,
    ):
        workers = set(client.scheduler_info()["workers"])
        placed = stage(config, 0, tmp_path / "out", client=client)
        assert len(workers) == 2 and len(placed.copies) == 1, placed.copies
        assert set(placed.copies) <= workers
        copy = Path(placed.path)
        assert list(placed.copies.values()) == [f"{socket.gethostname()}:{copy.parent}"]
        # The copy is the staged file, byte for byte (placed.sha256 digests the arrays it holds).
        shared = next((tmp_path / "out").glob("synthetic-*.npz"))
        assert sha256_file(copy) == sha256_file(shared) and (copy.parent / LOCK_FILE).is_file()

        # What each worker did in one staging: exactly one copied and verified, the other reused.
        files = [
            {
                "src": str(copy),
                "file": "again.npz",
                "sha256": sha256_file(shared),
                "size_bytes": placed.size_bytes,
            }
        ]
        dest = str(tmp_path / "node-local" / "again")
        done = place_on_nodes(files, dest, None, client, "one-staging", placed.sha256)
        assert set(done) == workers
        assert sorted((r["made"], r["copied"]) for r in done.values()) == [(False, 0), (True, 1)]
        assert all(r["path"] == dest for r in done.values())

        # A copy that fails verification is made again by the next staging, still once per node.
        copy.write_bytes(b"damaged")
        again = stage(config, 0, tmp_path / "out", client=client)
        assert len(again.copies) == 1 and sha256_file(copy) == sha256_file(shared)


def test_a_shards_images_are_checked_on_every_core_and_named_in_record_order(
    tmp_path, monkeypatch
):
    """The decode checks of one shard run on the worker's cores at once (aiperf.data.tfrecord);
    what they find is still said in record order, and every good image is counted."""
    import numpy as np
    import tensorflow as tf

    from aiperf.data.tfrecord import CheckTask, check_shard, example_bytes, write_shard

    monkeypatch.setenv("AIPERF_WORKER_CORES", "4")
    rng = np.random.default_rng(0)
    records, bad = [], {3, 11, 12, 30}
    for i in range(40):
        pixels = rng.integers(0, 255, size=(20, 24, 3), dtype=np.uint8)
        encoded = tf.io.encode_jpeg(pixels).numpy()
        if i in bad:
            corrupt = bytearray(encoded)  # the header and the end marker kept, the scan broken
            corrupt[200:-2] = bytes(len(corrupt) - 202)
            corrupt[200:260] = b"\xff\x01" * 30
            encoded = bytes(corrupt)
        records.append(example_bytes(encoded, 1 + i % 2, "n0", f"{i}.jpg", 20, 24, 3, "jpeg"))
    shard = tmp_path / "train-00000-of-00001"
    write_shard(shard, records)
    (tmp_path / "checks").mkdir()
    found = check_shard(CheckTask(str(shard), "train", 2, 1, str(tmp_path / "checks")))
    named = [int(p.split(" record ")[1].split()[0]) for p in found["problems"]]
    assert named == sorted(bad), found["problems"]

    for i in bad:
        records[i] = example_bytes(
            tf.io.encode_jpeg(np.zeros((20, 24, 3), np.uint8)).numpy(),
            1 + i % 2,
            "n0",
            f"{i}.jpg",
            20,
            24,
            3,
            "jpeg",
        )
    write_shard(shard, records)
    found = check_shard(CheckTask(str(shard), "train", 2, 1, str(tmp_path / "checks")))
    assert found["problems"] == [] and found["per_class"] == {"0": 20, "1": 20}
