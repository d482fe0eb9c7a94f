"""The tf.data input pipeline from staged TFRecord shards to batches a Keras model trains on.

    shards -> interleaved parallel reads -> parse -> (cache, when small) -> shuffle
           -> parallel decode + preprocess -> batch -> prefetch

(without random augmentation, as in evaluation, small sets are cached after preprocessing).

Training preprocessing is AIPerf's (and the reference ResNet-50's) ImageNet augmentation: a
random crop from a distorted bounding box (8-100% of the area, aspect 3:4 to 4:3; JPEGs decode
only the crop window), resized to the model's size, and a random left-right flip. Evaluation
crops the centre 87.5% of the short side (the usual "resize to 256, crop 224") and resizes.
Digits use `resize` (flips and crops change what a digit is).

What travels is uint8: each resized image is rounded back to 0..255 pixels (a quarter of float32's
bytes to copy to the accelerators), and the model's own input range, [-1, 1], is made on the
device, by the layer aiperf.data.normalise.on_device puts in front of the trained model (inside its
compiled step). A batch this pipeline yields is therefore pixels, never model inputs.

Training batches are all full: each epoch's last partial batch is dropped (the order is
reshuffled every epoch, so no image is always left out), as the reference ImageNet pipelines do.
Full batches keep the step cost constant, and TensorFlow's oneDNN CPU kernels crash on some odd
batch sizes (Conv2DBackpropFilter of a strided 1x1 convolution, seen with 5, 29 and 31). Evaluation
batches are never dropped: only the last one may be short. A trial that counts finished batches
therefore counts its samples exactly (see aiperf/data/feed.py).

Other Keras backends: the pipeline is TensorFlow, but Keras 3's `fit` and `evaluate` take a
tf.data.Dataset on every backend (JAX and torch included): Keras iterates it and hands each batch
to the backend as NumPy arrays. Install `tensorflow-cpu` beside JAX or torch for the input
pipeline alone; `numpy_batches()` gives plain NumPy batches for a hand-written training loop.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

from aiperf.data.manifest import read_manifest, shard_path

CENTRE_FRACTION = 0.875  # 224 of 256
CACHE_LIMIT_BYTES = 256 << 20  # shards smaller than this are read from disk once per trial


def _crop_window(shape, training: bool):
    """[y, x, height, width] of the region to keep, from the image's (h, w, c) shape."""
    import tensorflow as tf

    if training:
        begin, size, _ = tf.image.sample_distorted_bounding_box(
            shape,
            bounding_boxes=tf.constant([0.0, 0.0, 1.0, 1.0], shape=[1, 1, 4]),
            min_object_covered=0.1,
            aspect_ratio_range=(3 / 4, 4 / 3),
            area_range=(0.08, 1.0),
            max_attempts=10,
            use_image_if_no_bounding_boxes=True,
        )
        return tf.stack([begin[0], begin[1], size[0], size[1]])
    height, width = shape[0], shape[1]
    side = tf.cast(CENTRE_FRACTION * tf.cast(tf.minimum(height, width), tf.float32), tf.int32)
    side = tf.maximum(side, 1)
    return tf.stack([(height - side + 1) // 2, (width - side + 1) // 2, side, side])


def decode_cropped(encoded, channels: int, training: bool):
    """Decode only the crop window of a JPEG (much cheaper); PNGs decode whole, then crop."""
    import tensorflow as tf

    def jpeg():
        window = _crop_window(tf.image.extract_jpeg_shape(encoded), training)
        return tf.image.decode_and_crop_jpeg(encoded, window, channels=channels)

    def png():
        image = tf.io.decode_png(encoded, channels=channels)
        window = _crop_window(tf.shape(image), training)
        return tf.slice(image, [window[0], window[1], 0], [window[2], window[3], -1])

    return tf.cond(tf.io.is_jpeg(encoded), jpeg, png)


def preprocess(
    encoded,
    label,
    *,
    image_size: int,
    channels: int,
    training: bool,
    style: str,
    label_offset: int,
):
    """One example: encoded image bytes and stored label -> (uint8 image, label from 0). The resize
    interpolates in float; the result is rounded and clipped back to pixels (scaling to the model's
    range happens on the device: aiperf.data.normalise)."""
    import tensorflow as tf

    if style == "imagenet":
        image = decode_cropped(encoded, channels, training)
    else:  # resize: the whole image
        image = tf.io.decode_image(encoded, channels=channels, expand_animations=False)
    image = tf.image.resize(
        image, [image_size, image_size], method="bilinear", antialias=style != "imagenet"
    )
    if training and style == "imagenet":
        image = tf.image.random_flip_left_right(image)
    image = tf.cast(tf.clip_by_value(tf.round(image), 0.0, 255.0), tf.uint8)
    image.set_shape([image_size, image_size, channels])
    return image, tf.cast(label, tf.int32) - label_offset


def _parse(record):
    import tensorflow as tf

    parsed = tf.io.parse_single_example(
        record,
        {
            "image/encoded": tf.io.FixedLenFeature([], tf.string),
            "image/class/label": tf.io.FixedLenFeature([], tf.int64),
        },
    )
    return parsed["image/encoded"], parsed["image/class/label"]


def split_files(manifest: dict[str, Any], folder: str | Path, split: str) -> list[str]:
    return [shard_path(folder, s) for s in manifest["shards"] if s["split"] == split]


def make_dataset(
    path: str | Path,
    split: str,
    *,
    batch_size: int,
    image_size: int,
    channels: int,
    training: bool,
    seed: int | None = None,
    threads: int | None = None,
    style: str | None = None,
    cache: bool | None = None,
    repeat: bool = False,
    drop_remainder: bool | None = None,
    passes: bool = False,
    limit: int | None = None,
):
    """Batches of (images, labels) from a staged folder's `train` or `validation` shards.

    `threads` caps the pipeline's own thread pool and sets its parallelism (a worker's cores, so
    concurrent trials on one node do not fight), with tf.data's autotuner off; None lets tf.data
    use and tune the machine. `repeat` is for benchmarks only: it mixes passes. `passes` repeats
    whole passes (each reshuffled, each its whole batches) in one iterator, for a trial's one `fit`
    over all its epochs: its epochs stay exact passes (steps_per_epoch = images // batch_size) while
    the iterator, its threads and the prefetch live across them (the next pass's first batch is
    prepared while this pass's last one trains). `limit`: the first this many images only (an
    evaluation whose batches must split evenly over a trial's devices: aiperf.data.feed)."""
    import tensorflow as tf

    manifest = read_manifest(path)
    files = split_files(manifest, path, split)
    if not files:
        raise ValueError(f"{path} has no {split} shards")
    style = style or manifest.get("preprocess", "imagenet")
    # A trial knows its worker's cores: its pipeline then runs at that parallelism, untuned. With
    # tf.data's autotuner on, a small VM's cores sat idle and concurrent trials trained slower (see
    # feed.py; docs/performance.md gives the figures).
    parallel = threads if threads else tf.data.AUTOTUNE
    ds = tf.data.Dataset.from_tensor_slices(files)
    if training:
        ds = ds.shuffle(len(files), seed=seed, reshuffle_each_iteration=True)
    cycle = min(len(files), 16)
    ds = ds.interleave(
        tf.data.TFRecordDataset,
        cycle_length=cycle,
        block_length=1,
        num_parallel_calls=min(threads, cycle) if threads else tf.data.AUTOTUNE,
        deterministic=not training,
    )
    ds = ds.map(_parse, num_parallel_calls=parallel)
    images = sum(s["images"] for s in manifest["shards"] if s["split"] == split)
    if limit is not None and limit < images:
        ds, images = ds.take(limit), limit
    encoded = sum(s["size_bytes"] for s in manifest["shards"] if s["split"] == split)
    decoded = images * image_size * image_size * channels  # uint8 pixels

    def prepare(e, label):
        return preprocess(
            e,
            label,
            image_size=image_size,
            channels=channels,
            training=training,
            style=style,
            label_offset=int(manifest.get("label_offset", 0)),
        )

    # Without random augmentation (evaluation, digits) the prepared images are the same every
    # epoch: a small set is decoded once and kept. Otherwise only the encoded bytes are kept.
    same_every_epoch = not training or style != "imagenet"
    keep_prepared = same_every_epoch and (
        cache if cache is not None else decoded <= CACHE_LIMIT_BYTES
    )
    if keep_prepared:
        ds = ds.map(prepare, num_parallel_calls=parallel, deterministic=not training).cache()
    elif cache if cache is not None else encoded <= CACHE_LIMIT_BYTES:
        ds = ds.cache()
    if repeat:
        ds = ds.repeat()
    if training:
        ds = ds.shuffle(min(images, 10_000), seed=seed, reshuffle_each_iteration=True)
    if not keep_prepared:
        ds = ds.map(prepare, num_parallel_calls=parallel, deterministic=not training)
    drop = training if drop_remainder is None else drop_remainder
    ds = ds.batch(batch_size, drop_remainder=drop)
    if passes:
        ds = ds.repeat()
    elif not repeat:  # Keras then knows an epoch's steps (no "ran out of data" warning each epoch)
        ds = ds.apply(
            tf.data.experimental.assert_cardinality(
                images // batch_size if drop else -(-images // batch_size)
            )
        )
    ds = ds.prefetch(
        2 if threads else tf.data.AUTOTUNE
    )  # the next batch ready while this one trains
    options = tf.data.Options()
    if threads:
        options.threading.private_threadpool_size = max(1, threads)
        options.autotune.enabled = False
    ds = ds.with_options(options)
    return ds


def numpy_batches(dataset) -> Iterator[tuple[Any, Any]]:
    """Plain NumPy (images, labels) batches, for a training loop on JAX or torch without Keras."""
    yield from dataset.as_numpy_iterator()
