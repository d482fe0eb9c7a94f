"""Whether the data a run stages fits where it goes, asked before anything is written.

Staging writes generated data under `--out` (a synthetic .npz, or JPEG shards of ImageNet's shape)
and, with data.stage_to, copies every shard to each node's local disk. A disk too small for them
used to fill half-way, after the run was recorded and its workers started; here the bytes each
step will write are estimated from the settings alone and held to the free space first, so the
user gets one line naming the folder before anything is recorded (and the copy on each node is
checked there, exactly, by aiperf.data.placement before it is made).

Estimates err low (a compressed size is a guess), so a refusal means the data cannot fit; data
already staged by an earlier run is not written again and needs nothing.
"""

from __future__ import annotations

from pathlib import Path

from aiperf.config import DataConfig
from aiperf.errors import not_enough_space

FLOAT32_BYTES = 4
# JPEG at the generator's quality keeps its noisy images at about a quarter of their raw size; an
# eighth is the low bound used here, so an estimate never refuses data that would have fitted.
JPEG_LOW_RATIO = 8
# The crop's margin: generated images are stored at image_size / 0.875 (aiperf.data.generated).
STORED_SIDE = 1 / 0.875


def bytes_to_stage(config: DataConfig, seed: int, folder: Path) -> int:
    """The bytes staging `config` will write into `folder` (--out's data folder), low-estimated;
    0 where nothing is generated there or it was staged before."""
    from aiperf.data.staging_npz import settings_key

    samples = config.train_samples + config.val_samples
    side, channels = config.image_size, config.channels
    key = settings_key(config, seed)
    if config.kind == "synthetic":
        name = f"synthetic-{side}px-{config.classes}c-{key}.npz"
        if (folder / name).is_file():
            return 0
        return samples * side * side * channels * FLOAT32_BYTES
    if config.kind == "generated-imagenet":
        if (folder / f"generated-imagenet-{side}px-{config.classes}c-{key}").is_dir():
            return 0  # made (or partly made) before: only what is missing is made again
        stored = round(side * STORED_SIDE)
        return samples * stored * stored * channels // JPEG_LOW_RATIO
    return 0  # digits are small; a user's shards or folder are checked or converted in place


def check_space(config: DataConfig, seed: int, out: str) -> None:
    """A DiskFull, before anything is recorded, where the data to stage cannot fit under --out."""
    folder = Path(out).expanduser() / "data"
    needed = bytes_to_stage(config, seed, folder)
    if needed:
        problem = not_enough_space(out, needed, f"the {config.kind} data to stage", "--out")
        if problem is not None:
            raise problem
