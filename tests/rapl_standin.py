"""A stand-in for a node's RAPL counters, for the tests of aiperf's energy path on machines that
have none (a virtual machine exposes no /sys/class/powercap): a powercap tree in a folder, whose
`energy_uj` files a thread advances at a stated power, wrapping at the zone's range as the kernel's
do. A run reads it through AIPERF_POWERCAP, the one seam; nothing else of the product changes.

Each write replaces the file whole (os.replace), as a read of sysfs never sees half a number.
"""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path

# (folder, zone name, watts): a package and its DRAM.
ZONES = (("intel-rapl:0", "package-0", 40.0), ("intel-rapl:0:0", "dram", 5.0))


class RaplStandIn:
    def __init__(self, root: Path, wraps_at_uj: int = 200_000_000, every_s: float = 0.05) -> None:
        self.root = root
        self.wraps_at_uj = wraps_at_uj
        self.every_s = every_s
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)
        self._started = time.time()
        for folder, name, _watts in ZONES:
            zone = root / folder
            zone.mkdir(parents=True, exist_ok=True)
            (zone / "name").write_text(name + "\n")
            (zone / "max_energy_range_uj").write_text(f"{wraps_at_uj}\n")
        self._write()

    @property
    def watts(self) -> float:
        return sum(watts for _folder, _name, watts in ZONES)

    def __enter__(self) -> RaplStandIn:
        self._thread.start()
        return self

    def __exit__(self, *_exc: object) -> None:
        self._done.set()
        self._thread.join()

    def _loop(self) -> None:
        while not self._done.wait(self.every_s):
            self._write()

    def _write(self) -> None:
        elapsed = time.time() - self._started
        for folder, _name, watts in ZONES:
            counter = int(watts * elapsed * 1e6) % (self.wraps_at_uj + 1)
            path = self.root / folder / "energy_uj"
            spare = path.with_suffix(".next")
            spare.write_text(f"{counter}\n")
            os.replace(spare, path)
