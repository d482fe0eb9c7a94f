"""What a trial feeds `model.fit` and `model.evaluate`: in-memory arrays for synthetic data (an
.npz), the tf.data pipeline or the DALI one for sharded data (a staged folder; `choose_feed`).
Either way, the sample counts of a pass are known up front, so the trial reports exactly how
many samples it trained and evaluated.
Training drops each epoch's last partial batch (see aiperf/data/pipeline.py), so a pass trains
(images // batch) * batch samples.

On the TensorFlow backend the arrays go to Keras as a tf.data pipeline of our own rather than as
NumPy arrays, for one reason: the pipeline Keras builds from arrays runs tf.data's autotuner, and on
a small VM the cores then sat idle a third to half of the time (how the autotuner causes it was not
isolated; turning it off is what removes it; docs/performance.md gives the figures). Nothing in an
in-memory batch needs tuning, so nothing is lost where the autotuner is harmless. The other
backends take the arrays as they are (Keras iterates them in NumPy, without tf.data)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from aiperf.data.pipeline import BatchShape


@dataclass(frozen=True)
class Feed:
    train: dict[str, Any]  # keyword arguments for model.fit (one pass over the training data)
    # Keyword arguments for one model.fit over all a trial's epochs (give it `epochs`): each epoch
    # is one pass, and the training iterator (tf.data's threads, shuffle and prefetch) lives across
    # epochs instead of being rebuilt for each.
    epochs: dict[str, Any]
    val: dict[str, Any]  # keyword arguments for model.evaluate
    train_samples: int
    val_samples: int
    # The batches are uint8 pixels (staged shards), to be scaled on the device by the model's
    # first layer (aiperf.data.normalise.on_device), not model inputs (synthetic float arrays).
    pixels: bool = False
    # Which feed this is, recorded with the run as data.feed (aiperf.train.feedrate): "tf.data", or
    # "arrays" for in-memory NumPy arrays that Keras slices itself (synthetic data off TensorFlow).
    kind: str = "tf.data"
    # The devices the training batches are decoded for, one a pipeline (DALI on a trial's devices:
    # aiperf.data.dali.trial_devices); empty where one pipeline on the host feeds every device
    # (tf.data, DALI off the accelerators) or Keras slices arrays.
    placement: tuple[str, ...] = ()


def open_feed(
    data_path: str,
    *,
    batch_size: int,
    input_shape: tuple[int, int, int] | list[int],
    seed: int,
    threads: int | None = None,
    feed: str = "auto",
    devices: int = 1,
) -> Feed:
    """What a trial feeds Keras from the staged data at `data_path`. `feed` is the run's data.feed
    ("auto", "tf.data" or "dali": `choose_feed`); in-memory synthetic data has no feed to choose.
    A trial data-parallel over `devices` off TensorFlow evaluates the largest multiple of
    `devices` validation images (`evaluated`): Keras' DataParallel splits every batch evenly over
    the devices, so a last batch of another size cannot run."""
    if not Path(data_path).is_dir():
        return _array_feed(data_path, batch_size, seed, devices)
    from aiperf.data.manifest import read_manifest
    from aiperf.data.pipeline import BatchShape
    from aiperf.data.placement import local_copy

    kind = choose_feed(feed)

    data_path = local_copy(data_path)  # node-local shards, when the staging asked for them
    manifest = read_manifest(data_path)
    images = int(manifest["train_samples"])
    if images < batch_size:
        raise ValueError(
            f"batch size {batch_size} is larger than the {images} training images of "
            f"{manifest['name']}; use a smaller search.space.batch_size"
        )
    height, _width, channels = (int(d) for d in input_shape)
    shape = BatchShape(batch_size=batch_size, image_size=height, channels=channels)
    val_images = evaluated(int(manifest["val_samples"]), devices)
    if kind == "dali":
        return _dali_feed(data_path, manifest, shape, seed, threads, val_images)
    return _tfdata_feed(data_path, images, shape, seed, threads, (val_images, kind))


def _array_feed(data_path: str, batch_size: int, seed: int, devices: int) -> Feed:
    """The feed of in-memory synthetic data (an .npz): a tf.data pipeline of our own on
    TensorFlow (the module's docstring says why), the arrays themselves for Keras elsewhere."""
    from aiperf.data.staging_npz import load_staged

    data = load_staged(data_path)
    # Whole batches only, as from shards: a ragged last batch of some sizes crashes oneDNN's
    # strided-convolution gradient on these CPUs (5, 29 or 31 samples, seen here).
    whole = len(data.y_train) // batch_size * batch_size
    if whole == 0:
        raise ValueError(
            f"batch size {batch_size} is larger than the {len(data.y_train)} training "
            "images; use a smaller search.space.batch_size"
        )
    x_train, y_train = data.x_train[:whole], data.y_train[:whole]
    if _backend() != "tensorflow":
        in_memory = {"x": x_train, "y": y_train, "batch_size": batch_size, "shuffle": True}
        val = evaluated(len(data.y_val), devices)
        return Feed(
            train=in_memory,
            epochs=in_memory,  # Keras slices the arrays itself: no pipeline to keep
            val={"x": data.x_val[:val], "y": data.y_val[:val], "batch_size": batch_size},
            train_samples=whole,
            val_samples=val,
            kind="arrays",
        )
    return Feed(
        train={
            "x": array_dataset(x_train, y_train, batch_size, shuffle_seed=seed),
            "shuffle": False,
        },
        epochs={
            "x": array_dataset(x_train, y_train, batch_size, shuffle_seed=seed, passes=True),
            "steps_per_epoch": whole // batch_size,
            "shuffle": False,
        },
        val={"x": array_dataset(data.x_val, data.y_val, batch_size)},
        train_samples=whole,
        val_samples=len(data.y_val),
    )


def _tfdata_feed(
    data_path: str,
    images: int,
    shape: BatchShape,
    seed: int,
    threads: int | None,
    validation: tuple[int, str],
) -> Feed:
    """The tf.data feed (aiperf.data.pipeline) of a staged folder of `images` training images;
    `validation` is the validation images evaluated (`evaluated`) and the feed's kind."""
    from aiperf.data.pipeline import ReadOptions, make_dataset

    val_images, kind = validation
    read = ReadOptions(threads=threads)
    batch_size = shape.batch_size
    # The dataset shuffles itself (shuffle=False only tells Keras not to warn that it cannot).
    return Feed(
        train={
            "x": make_dataset(data_path, "train", shape, training=True, seed=seed, read=read),
            "shuffle": False,
        },
        epochs={
            "x": make_dataset(
                data_path,
                "train",
                shape,
                training=True,
                seed=seed,
                read=ReadOptions(threads=threads, passes=True),
            ),
            "steps_per_epoch": images // batch_size,
            "shuffle": False,
        },
        val={
            "x": make_dataset(
                data_path,
                "validation",
                shape,
                training=False,
                read=ReadOptions(threads=threads, limit=val_images),
            )
        },
        train_samples=images // batch_size * batch_size,
        val_samples=val_images,
        pixels=True,
        kind=kind,
    )


def evaluated(images: int, devices: int) -> int:
    """The validation images a trial on `devices` evaluates: all of them on TensorFlow (its
    strategy takes a short last batch) or on one device; elsewhere the largest multiple of the
    devices, as Keras' DataParallel shards every batch evenly (at most devices - 1 left out)."""
    if devices <= 1 or _backend() == "tensorflow":
        return images
    return images // devices * devices


def _dali_feed(
    data_path: str,
    manifest: dict[str, Any],
    shape: BatchShape,
    seed: int,
    threads: int | None,
    val_images: int,
) -> Feed:
    """The DALI feed (aiperf.data.dali) of a staged folder: the same batches, counts and crops;
    `val_images` of the validation split (`evaluated`)."""
    from aiperf.data.dali import Decoding, dali_batches
    from aiperf.data.pipeline import split_files

    images = int(manifest["train_samples"])
    batch_size = shape.batch_size

    def batches(split: str, count: int, *, training: bool, passes: bool = False) -> Any:
        decoding = Decoding(
            image_size=shape.image_size,
            channels=shape.channels,
            training=training,
            style=str(manifest.get("preprocess", "imagenet")),
            label_offset=int(manifest.get("label_offset", 0)),
            seed=seed,
        )
        return dali_batches(
            split_files(manifest, data_path, split),
            decoding,
            images=count,
            batch=batch_size,
            threads=threads,
            passes=passes,
        )

    stream = batches("train", images, training=True, passes=True)
    return Feed(
        train={"x": batches("train", images, training=True)},
        epochs={
            "x": stream,
            "steps_per_epoch": images // batch_size,
            "shuffle": False,  # the reader shuffles (Keras would only warn that it cannot)
        },
        val={"x": batches("validation", val_images, training=False)},
        train_samples=images // batch_size * batch_size,
        val_samples=val_images,
        pixels=True,
        kind="dali",
        placement=tuple(stream.placement),
    )


def choose_feed(requested: str = "auto") -> str:
    """The feed that decodes staged shards on this worker, by the run's data.feed: "tf.data" (the
    host's cores: aiperf.data.pipeline) or "dali" (NVIDIA DALI: nvJPEG and the GPUs' JPEG engines,
    as MLPerf's ResNet submitters use; aiperf.data.dali). "auto" takes DALI where it is installed
    and the trial trains on GPUs (on the stand-in GPU node too, where DALI's CPU operators then
    decode), tf.data everywhere else. This is the one place the choice is
    made; what it chose is recorded with the run (runs.data_feed; the event log's run_resources).
    "dali" where DALI is not installed is a ValueError naming the fix."""
    from aiperf.data import dali

    if requested == "tf.data":
        return "tf.data"
    if requested == "dali":
        if not dali.installed():
            raise ValueError(
                "data.feed is dali, but NVIDIA DALI is not installed on this worker: "
                "pip install '.[cuda]' there, or set data.feed=tf.data"
            )
        return "dali"
    return "dali" if dali.installed() and _on_gpus() else "tf.data"


def _on_gpus() -> bool:
    """Whether this process's Keras computes on the node's accelerators (JAX is aiperf's backend for
    GPUs), as aiperf.config.gpu_backend.accelerator_platforms counts them."""
    if _backend() != "jax":
        return False
    import jax

    from aiperf.config.gpu_backend import accelerator_platforms

    return jax.default_backend() in accelerator_platforms()


def _backend() -> str:
    import keras

    return keras.backend.backend()


def array_dataset(
    x: Any, y: Any, batch_size: int, *, shuffle_seed: int | None = None, passes: bool = False
) -> Any:
    """Batches of in-memory arrays as a tf.data pipeline with tf.data's autotuner off (see the
    module's docstring). With `shuffle_seed`, every pass (every `fit` call) takes the samples in a
    new order, reproducible from the seed; the last batch may be partial (training arrays are cut
    to whole batches by `open_feed`). Only indices are shuffled; each batch is one gather.
    `passes`: pass after pass in one iterator, the next batch prepared ahead (a trial's one `fit`
    over all its epochs, aiperf.data.pipeline.make_dataset says why)."""
    import tensorflow as tf

    count = len(y)
    indices = tf.data.Dataset.range(count)
    if shuffle_seed is not None:
        indices = indices.shuffle(count, seed=shuffle_seed, reshuffle_each_iteration=True)
    arrays = tf.data.Dataset.from_tensors(
        (x, y)
    ).repeat()  # the arrays once, handed to every batch
    batches = tf.data.Dataset.zip((indices.batch(batch_size), arrays)).map(
        lambda picked, data: (tf.gather(data[0], picked), tf.gather(data[1], picked))
    )
    if passes:
        batches = batches.repeat().prefetch(2)
    return untuned(batches)


def untuned(batches: Any) -> Any:
    """A tf.data pipeline of in-memory data with tf.data's autotuner and default rewrites off (the
    module's docstring says why): nothing in such a batch needs tuning."""
    import tensorflow as tf

    options = tf.data.Options()
    options.autotune.enabled = False
    options.experimental_optimization.apply_default_optimizations = False
    return batches.with_options(options)
