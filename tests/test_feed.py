"""The feed of in-memory arrays (aiperf.data.feed.array_dataset): every sample once per pass, a new
order every pass that the seed reproduces, and tf.data's autotuner off, which is the reason it exists
(on a 2-vCPU VM Keras's own pipeline from arrays left the cores idle a third to half of the time;
benchmarks/bench_trial_efficiency.py measures it). The speed is benchmarked, not tested here."""

from __future__ import annotations

import numpy as np

from aiperf.config import DataConfig
from aiperf.data.feed import array_dataset, open_feed
from aiperf.data.staging_npz import stage_synthetic


def _passes(dataset, count: int) -> list[list[tuple[np.ndarray, np.ndarray]]]:
    return [[(x.numpy(), y.numpy()) for x, y in dataset] for _ in range(count)]


def _arrays(count: int = 20) -> tuple[np.ndarray, np.ndarray]:
    x = np.arange(count * 2 * 2 * 1, dtype="float32").reshape(count, 2, 2, 1)
    return x, np.arange(count, dtype="int64")


def test_every_sample_once_per_pass_with_its_own_label():
    x, y = _arrays()
    for seed in (None, 3):
        for batches in _passes(array_dataset(x, y, 8, shuffle_seed=seed), 2):
            assert [len(labels) for _, labels in batches] == [8, 8, 4]
            labels = np.concatenate([labels for _, labels in batches])
            images = np.concatenate([images for images, _ in batches])
            assert sorted(labels.tolist()) == list(range(20))
            np.testing.assert_array_equal(images, x[labels])  # each image travels with its label


def test_unshuffled_keeps_the_order_and_shuffled_changes_it_every_pass():
    x, y = _arrays()
    plain = _passes(array_dataset(x, y, 8), 2)
    assert all(
        np.concatenate([labels for _, labels in p]).tolist() == list(range(20)) for p in plain
    )
    orders = [
        np.concatenate([labels for _, labels in p]).tolist()
        for p in _passes(array_dataset(x, y, 8, shuffle_seed=3), 3)
    ]
    assert orders[0] != list(range(20)) and len({tuple(o) for o in orders}) == 3
    again = [
        np.concatenate([labels for _, labels in p]).tolist()
        for p in _passes(array_dataset(x, y, 8, shuffle_seed=3), 3)
    ]
    assert again == orders  # the seed reproduces every pass's order


def test_the_autotuner_is_off():
    x, y = _arrays()
    for seed in (None, 1):
        options = array_dataset(x, y, 4, shuffle_seed=seed).options()
        assert options.autotune.enabled is False


def test_open_feed_gives_keras_whole_training_batches_through_the_feed(tmp_path):
    manifest = stage_synthetic(
        DataConfig(kind="synthetic", image_size=16, train_samples=50, val_samples=13, classes=3),
        0,
        tmp_path,
    )
    feed = open_feed(manifest.path, batch_size=8, input_shape=(16, 16, 3), seed=1)
    assert (feed.train_samples, feed.val_samples) == (48, 13)
    train = [labels.numpy() for _, labels in feed.train["x"]]
    val = [labels.numpy() for _, labels in feed.val["x"]]
    assert [len(b) for b in train] == [8] * 6 and [len(b) for b in val] == [8, 5]
    assert feed.train["x"].options().autotune.enabled is False


def test_pixels_are_scaled_on_the_device_as_the_host_scaled_them(tmp_path):
    """uint8 pixels through the model's first layer give what the host's old [-1, 1] floats gave
    the counted model, which shares its variables and is what is counted and saved."""
    import keras

    from aiperf.arch import build_model
    from aiperf.arch.seeds import seed_spec
    from aiperf.data.normalise import LAYER_NAME, on_device

    model = build_model(seed_spec("resnet-mini", (16, 16, 3), 3))
    assert on_device(model, pixels=False) is model  # synthetic arrays are already model inputs
    fed = on_device(model, pixels=True)
    assert fed.input.dtype == "uint8" and fed.get_layer(LAYER_NAME) is not None
    pixels = np.random.default_rng(0).integers(0, 256, (4, 16, 16, 3), dtype=np.uint8)
    expected = model(pixels.astype("float32") / 127.5 - 1.0, training=False)
    got = fed(pixels, training=False)
    np.testing.assert_allclose(keras.ops.convert_to_numpy(got), expected, rtol=1e-5, atol=1e-6)
    assert {id(v) for v in fed.trainable_variables} == {id(v) for v in model.trainable_variables}


def test_one_iterator_gives_every_epoch_one_exact_pass_each_reshuffled(tmp_path):
    """Feed.epochs: a trial's one `fit` takes steps_per_epoch batches per epoch from one iterator
    that lives across epochs; each epoch is still every training sample once, in a new order."""
    manifest = stage_synthetic(
        DataConfig(kind="synthetic", image_size=16, train_samples=50, val_samples=13, classes=3),
        0,
        tmp_path,
    )
    feed = open_feed(manifest.path, batch_size=8, input_shape=(16, 16, 3), seed=1)
    steps = feed.epochs["steps_per_epoch"]
    assert steps == 6 and feed.epochs["shuffle"] is False
    batches = iter(feed.epochs["x"])
    orders = []
    for _epoch in range(3):
        images = np.concatenate([next(batches)[0].numpy() for _ in range(steps)])
        orders.append(images.reshape(len(images), -1)[:, 0].tolist())
    assert all(len(o) == 48 and len(set(o)) == 48 for o in orders)
    assert len({tuple(o) for o in orders}) == 3


def test_shards_give_one_iterator_of_exact_passes_too(make_image_folder, tmp_path):
    from aiperf.data.staging import stage

    images = make_image_folder(tmp_path / "src", train_per_class=10, val_per_class=4)
    manifest = stage(
        DataConfig(kind="folder", source=str(images), image_size=16, shard_images=8),
        0,
        tmp_path / "staged",
    )
    feed = open_feed(manifest.path, batch_size=8, input_shape=(16, 16, 3), seed=1)
    assert feed.pixels and feed.kind == "tf.data" and feed.epochs["steps_per_epoch"] == 3
    batches = iter(feed.epochs["x"])
    for _epoch in range(3):  # 30 images: three whole batches a pass, labels 10 a class but for 6
        labels = np.concatenate([next(batches)[1].numpy() for _ in range(3)])
        assert len(labels) == 24 and max(np.bincount(labels, minlength=3)) <= 10
