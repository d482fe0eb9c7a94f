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

from collections.abc import Callable, Iterator
from dataclasses import dataclass
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


@dataclass(frozen=True)
class BatchShape:
    """What each batch holds: `batch_size` images of image_size x image_size x channels pixels."""

    batch_size: int
    image_size: int
    channels: int


@dataclass(frozen=True)
class ReadOptions:
    """How the pipeline goes through a split, beyond what it yields (see `make_dataset`)."""

    threads: int | None = None
    cache: bool | None = None
    repeat: bool = False
    drop_remainder: bool | None = None
    passes: bool = False
    limit: int | None = None


def make_dataset(
    path: str | Path,
    split: str,
    shape: BatchShape,
    *,
    training: bool,
    seed: int | None = None,
    style: str | None = None,
    read: ReadOptions | None = None,
):
    """Batches of (images, labels) from a staged folder's `train` or `validation` shards.

    `read.threads` caps the pipeline's own thread pool and sets its parallelism (a worker's cores,
    so concurrent trials on one node do not fight), with tf.data's autotuner off; None lets tf.data
    use and tune the machine. `read.repeat` is for benchmarks only: it mixes passes. `read.passes`
    repeats whole passes (each reshuffled, each its whole batches) in one iterator, for a trial's
    one `fit` over all its epochs: its epochs stay exact passes (steps_per_epoch = images //
    batch_size) while the iterator, its threads and the prefetch live across them (the next pass's
    first batch is prepared while this pass's last one trains). `read.limit`: the first this many
    images only (an evaluation whose batches must split evenly over a trial's devices:
    aiperf.data.feed). `read.cache` None caches what is small enough (CACHE_LIMIT_BYTES);
    `read.drop_remainder` None drops a training pass's last partial batch only."""
    read = read or ReadOptions()
    manifest = read_manifest(path)
    files = split_files(manifest, path, split)
    if not files:
        raise ValueError(f"{path} has no {split} shards")
    style = style or manifest.get("preprocess", "imagenet")
    shards = [s for s in manifest["shards"] if s["split"] == split]
    ds = _records(files, training, seed, read.threads)
    images = sum(s["images"] for s in shards)
    if read.limit is not None and read.limit < images:
        ds, images = ds.take(read.limit), read.limit
    prepare = _preparer(shape, training, style, int(manifest.get("label_offset", 0)))
    # Without random augmentation (evaluation, digits) the prepared images are the same every
    # epoch: a small set is decoded once and kept. Otherwise only the encoded bytes are kept.
    decoded = images * shape.image_size * shape.image_size * shape.channels  # uint8 pixels
    encoded = sum(s["size_bytes"] for s in shards)
    same_every_epoch = not training or style != "imagenet"
    keep_prepared = same_every_epoch and _cached(read, decoded)
    parallel = _parallel(read.threads)
    if keep_prepared:
        ds = ds.map(prepare, num_parallel_calls=parallel, deterministic=not training).cache()
    elif _cached(read, encoded):
        ds = ds.cache()
    if read.repeat:
        ds = ds.repeat()
    if training:
        ds = ds.shuffle(min(images, 10_000), seed=seed, reshuffle_each_iteration=True)
    if not keep_prepared:
        ds = ds.map(prepare, num_parallel_calls=parallel, deterministic=not training)
    return _batched(ds, images, shape.batch_size, training, read)


def _preparer(
    shape: BatchShape, training: bool, style: str, label_offset: int
) -> Callable[[Any, Any], Any]:
    """The map from a parsed record to a prepared example (`preprocess`) for this pipeline."""

    def prepare(e, label):
        return preprocess(
            e,
            label,
            image_size=shape.image_size,
            channels=shape.channels,
            training=training,
            style=style,
            label_offset=label_offset,
        )

    return prepare


def _parallel(threads: int | None) -> Any:
    """The parallelism of the pipeline's maps. A trial knows its worker's cores: its pipeline then
    runs at that parallelism, untuned. With tf.data's autotuner on, a small VM's cores sat idle and
    concurrent trials trained slower (see feed.py; docs/performance.md gives the figures)."""
    import tensorflow as tf

    return threads if threads else tf.data.AUTOTUNE


def _cached(read: ReadOptions, size_bytes: int) -> bool:
    """Whether data of this size is kept in memory after its first read: as `read.cache` says,
    or, when it says nothing, when it is small enough to read from disk once per trial."""
    return read.cache if read.cache is not None else size_bytes <= CACHE_LIMIT_BYTES


def _records(files: list[str], training: bool, seed: int | None, threads: int | None) -> Any:
    """The split's parsed (encoded image, label) records, read from up to 16 shards at once (a
    training pass reads its shards in a new order each pass, and its records as they come)."""
    import tensorflow as tf

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
    return ds.map(_parse, num_parallel_calls=_parallel(threads))


def _batched(ds: Any, images: int, batch_size: int, training: bool, read: ReadOptions) -> Any:
    """Prepared examples to batches: a training pass drops its last partial batch unless told
    otherwise; the next batch is made ready while this one trains; and a pipeline given threads
    runs on its own pool of that many, untuned."""
    import tensorflow as tf

    drop = training if read.drop_remainder is None else read.drop_remainder
    ds = ds.batch(batch_size, drop_remainder=drop)
    if read.passes:
        ds = ds.repeat()
    elif not read.repeat:  # Keras then knows an epoch's steps (no "ran out of data" warning)
        ds = ds.apply(
            tf.data.experimental.assert_cardinality(
                images // batch_size if drop else -(-images // batch_size)
            )
        )
    ds = ds.prefetch(
        2 if read.threads else tf.data.AUTOTUNE
    )  # the next batch ready while this one trains
    options = tf.data.Options()
    if read.threads:
        options.threading.private_threadpool_size = max(1, read.threads)
        options.autotune.enabled = False
    return ds.with_options(options)


def numpy_batches(dataset) -> Iterator[tuple[Any, Any]]:
    """Plain NumPy (images, labels) batches, for a training loop on JAX or torch without Keras."""
    yield from dataset.as_numpy_iterator()
