"""Fingerprint of the machine under test: what shapes its speed, so runs on the same system
can be compared over time and runs on different systems are never mixed up."""

from __future__ import annotations

import hashlib
import json
import platform
import socket
from importlib import metadata
from typing import Any

import psutil

from aiperf.config.host import machine_cores, nvidia_smi


def cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as handle:
            for line in handle:
                if line.lower().startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def _gpus() -> dict[str, Any]:
    """GPUs as nvidia-smi lists them; none when the tool is absent (no framework import needed)."""
    out = nvidia_smi("--query-gpu=name,memory.total", "--format=csv,noheader")
    if out is None:
        return {"count": 0, "models": []}
    models = [line.strip() for line in out.splitlines() if line.strip()]
    return {"count": len(models), "models": models}


def package_version(package: str) -> str | None:
    """An installed distribution's version (its -cpu build's too), without importing it."""
    for name in (package, f"{package}-cpu"):
        try:
            return metadata.version(name)
        except metadata.PackageNotFoundError:
            continue
    return None


def keras_backend() -> str:
    """The backend Keras will use, read without importing Keras (and so TensorFlow)."""
    import os

    backend = os.environ.get("KERAS_BACKEND")
    if backend:
        return backend
    try:
        with open(os.path.expanduser("~/.keras/keras.json")) as handle:
            return json.load(handle).get("backend", "tensorflow")
    except (OSError, ValueError):
        return "tensorflow"


def fingerprint(backend: str | None = None) -> dict[str, Any]:
    """The systems row for this machine; `fingerprint` hashes the fields that define the system.
    `backend`: the Keras backend the run's workers use (train.backend; they are started with it),
    else the one Keras would pick in this process."""
    facts: dict[str, Any] = {
        "hostname": socket.gethostname(),
        "cpu_model": cpu_model(),
        "cpu_cores": machine_cores(),
        "memory_bytes": int(psutil.virtual_memory().total),
        "gpus": _gpus(),
        "platform": platform.platform(),
        "python_version": platform.python_version(),
        "tensorflow_version": package_version("tensorflow"),
        "keras_version": package_version("keras") or "unknown",
        "keras_backend": backend or keras_backend(),
    }
    defining = {
        k: facts[k]
        for k in (
            "hostname",
            "cpu_model",
            "cpu_cores",
            "memory_bytes",
            "gpus",
            "python_version",
            "tensorflow_version",
            "keras_version",
            "keras_backend",
        )
    }
    facts["fingerprint"] = hashlib.sha256(
        json.dumps(defining, sort_keys=True).encode()
    ).hexdigest()
    return facts
