"""aiperf.config.host is the one place nvidia-smi runs: every caller gets its output, or None where
it is missing, fails (no driver) or hangs past TIMEOUT_S, and no other module spawns it. A
stand-in nvidia-smi on PATH plays the GPU node (tests/nvidia_smi_samples.py)."""

from __future__ import annotations

import re
import time
from pathlib import Path

from nvidia_smi_samples import H100_NODE, calls, put_first_on_path, stand_in

from aiperf.config import host
from aiperf.system import fingerprint, hostfacts, nvidia_gpus
from aiperf.train import auto

ROOT = Path(__file__).resolve().parents[1]


def test_every_caller_reads_the_stand_in_through_the_one_probe(tmp_path, monkeypatch):
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    folder = stand_in(tmp_path / "bin", H100_NODE)
    put_first_on_path(monkeypatch, folder)
    assert host.nvidia_smi("-L") == H100_NODE["list"] + "\n"
    assert host.visible_gpus() == 8
    assert len(nvidia_gpus.describe()["gpus"]) == 8
    facts = auto.device_facts(accelerated=True)
    assert facts.gpus == 8 and facts.memory_bytes and facts.compute_capability
    # The stand-in answers no clock or fingerprint query (exit 2, as nvidia-smi does for a field it
    # lacks): those callers read none, through the same probe.
    assert hostfacts.gpu_facts() == [] and fingerprint._gpus()["count"] == 0
    assert f"--query-gpu={hostfacts.GPU_QUERY} --format=csv,noheader,nounits" in calls(folder)
    assert "--query-gpu=name,memory.total --format=csv,noheader" in calls(folder)


def test_a_failing_or_missing_nvidia_smi_reads_as_none(tmp_path, monkeypatch):
    put_first_on_path(monkeypatch, stand_in(tmp_path / "failing", fail=True))
    assert host.nvidia_smi("-L") is None and host.visible_gpus() == 0
    assert auto.device_facts(accelerated=True).gpus == 0
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    assert host.nvidia_smi() is None


def test_a_hung_nvidia_smi_is_given_up_after_the_timeout(tmp_path, monkeypatch):
    folder = tmp_path / "hung"
    folder.mkdir()
    script = folder / "nvidia-smi"
    script.write_text("#!/bin/sh\nexec sleep 60\n")
    script.chmod(0o755)
    put_first_on_path(monkeypatch, folder)
    monkeypatch.setattr(host, "TIMEOUT_S", 0.5)
    started = time.monotonic()
    assert host.nvidia_smi("-L") is None
    assert time.monotonic() - started < 30, "the call was not given up"


def test_no_module_but_the_probe_spawns_nvidia_smi():
    """ "nvidia-smi" as a program to run (a quoted word in a command list) appears in host.py only."""
    spawning = re.compile(r"""\[\s*["']nvidia-smi["']""")
    found = [
        str(path.relative_to(ROOT))
        for path in sorted((ROOT / "aiperf").rglob("*.py"))
        if spawning.search(path.read_text())
    ]
    assert found == ["aiperf/config/host.py"]
