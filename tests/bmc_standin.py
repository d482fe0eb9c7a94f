"""A simulated BMC for the tests (infra/bmc/ctl.sh: OpenIPMI's ipmi_sim on 127.0.0.1), whose power
sensor reads what the test writes in its `watts` file."""

from __future__ import annotations

import socket
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

CTL = Path(__file__).resolve().parents[1] / "infra" / "bmc" / "ctl.sh"


@dataclass(frozen=True)
class SimulatedBmc:
    folder: Path
    port: int

    @property
    def password_file(self) -> Path:
        return self.folder / "password"

    def draw(self, watts: int) -> None:
        """The node's power from now on (the sensor reads in 10 W steps)."""
        (self.folder / "watts").write_text(f"{watts}\n")

    def settings_fields(self) -> dict[str, object]:
        """The cluster.bmc settings for this BMC."""
        return {
            "host": "127.0.0.1",
            "port": self.port,
            "user": "aiperf",
            "password_file": str(self.password_file),
            "reading": "sensor:Power",
        }

    def overrides(self) -> dict[str, object]:
        """The same, as a run's overrides."""
        return {f"cluster.bmc.{k}": v for k, v in self.settings_fields().items()}


def _free_udp_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@contextmanager
def simulated_bmc(folder: Path, watts: int) -> Iterator[SimulatedBmc]:
    folder.mkdir(parents=True, exist_ok=True)
    bmc = SimulatedBmc(folder, _free_udp_port())
    bmc.draw(watts)
    subprocess.run(["bash", str(CTL), "start", str(folder), str(bmc.port)], check=True)
    try:
        yield bmc
    finally:
        subprocess.run(["bash", str(CTL), "stop", str(folder)], check=True)
