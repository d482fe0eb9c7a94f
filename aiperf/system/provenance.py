"""What ran: the prologue lines of a run's jobs, the aiperf-relevant environment of every worker,
and a digest of the aiperf code each worker imported, beside the submitting host's.

A closed result must come from aiperf's own trial code. A job prologue runs any shell line before
a worker starts (`export PYTHONPATH=/patched` is enough to load another trial.py that reports
anything), and workers a site started itself (cluster.kind scheduler) run whatever was installed
there. None of it is forbidden, since sites need module loads and their own launchers, but all of
it is recorded with the run (runs.provenance, the event log, the package), and a closed result
that had any of it is flagged for review (`review_reasons`): the digest is taken from the files of
the `aiperf` package the worker process actually imported, so a shadowing path shows as a
different digest, not as the same name.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Mapping
from functools import cache
from importlib import import_module
from pathlib import Path
from typing import Any

from aiperf.urls import safe_url

# The code whose digest is taken: the benchmark itself and its Prefect flows.
PACKAGES = ("aiperf", "aiperf_flows")
SUFFIXES = (".py", ".yaml", ".mako")
# Environment variables that change what a worker runs or how fast: aiperf's own, the frameworks',
# the math libraries', Python's import path and the dynamic loader's.
ENV_PREFIXES = (
    "AIPERF_",
    "KERAS_",
    "TF_",
    "XLA_",
    "JAX_",
    "CUDA_",
    "NCCL_",
    "NVIDIA_",
    "OMP_",
    "MKL_",
    "OPENBLAS_",
    "PYTHON",
    "LD_",
    "DASK_",
    "PREFECT_",
)
# Values never recorded, whatever their prefix (a Prefect auth string, an API key, a password).
SECRET_MARKERS = ("PASSWORD", "SECRET", "TOKEN", "AUTH", "KEY", "PASSFILE")
WITHHELD = "***"


def relevant_environment(environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """The variables of ENV_PREFIXES, in name order, secrets withheld: the whole value of a name
    that says it holds one, and the password of any URL (aiperf.urls.safe_url)."""
    environ = os.environ if environ is None else environ
    return {
        name: WITHHELD if any(m in name.upper() for m in SECRET_MARKERS) else _shown(value)
        for name, value in sorted(environ.items())
        if name.upper().startswith(ENV_PREFIXES)
    }


def _shown(value: str) -> str:
    return safe_url(value) if "://" in value else value


@cache
def code_digest() -> str:
    """sha256 over the path and content of every code file of the imported aiperf packages.
    Cached: a process imports its code once."""
    digest = hashlib.sha256()
    for name in PACKAGES:
        try:
            module = import_module(name)
        except ImportError:
            continue
        root = Path(module.__file__ or "").parent
        for path in sorted(p for p in root.rglob("*") if p.suffix in SUFFIXES and p.is_file()):
            if "__pycache__" in path.parts:
                continue
            digest.update(f"{name}/{path.relative_to(root).as_posix()}\0".encode())
            digest.update(hashlib.sha256(path.read_bytes()).digest())
    return digest.hexdigest()


def describe_process(dask_worker: Any = None) -> dict[str, Any]:
    """One worker's part (run on every worker by Client.run): its variables and its code."""
    from aiperf.cluster.environment import worker_label

    return {
        "worker": None if dask_worker is None else worker_label(str(dask_worker.name)),
        "env": relevant_environment(),
        "files": code_digest(),
    }


def run_provenance(
    prologue: list[str], scheduler: str, by_worker: Mapping[str, Mapping[str, Any]]
) -> dict[str, Any]:
    """What the run records: its jobs' prologue, how its workers were started (the cluster kind),
    the submitting host's code digest and each worker's part, by the worker's name."""
    return {
        "prologue": list(prologue),
        "scheduler": scheduler,
        "submit_files": code_digest(),
        "workers": {
            str(part.get("worker") or address): {"env": part["env"], "files": part["files"]}
            for address, part in sorted(by_worker.items())
        },
    }


def review_reasons(provenance: Mapping[str, Any] | None) -> list[str]:
    """Why a closed result needs a person to look at what ran (empty: nothing to review). Not a
    rule broken: a prologue may only load modules. A run recorded before provenance existed has
    none, and nothing is said of it."""
    if not provenance:
        return []
    reasons = []
    prologue = provenance.get("prologue") or []
    if prologue:
        reasons.append(f"job prologue ran before the workers: {'; '.join(prologue)}")
    if provenance.get("scheduler") == "scheduler":
        reasons.append("workers were started outside aiperf (cluster.kind scheduler)")
    submit = provenance.get("submit_files")
    differ = sorted(
        worker
        for worker, part in (provenance.get("workers") or {}).items()
        if part.get("files") != submit
    )
    if differ:
        reasons.append(
            f"aiperf's code on {len(differ)} worker(s) differs from the submitting host's: "
            f"{', '.join(differ[:5])}{' ...' if len(differ) > 5 else ''}"
        )
    return reasons
