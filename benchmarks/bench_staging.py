"""Staging at ImageNet size: the first and the second staging of the same ImageNet-format shards.

A user's ImageNet (`data.kind: tfrecord`) is checked in place before a run: every shard read, its
records' CRCs and labels checked, every image decoded once. The second staging of the same shards
must read none of them (aiperf.data.scan_cache), so it costs a small fraction of the first.

This script makes `--images` JPEG images at `--size` px (stored at size / 0.875, as ImageNet's) in
shards of `--shard-images`, through aiperf's generated-imagenet staging in a process of its own,
copies the shards to a folder as a user's ImageNet holds them, waits out the scan cache's guard on
just-written files (aiperf.data.scan_cache.RACY_NS), then stages them twice in this process and
prints both times, the ratio, and whether TensorFlow entered this process; then the reading alone
(checksums, labels, image hashes: what a staged folder's shards get), twice.

Run: python benchmarks/bench_staging.py [--images 8192] [--size 224] [--shard-images 512]
     [--folder DIR]   (a folder kept from an earlier run is reused; its shards are not remade)
Exits 1 when the second staging takes a tenth of the first or more.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def make_shards(folder: Path, images: int, size: int, shard_images: int) -> None:
    """ImageNet-format shards (train and validation, 100 classes) in `folder`, made in a child
    process (TensorFlow encodes the JPEGs there, never here)."""
    script = textwrap.dedent(
        f"""
        from pathlib import Path
        from aiperf.config import DataConfig
        from aiperf.data.staging import stage
        c = DataConfig(kind="generated-imagenet", image_size={size}, classes=100,
                       train_samples={images - images // 10}, val_samples={images // 10},
                       shard_images={shard_images}, noise=1.0)
        m = stage(c, 0, Path({str(folder / ".generated")!r}))
        for s in m.shards:
            Path({str(folder)!r}, s["name"]).write_bytes(Path(m.path, s["file"]).read_bytes())
        """
    )
    subprocess.run([sys.executable, "-c", script], check=True)
    shutil.rmtree(folder / ".generated")


def read_alone(files: list[Path], out: Path) -> None:
    """The reading alone, as a staged folder's shards are read (staging_shards.scan_shards: no
    image decoded), twice: on every core, then from the scan cache."""
    from aiperf.data.staging_shards import no_progress, scan_shards

    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)
    entries = [
        {"name": p.name, "split": p.name.split("-")[0], "file": str(p)}
        for p in files
        if p.name.startswith(("train-", "validation-"))
    ]
    for which in ("first", "second"):
        began = time.perf_counter()
        scan_shards(out, entries, 100, 1, no_progress)
        print(f"reading alone, {which}: {time.perf_counter() - began:.2f} s")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--images", type=int, default=8192)
    parser.add_argument("--size", type=int, default=224)
    parser.add_argument("--shard-images", type=int, default=512)
    parser.add_argument("--folder", type=Path, default=None)
    args = parser.parse_args()

    from aiperf.config import DataConfig
    from aiperf.data.scan_cache import RACY_NS
    from aiperf.data.staging import stage
    from aiperf.data.staging_shards import node_cores

    folder = args.folder or Path(tempfile.mkdtemp(prefix="aiperf-bench-staging-"))
    shards = folder / "shards"
    if not any(shards.glob("train-*")):
        shards.mkdir(parents=True, exist_ok=True)
        began = time.perf_counter()
        make_shards(shards, args.images, args.size, args.shard_images)
        print(f"made the shards in {time.perf_counter() - began:.1f} s")
        time.sleep(RACY_NS / 1e9)  # a user's ImageNet was not written a second ago
    files = sorted(shards.iterdir())
    size = sum(p.stat().st_size for p in files)
    print(f"{len(files)} shards, {size / 2**20:.0f} MiB, {node_cores()} cores")
    out = folder / "staged"
    shutil.rmtree(out, ignore_errors=True)
    config = DataConfig(kind="tfrecord", source=str(shards), classes=100, image_size=args.size)
    times = []
    for which in ("first", "second"):
        began = time.perf_counter()
        manifest = stage(config, 0, out)
        times.append(time.perf_counter() - began)
        print(
            f"{which} staging: {times[-1]:.2f} s "
            f"({manifest.train_samples + manifest.val_samples} images, sha256 {manifest.sha256[:12]})"
        )
    ratio = times[1] / times[0]
    print(f"second / first: {ratio:.4f}")
    read_alone(files, folder / "scans")
    print(f"tensorflow imported in this process: {'tensorflow' in sys.modules}")
    sys.exit(0 if ratio < 0.1 else 1)


if __name__ == "__main__":
    main()
