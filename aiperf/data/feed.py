"""What a trial feeds `model.fit` and `model.evaluate`: NumPy arrays for synthetic data (an .npz),
the tf.data pipeline for sharded data (a staged folder). Either way, the sample counts of a pass
are known up front, so the trial reports exactly how many samples it trained and evaluated.
From shards, training drops each epoch's last partial batch (see aiperf/data/pipeline.py), so a
pass trains (images // batch) * batch samples."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any


@dataclass(frozen=True)
class Feed:
    train: dict[str, Any]  # keyword arguments for model.fit (one pass over the training data)
    val: dict[str, Any]  # keyword arguments for model.evaluate
    train_samples: int
    val_samples: int


def open_feed(data_path: str, *, batch_size: int, input_shape: tuple[int, int, int] | list[int],
              seed: int, threads: int | None = None) -> Feed:
    if not Path(data_path).is_dir():
        from aiperf.data.staging import load_staged

        data = load_staged(data_path)
        # Whole batches only, as from shards: a ragged last batch of some sizes crashes oneDNN's
        # strided-convolution gradient on these CPUs (5, 29 or 31 samples, seen here).
        whole = len(data.y_train) // batch_size * batch_size
        if whole == 0:
            raise ValueError(f"batch size {batch_size} is larger than the {len(data.y_train)} training "
                             "images; use a smaller search.space.batch_size")
        return Feed(train={"x": data.x_train[:whole], "y": data.y_train[:whole], "batch_size": batch_size,
                           "shuffle": True},
                    val={"x": data.x_val, "y": data.y_val, "batch_size": batch_size},
                    train_samples=whole, val_samples=len(data.y_val))
    from aiperf.data.manifest import read_manifest
    from aiperf.data.pipeline import make_dataset
    from aiperf.data.placement import local_copy

    data_path = local_copy(data_path)  # node-local shards, when the staging asked for them
    manifest = read_manifest(data_path)
    images = int(manifest["train_samples"])
    if images < batch_size:
        raise ValueError(f"batch size {batch_size} is larger than the {images} training images of "
                         f"{manifest['name']}; use a smaller search.space.batch_size")
    height, _width, channels = (int(d) for d in input_shape)
    common = {"batch_size": batch_size, "image_size": height, "channels": channels, "threads": threads}
    # The dataset shuffles itself (shuffle=False only tells Keras not to warn that it cannot).
    return Feed(train={"x": make_dataset(data_path, "train", training=True, seed=seed, **common), "shuffle": False},
                val={"x": make_dataset(data_path, "validation", training=False, **common)},
                train_samples=images // batch_size * batch_size, val_samples=int(manifest["val_samples"]))
