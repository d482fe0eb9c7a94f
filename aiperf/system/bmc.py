"""A node's power at its supplies, read from its baseboard management controller over IPMI.

A BMC answers over the network (IPMI v2.0, `lanplus`) with the node's input power in watts, either
as the DCMI power reading most server BMCs serve (`ipmitool dcmi power reading`) or as one of its
sensors (`sensor reading NAME`, for BMCs without DCMI, such as OpenIPMI's simulator). aiperf reads it
with ipmitool, the field's tool for it, on the node the BMC belongs to, once a second while the
window runs (aiperf.system.power integrates the watts into joules).

The password stays in the file `password_file` names (ipmitool's `-f`): it is never on a command
line (which `ps` shows), in an environment variable, in the records or in a log. The file must be
readable by the workers' user on every node, as a batch job's other files are.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from dataclasses import dataclass

TIMEOUT_S = 10.0
_DCMI = re.compile(r"Instantaneous power reading:\s*([0-9.]+)\s*Watts", re.IGNORECASE)


class BmcError(Exception):
    """The BMC did not give a power reading (unreachable, refused, no such sensor)."""


@dataclass(frozen=True)
class Bmc:
    """Where a node's BMC answers and how its power is read: `reading` is "dcmi" or
    "sensor:NAME"."""

    host: str
    user: str
    password_file: str
    port: int = 623
    reading: str = "dcmi"
    cipher_suite: int = (
        3  # lanplus with HMAC-SHA1 and AES-CBC-128, which every IPMI 2.0 BMC serves
    )

    def command(self) -> list[str]:
        base = [
            "ipmitool", "-I", "lanplus", "-C", str(self.cipher_suite),
            "-H", self.host, "-p", str(self.port), "-U", self.user, "-f", self.password_file,
            "-N", "2", "-R", "2",  # a BMC that stopped answering fails in seconds, not a minute
        ]  # fmt: skip
        if self.reading.startswith("sensor:"):
            return [*base, "sensor", "reading", self.reading.removeprefix("sensor:"), "-c"]
        return [*base, "dcmi", "power", "reading"]

    def watts(self) -> float:
        """The node's input power now, in watts; BmcError with ipmitool's own words if none."""
        if shutil.which("ipmitool") is None:
            raise BmcError("ipmitool is not installed (apt-get install ipmitool)")
        try:
            done = subprocess.run(
                self.command(), capture_output=True, text=True, timeout=TIMEOUT_S, check=False
            )
        except subprocess.TimeoutExpired:
            raise BmcError(f"{self.host}:{self.port} did not answer in {TIMEOUT_S:g} s") from None
        if done.returncode != 0:
            said = (done.stderr or done.stdout).strip().splitlines()
            raise BmcError(f"{self.host}:{self.port}: {said[-1] if said else 'no reading'}")
        return parse(done.stdout, self.reading)


def parse(output: str, reading: str) -> float:
    """The watts in ipmitool's answer: "NAME,123" for a sensor (-c), the DCMI reading's line."""
    if reading.startswith("sensor:"):
        fields = output.strip().split(",")
        if len(fields) >= 2:
            try:
                return float(fields[1])
            except ValueError:
                pass
        raise BmcError(
            f"sensor {reading.removeprefix('sensor:')} gave no number ({output.strip()!r})"
        )
    found = _DCMI.search(output)
    if found is None:
        raise BmcError(f"no DCMI power reading in ipmitool's answer ({output.strip()[:80]!r})")
    return float(found.group(1))
