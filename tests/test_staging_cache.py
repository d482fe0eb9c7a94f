"""Staging at ImageNet size: shards are read without TensorFlow (aiperf.data.shard_scan), on every
core, once: a second staging of unchanged shards reads none of them (aiperf.data.scan_cache), and
a shard changed since, even with its size and mtime put back, is read again and judged afresh."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

from aiperf.config import DataConfig
from aiperf.data.problems import DataError
from aiperf.data.scan_cache import CACHE_FILE, RACY_NS
from aiperf.data.staging import stage

DAY_NS = 86_400 * 10**9


def _shards(folder: Path, rng: np.random.Generator) -> Path:
    """Three small user shards in ImageNet's format (two train, one validation, 2 classes), their
    mtimes a day old as a user's copied ImageNet's are."""
    import tensorflow as tf

    from aiperf.data.tfrecord import example_bytes, write_shard

    folder.mkdir(parents=True)
    for name, count in (
        ("train-00000-of-00002", 6),
        ("train-00001-of-00002", 6),
        ("validation-00000-of-00001", 4),
    ):
        records = []
        for i in range(count):
            pixels = rng.integers(0, 255, size=(12, 12, 3), dtype=np.uint8)
            encoded = tf.io.encode_jpeg(pixels).numpy()
            records.append(
                example_bytes(encoded, 1 + i % 2, f"n{i % 2}", f"{i}.jpg", 12, 12, 3, "jpeg")
            )
        write_shard(folder / name, records)
    _age(*folder.iterdir())
    return folder


def _age(*paths: Path) -> None:
    for path in paths:
        st = path.stat()
        os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns - DAY_NS))


def _staging(config: DataConfig, out: Path) -> tuple[object, int]:
    """Stage; (the manifest, bytes of shards read to check them)."""
    seen: list[tuple[int, int, str]] = []
    manifest = stage(config, 0, out, on_progress=lambda d, t, w: seen.append((d, t, w)))
    return manifest, max(t for _d, t, w in seen if w == "checking shards")


def test_a_second_staging_reads_no_shard_and_a_changed_one_is_read_again(tmp_path):
    shards = _shards(tmp_path / "shards", np.random.default_rng(0))
    total = sum(p.stat().st_size for p in shards.iterdir())
    config = DataConfig(kind="tfrecord", source=str(shards), classes=2, image_size=12)
    first, read = _staging(config, tmp_path / "out")
    assert read == total and (first.train_samples, first.val_samples) == (12, 4)
    again, read = _staging(config, tmp_path / "out")
    assert read == 0, "a second staging of unchanged shards reads none of them"
    assert len(json.loads((Path(first.path) / CACHE_FILE).read_text())["shards"]) == 3
    assert again.sha256 == first.sha256 and again.shards == first.shards
    assert again.overlap == first.overlap and again.class_names == first.class_names

    # Another shard in one's place: read again, and the dataset's digest follows it.
    victim = shards / "train-00001-of-00002"
    victim.write_bytes((shards / "train-00000-of-00002").read_bytes())
    _age(victim)
    changed, read = _staging(config, tmp_path / "out")
    assert read == victim.stat().st_size
    assert changed.sha256 != first.sha256
    assert changed.overlap is not None and changed.overlap["overlaps"] == 0

    # One byte of an image changed in place, size and mtime put back: its ctime gives it away,
    # and its record's CRC fails in one line.
    st = victim.stat()
    data = bytearray(victim.read_bytes())
    data[len(data) // 2] ^= 0xFF
    victim.write_bytes(bytes(data))
    os.utime(victim, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert (victim.stat().st_size, victim.stat().st_mtime_ns) == (st.st_size, st.st_mtime_ns)
    with pytest.raises(DataError) as caught:
        stage(config, 0, tmp_path / "out")
    (problem,) = caught.value.problems
    assert re.fullmatch(
        r"train-00001-of-00002 is corrupt or truncated after record \d \(a record's "
        r"(data|length) fails its CRC\); re-copy it",
        problem,
    ), problem


def test_a_cache_that_does_not_parse_is_ignored_and_a_racy_shard_is_read_again(tmp_path, caplog):
    """The scan cache is never trusted blindly: one that does not parse is warned of and every
    shard read; a shard written within RACY_NS of its read is read again (its times may not yet
    show a write in the same tick), after which it is kept."""
    config = DataConfig(
        kind="generated-imagenet",
        image_size=8,
        classes=2,
        train_samples=16,
        val_samples=8,
        shard_images=8,
    )
    seen: list[tuple[int, int, str]] = []

    def reads() -> int:
        seen.clear()
        stage(config, 0, tmp_path, on_progress=lambda d, t, w: seen.append((d, t, w)))
        return max((t for _d, t, w in seen if w == "hashing images"), default=0)

    def read_after_write(ns: int) -> None:  # as if each shard was read `ns` after its write
        cache = json.loads((folder / CACHE_FILE).read_text())
        for entry in cache["shards"].values():
            entry["read_ns"] = entry["identity"]["mtime_ns"] + ns
        (folder / CACHE_FILE).write_text(json.dumps(cache))

    first = stage(config, 0, tmp_path)
    folder = Path(first.path)
    shards = len(first.shards)
    read_after_write(RACY_NS - 1)
    assert reads() == shards, "read just after their write: racy, read again"
    read_after_write(RACY_NS)
    assert reads() == 0

    (folder / CACHE_FILE).write_text('{"version": 1, "shards": [')
    with caplog.at_level("WARNING", logger="aiperf.data.scan_cache"):
        assert reads() == shards
    warned = [r.getMessage() for r in caplog.records if r.name == "aiperf.data.scan_cache"]
    assert len(warned) == 1 and "is not a scan cache" in warned[0]


def test_staging_user_shards_imports_no_tensorflow(tmp_path):
    """The process that stages (and, on a GPU node, the one beside it that holds the GPUs through
    JAX) never imports TensorFlow: shards are read without it, and the images' decode checks run
    in processes of their own."""
    shards = _shards(tmp_path / "shards", np.random.default_rng(1))
    script = textwrap.dedent(
        f"""
        import sys
        from aiperf.config import DataConfig
        from aiperf.data.staging import stage

        config = DataConfig(kind="tfrecord", source={str(shards)!r}, classes=2, image_size=12)
        manifest = stage(config, 0, {str(tmp_path / "out")!r})
        assert (manifest.train_samples, manifest.val_samples) == (12, 4), manifest
        loaded = sorted(m for m in sys.modules if m.split(".")[0] in ("tensorflow", "keras"))
        print("loaded:", loaded[:5])
        sys.exit(1 if loaded else 0)
        """
    )
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stdout + done.stderr[-3000:]


def test_examples_are_read_as_tensorflow_reads_them(tmp_path):
    """The Example reader without TensorFlow (aiperf.data.shard_scan) against TensorFlow's own
    protobuf: the three features, labels packed or not and negative, and what is no Example."""
    import tensorflow as tf

    from aiperf.data.shard_scan import example_features, masked_crc

    example = tf.train.Example()
    feature = example.features.feature
    feature["image/encoded"].bytes_list.value.append(b"\xff\xd8\xff" + bytes(300))
    feature["image/class/label"].int64_list.value.extend([-7, 3])
    feature["image/class/synset"].bytes_list.value.append(b"n01440764")
    feature["image/height"].int64_list.value.append(1 << 40)
    found = example_features(example.SerializeToString())
    assert bytes(found["image/encoded"]) == b"\xff\xd8\xff" + bytes(300)
    assert (found["image/class/label"], found["image/class/synset"]) == (-7, b"n01440764")

    del feature["image/class/label"]
    for bad in (example.SerializeToString(), b"\x0f\x00", b"\x0a\x05ab"):
        with pytest.raises(ValueError):
            example_features(bad)

    # The framing's masked CRC32C is TensorFlow's: a record it wrote checks here.
    path = tmp_path / "one"
    with tf.io.TFRecordWriter(str(path)) as writer:
        writer.write(b"some record")
    data = path.read_bytes()
    assert masked_crc(data[:8]) == int.from_bytes(data[8:12], "little")
    assert masked_crc(data[12:-4]) == int.from_bytes(data[-4:], "little")


def test_decode_checks_share_the_cores_rather_than_multiply_them(tmp_path, monkeypatch):
    """Each TensorFlow process (or thread, where processes cannot be) decodes on its share of the
    cores: a 64-core node checks ImageNet in 8 processes of 8 threads, not 64 of 64."""
    from aiperf.data import staging_shards
    from aiperf.data.staging_shards import on_every_core, plan_workers
    from aiperf.data.tfrecord import CheckTask

    imagenet = 140 << 30
    assert plan_workers(64, 1152, imagenet, tensorflow=True) == (8, 8)
    assert plan_workers(64, 1152, imagenet, tensorflow=False) == (64, 1)
    assert plan_workers(6, 2, 1 << 30, tensorflow=True) == (2, 3)
    assert plan_workers(4, 3, 10, tensorflow=True) == (1, 4)
    # Here TensorFlow is imported, so the checks run on threads: 4 tasks on 4 cores, 1 thread each.
    import tensorflow  # noqa: F401

    monkeypatch.setattr(staging_shards, "node_cores", lambda: 4)
    tasks = []
    for i in range(4):
        (tmp_path / f"s{i}").write_bytes(b"x")
        tasks.append(CheckTask(str(tmp_path / f"s{i}"), "train", 2, 1, str(tmp_path)))
    threads = sorted(on_every_core(lambda task: task.threads, tasks, tensorflow=True))
    assert threads == [1, 1, 1, 1]
