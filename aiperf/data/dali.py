"""The DALI feed: staged TFRecord shards decoded, cropped and resized by NVIDIA DALI, for the nodes
whose host cores cannot keep their GPUs fed through tf.data (aiperf.data.pipeline).

Why: an 8-GPU node trains ResNet-50 at tens of thousands of images a second, and tf.data decodes
and resizes every JPEG on the host's cores (about 600 images/s a core measured for aiperf's own
training preprocess), so the GPUs would wait. DALI decodes on the GPUs (nvJPEG and the GPUs' JPEG
engines: its "mixed" decoder), as MLPerf's ResNet submitters do, and hands the batches over on the
device. Where no GPU is used (a CPU machine, or `data.feed: dali` forced for a test) the same
pipeline runs on DALI's CPU operators.

What it yields is what aiperf.data.pipeline.make_dataset yields, so a trial and its records stay as
they are: whole uint8 batches of (image_size, image_size, channels) and int32 labels from 0; the
same augmentation (a random crop of 8-100% of the area at aspect 3:4 to 4:3, resized, flipped
left-right half the time), the same evaluation crop (the centre 87.5% of the short side, resized;
DALI resizes the short side to image_size / 0.875 and crops the centre, the same window), whole
training batches, and every validation image once a pass, the last batch short. The pixels differ
slightly from tf.data's (another JPEG decoder and resampler), so the feed is recorded with the run
(runs.data_feed).

A training pass is `images // batch` steps of one stream that the reader reshuffles every epoch:
the trial counts exactly the samples it trained; which images fall in the part of a pass that is
not a whole batch is decided by the stream, not dropped at every pass's end as tf.data drops them.

On GPUs (Keras on JAX, which is what aiperf trains GPUs with: aiperf.config.gpu_backend) each of the
trial's devices gets its own pipeline on its own shard of the data, and DALI's JAX plugin puts the
devices' batches together as one global array sharded over the trial's devices, the layout Keras'
DataParallel trains on: the next batch is decoded on the devices while the step runs. Evaluation
uses one pipeline (on the first device when there are GPUs) and hands host arrays to Keras as the
tf.data feed does. The devices are the node's accelerators as aiperf.config.gpu_backend names them, so
on the stand-in GPU node (CPU devices standing for GPUs) a trial's feed is a pipeline per device
too, on DALI's CPU operators, each batch put on its device and the parts made one sharded array
(_HostShards): the pipelines, shards, per-device batch and the sharded layout Keras trains on run
in aiperf's own tests; the mixed decoder and DALI's JAX plugin need a GPU (benchmarks/
gpu_check.sh runs them where one is lent).

DALI reads TFRecord through an index (one "offset length" line per record); `index_files` writes it
once beside the shards, or in a temporary folder when the shards' folder is read-only.
"""

from __future__ import annotations

import importlib.util
import math
import os
import struct
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from aiperf.data.pipeline import CENTRE_FRACTION

INDEX_FOLDER = ".dali-index"  # beside the shards: DALI's TFRecord indexes
SHUFFLE_BUFFER = 4096  # the reader's shuffle buffer (images), at most the split's size
_HEADER = struct.Struct(
    "<QI"
)  # a TFRecord: length (8 bytes), its CRC (4), data, the data's CRC (4)


def installed() -> bool:
    """Whether NVIDIA DALI can be imported in this Python (the `cuda` extra installs it)."""
    try:
        return importlib.util.find_spec("nvidia.dali") is not None
    except ModuleNotFoundError:  # no `nvidia` namespace at all
        return False


def record_index(shard: str | Path) -> str:
    """DALI's index of one TFRecord file: "offset length" of every record, one a line."""
    lines, offset = [], 0
    size = os.path.getsize(shard)
    with open(shard, "rb") as f:
        while offset < size:
            f.seek(offset)
            header = f.read(_HEADER.size)
            if len(header) < _HEADER.size:
                raise ValueError(f"{shard}: a record is cut short at byte {offset}")
            length, _ = _HEADER.unpack(header)
            record = _HEADER.size + length + 4
            lines.append(f"{offset} {record}\n")
            offset += record
    if offset != size:
        raise ValueError(f"{shard}: its last record runs past the end of the file")
    return "".join(lines)


def index_files(shards: list[str]) -> list[str]:
    """The index of every shard, made once: beside the shards (INDEX_FOLDER), or in a temporary
    folder when theirs cannot be written. Written through a temporary name, so a reader never sees
    half an index."""
    made = []
    for shard in shards:
        path = Path(shard)
        target = path.parent / INDEX_FOLDER / f"{path.name}.idx"
        if not target.is_file():
            try:
                target.parent.mkdir(exist_ok=True)
            except OSError:
                target = Path(tempfile.gettempdir()) / "aiperf-dali-index" / f"{path.name}.idx"
                target.parent.mkdir(parents=True, exist_ok=True)
            if not target.is_file():
                tmp = target.with_name(f".{target.name}.{os.getpid()}")
                tmp.write_text(record_index(shard))
                os.replace(tmp, target)
        made.append(str(target))
    return made


@dataclass(frozen=True)
class Decoding:
    """What every pipeline of one feed makes of a record: an image of image_size x image_size x
    channels pixels, by the training augmentation or the evaluation crop (`style` as
    aiperf.data.pipeline.preprocess takes it), and its label from 0 (the stored label less
    `label_offset`); `seed` seeds the reader's shuffle and the augmentation."""

    image_size: int
    channels: int
    training: bool
    style: str
    label_offset: int
    seed: int


def _pipeline(
    files: list[str],
    indexes: list[str],
    decoding: Decoding,
    *,
    batch: int,
    threads: int,
    device_id: int | None,
    shard: int = 0,
    shards: int = 1,
) -> Any:
    """One DALI pipeline over `files` (its `shard` of `shards`), built: images and labels, each a
    batch of `batch`. `device_id` None runs every operator on the CPU."""
    # DALI's operators are made at import time from its C++ registry; its stubs do not know them.
    import nvidia.dali.fn
    import nvidia.dali.tfrecord
    import nvidia.dali.types
    from nvidia.dali import pipeline_def

    fn: Any = nvidia.dali.fn
    types: Any = nvidia.dali.types
    tfrec: Any = nvidia.dali.tfrecord
    training = decoding.training

    @pipeline_def(
        batch_size=batch,
        num_threads=max(1, threads),
        device_id=device_id,  # type: ignore[arg-type]
        seed=decoding.seed,
    )
    def images_and_labels() -> tuple[Any, Any]:
        record: Any = fn.readers.tfrecord(
            path=files,
            index_path=indexes,
            features={
                "image/encoded": tfrec.FixedLenFeature((), tfrec.string, ""),
                "image/class/label": tfrec.FixedLenFeature([1], tfrec.int64, -1),
            },
            random_shuffle=training,
            initial_fill=SHUFFLE_BUFFER,
            pad_last_batch=not training,  # evaluation: every pass starts at its first image
            shard_id=shard,
            num_shards=shards,
            name="reader",
        )
        encoded, label = record["image/encoded"], record["image/class/label"]
        image = _image(encoded, decoding, "cpu" if device_id is None else "mixed")
        label = fn.reshape(fn.cast(label, dtype=types.INT32) - decoding.label_offset, shape=[])
        if device_id is not None:
            label = label.gpu()
        return image, label

    pipe = images_and_labels()
    pipe.build()
    return pipe


def _image(encoded: Any, decoding: Decoding, decoder: str) -> Any:
    """A pipeline's image operators: decoded on `decoder` ("cpu", or "mixed": nvJPEG on the GPU),
    then as aiperf.data.pipeline.preprocess prepares it (the same crops, resizes and flips)."""
    import nvidia.dali.fn
    import nvidia.dali.types

    fn: Any = nvidia.dali.fn
    types: Any = nvidia.dali.types
    size = decoding.image_size
    colour = types.GRAY if decoding.channels == 1 else types.RGB
    if decoding.style != "imagenet":  # the whole image, resized (digits: a crop changes the digit)
        image = fn.decoders.image(encoded, device=decoder, output_type=colour)
        return fn.resize(image, resize_x=size, resize_y=size)
    if decoding.training:
        image = fn.decoders.image_random_crop(
            encoded,
            device=decoder,
            output_type=colour,
            random_area=[0.08, 1.0],
            random_aspect_ratio=[3 / 4, 4 / 3],
            num_attempts=10,
        )
        image = fn.resize(image, resize_x=size, resize_y=size, antialias=False)
        return fn.flip(image, horizontal=fn.random.coin_flip())
    image = fn.decoders.image(encoded, device=decoder, output_type=colour)
    image = fn.resize(image, resize_shorter=size / CENTRE_FRACTION, antialias=False)
    return fn.crop(image, crop=(size, size))


def _host(outputs: Any) -> tuple[Any, Any]:
    """A pipeline's (images, labels) as NumPy arrays on the host."""
    images, labels = outputs
    if hasattr(images, "as_cpu"):
        images = images.as_cpu()
    if hasattr(labels, "as_cpu"):
        labels = labels.as_cpu()
    return images.as_array(), labels.as_array()


def trial_devices() -> list[Any]:
    """The JAX devices a trial's training batches are decoded for, one DALI pipeline each: its
    distribution's devices among the node's accelerators (aiperf.config.gpu_backend: the GPUs, or the
    stand-in node's CPU devices), or the first accelerator outside a distribution; [] when the
    backend computes on no accelerator (then one pipeline on DALI's CPU operators feeds the host).
    Whoever opens the feed inside the trial's distribution (a trial, aiperf.train.feedrate's
    measurement) gets the same devices, so the feed is measured as the trial gets it."""
    import keras

    if keras.backend.backend() != "jax":
        return []
    import jax

    from aiperf.config.gpu_backend import accelerator_platforms

    platforms = accelerator_platforms()
    accelerators = [d for d in jax.local_devices() if d.platform in platforms]
    distribution = keras.distribution.distribution()
    if not accelerators or distribution is None:
        return accelerators[:1]
    names = {str(name) for name in distribution.device_mesh.devices.flatten()}
    return [d for d in accelerators if device_name(d) in names] or accelerators[:1]


def device_name(device: Any) -> str:
    """A JAX device as Keras' distribution names it ("gpu:3"), as the trials' placement records."""
    return f"{device.platform}:{device.id}"


def _dali_device(device: Any) -> int | None:
    """The CUDA device a pipeline for this JAX device runs its GPU operators on; None for a
    device that is no GPU (the stand-in's CPU devices): DALI's CPU operators then decode."""
    return int(device.local_hardware_id) if device.platform == "gpu" else None


class _HostShards:
    """One DALI pipeline per device on DALI's CPU operators, each batch put on its device and the
    devices' batches made one global array sharded over them: the layout DALI's JAX plugin builds
    from GPU pipelines (which cannot take CPU pipelines: it reads their outputs through DLPack on
    the GPU). Where the devices are CPU devices standing in for GPUs, the trial's feed still has a
    pipeline per device, each its shard of the files at the per-device batch."""

    def __init__(self, pipes: list[Any], devices: list[Any], sharding: Any) -> None:
        self._pipes, self._devices, self._sharding = pipes, devices, sharding

    def __iter__(self) -> _HostShards:
        return self

    def __next__(self) -> dict[str, Any]:
        import jax

        outputs = [_host(pipe.run()) for pipe in self._pipes]
        batch = {}
        for slot, name in enumerate(("images", "labels")):
            parts = [
                jax.device_put(out[slot], d) for out, d in zip(outputs, self._devices, strict=True)
            ]
            shape = (sum(int(p.shape[0]) for p in parts), *parts[0].shape[1:])
            batch[name] = jax.make_array_from_single_device_arrays(shape, self._sharding, parts)
        return batch


def _batches_class() -> type:
    """DaliBatches, made on first use: its base class is Keras' PyDataset, which imports Keras."""
    import keras

    class DaliBatches(keras.utils.PyDataset):
        """DALI batches as Keras iterates them. `count` None: an endless stream (a trial's one
        `fit` over its epochs, `steps_per_epoch` a pass); a count: that many batches a pass, each
        pass from the pass's start, the last one cut to `images` in all."""

        def __init__(self, make: Any, count: int | None, images: int | None, on_device: bool):
            super().__init__(workers=1, use_multiprocessing=False)
            self._make, self._count, self._images = make, count, images
            self._on_device = on_device  # the source is DALI's JAX iterator, not a pipeline
            self._source: Any = None
            self._next = 0  # the index the source's next batch has in its pass

        @property
        def num_batches(self) -> int | None:
            return self._count

        def __getitem__(self, index: int) -> tuple[Any, Any]:
            if self._source is None or (self._count is not None and index != self._next):
                self._source = self._make()  # a pass begun afresh (an evaluation cut short)
                self._next = 0
            batch = self._take()
            self._next = index + 1
            if self._count is not None:
                self._next %= self._count
                if index == self._count - 1 and self._images is not None:
                    keep = self._images - index * len(batch[1])
                    batch = (batch[0][:keep], batch[1][:keep])
            return batch

        def _take(self) -> tuple[Any, Any]:
            if self._on_device:
                while True:
                    try:
                        out = next(self._source)
                        return out["images"], out["labels"]
                    except StopIteration:  # an epoch of the shards; the iterator resets itself
                        continue
            return _host(self._source.run())

    return DaliBatches


def dali_batches(
    files: list[str],
    decoding: Decoding,
    *,
    images: int,
    batch: int,
    threads: int | None,
    passes: bool = False,
) -> Any:
    """A Keras PyDataset of DALI batches from `files`: training, an endless reshuffled stream
    (`passes`) or one pass of `images // batch` whole batches; evaluation, every image once a pass
    (the last batch short)."""
    indexes = index_files(files)
    # Training batches stay on the trial's GPUs; evaluation's go to the host, as tf.data's do.
    devices = trial_devices()
    training = decoding.training
    if not training:
        devices = devices[:1]
    on_device = training and bool(devices)
    cores = threads or os.cpu_count() or 1

    def make() -> Any:
        if on_device:  # one pipeline per device, one global array a step, sharded over them
            return _per_device(files, indexes, devices, decoding, batch=batch, cores=cores)
        device_id = _dali_device(devices[0]) if devices else None
        return _pipeline(files, indexes, decoding, batch=batch, threads=cores, device_id=device_id)

    if training:
        count = None if passes else images // batch
        made = _batches_class()(make, count, None, on_device)
    else:
        made = _batches_class()(make, math.ceil(images / batch), images, False)
    # The devices its pipelines decode for, one a pipeline ([] : one pipeline feeding the host).
    made.placement = [device_name(d) for d in devices] if on_device else []
    return made


def _per_device(
    files: list[str],
    indexes: list[str],
    devices: list[Any],
    decoding: Decoding,
    *,
    batch: int,
    cores: int,
) -> Any:
    """A trial's training source on its devices: one pipeline per device, each its shard of the
    files at the per-device batch with its share of the cores, one global array a step sharded over
    the devices (DALI's JAX iterator on GPUs; _HostShards where the devices are not GPUs)."""
    import jax
    import numpy as np

    per_device = batch // len(devices)
    pipes = [
        _pipeline(
            files,
            indexes,
            decoding,
            batch=per_device,
            threads=max(1, cores // len(devices)),
            device_id=_dali_device(device),
            shard=i,
            shards=len(devices),
        )
        for i, device in enumerate(devices)
    ]
    mesh = jax.sharding.Mesh(np.array(devices), ("batch",))
    sharding = jax.sharding.NamedSharding(mesh, jax.sharding.PartitionSpec("batch"))
    if any(_dali_device(device) is None for device in devices):
        return _HostShards(pipes, devices, sharding)
    from nvidia.dali.plugin.jax import DALIGenericIterator

    return DALIGenericIterator(
        pipes,
        ["images", "labels"],
        reader_name="reader",
        auto_reset=True,
        sharding=sharding if len(devices) > 1 else None,
    )
