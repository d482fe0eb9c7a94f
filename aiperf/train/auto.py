"""The settings a profile leaves to the workers' devices: train.precision auto and
search.space.batch_per_gib, as AIPerf sets them per machine.

AIPerf trains in the fastest precision the accelerator offers and sizes each device's batch by its
memory. A profile asks for the same with `train.precision: auto` and `search.space.batch_per_gib`;
the run resolves both once, before its first trial, from what its workers report in their peak
probe (aiperf.train.peak, run on every worker before the timed window), and stores the resolved
values in its config, so trials, the recorded precision, the peak MFU is measured in, `aiperf
verify` and the division all see one precision and one list of batch sizes.

Which precisions a device may probe is decided from the device itself, never from its name:

- an NVIDIA GPU (nvidia-smi's compute capability, of the GPUs the worker trains on): bfloat16 from
  8.0 (Ampere and later), float16 from 7.0 (Volta, Turing), float32 always;
- a CPU (/proc/cpuinfo's flags): bfloat16 with AMX (amx_bf16) or AVX-512 BF16 (avx512_bf16),
  float32 always;
- anything else (another accelerator, a GPU whose capability the query leaves "[N/A]", a MIG
  instance): float32.

Which of them the run trains in is decided by the devices alone, so that the same machine resolves
the same precision every run (the precision enters the workload hash, so a coin toss would split one
machine's runs into two series); docs/rules.md ("Precision") states the rule. The first of
GPU_ORDER (mixed_bfloat16, mixed_float16, float32) that every worker's devices take:

- an NVIDIA GPU takes what its compute capability supports (above): bfloat16 from 8.0, float16
  from 7.0. bfloat16 and float16 run on the same tensor cores at the same rate, so their probes
  differ by the probe's noise alone and never decide;
- a CPU takes bfloat16 only with AMX (amx_bf16), whose matrix tiles are built for it; AVX-512 BF16
  alone gives a gain the probe cannot tell apart from a neighbour's load (1.2x to 2.8x float32 in
  three probes a minute apart on a shared 2-core EPYC, docs/rules.md), so such a CPU trains in
  float32;
- anything else: float32.

Only precisions every worker probed and the run's ruleset allows in the closed division can be
chosen; the probe then measures the chosen one's peak (MFU's divisor). The functions that decide
are pure (device facts and probed rates in, a setting out); `device_facts` alone reads the machine.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from aiperf.config import AUTO, BenchmarkConfig
from aiperf.config.host import (
    GPU_QUERY,
    ask_nvidia_smi,
    call_failed,
    device_files,
    driver_libraries,
    visible_devices,
)
from aiperf.rules import DEFAULT_RULESET, load_ruleset
from aiperf.train.attention import attention_settings

GIB = 2**30
# The order the probes run in (float32 first: MFU's divisor where nothing else is chosen).
PREFERENCE = ("float32", "mixed_bfloat16", "mixed_float16")
# The order a GPU run takes the precisions its devices support in: bfloat16 first (float32's range,
# no loss scaling), then float16 (loss-scaled), then float32.
GPU_ORDER = ("mixed_bfloat16", "mixed_float16", "float32")
# The CPU flag whose bfloat16 a run trains in (auto): AMX's tile units.
CPU_AMX_BF16 = "amx_bf16"
BF16_CAPABILITY = (8, 0)  # Ampere: bfloat16 tensor cores
FP16_CAPABILITY = (7, 0)  # Volta: float16 tensor cores
CPU_BF16_FLAGS = ("amx_bf16", "avx512_bf16")
CPUINFO = Path("/proc/cpuinfo")


@dataclass(frozen=True)
class DeviceFacts:
    """What decides one worker's candidate precisions and per-device batch. With GPUs: how many it
    trains on, and the smallest compute capability and memory among them (None where nvidia-smi
    does not say); on a CPU, the bfloat16 instructions it has. `unqueried`: the nvidia-smi call
    that failed on a worker whose framework computes on GPUs (the run refuses such a worker,
    aiperf.train.gpu_failures, rather than size its batch and precision as a CPU's)."""

    accelerator: bool
    gpus: int = 0
    compute_capability: tuple[int, int] | None = None
    memory_bytes: int | None = None
    cpu_bf16: tuple[str, ...] = ()
    unqueried: str | None = None

    def to_dict(self) -> dict[str, Any]:
        """As the peak record stores it (JSON)."""
        capability = self.compute_capability
        return {
            "accelerator": self.accelerator,
            "gpus": self.gpus,
            "compute_capability": None
            if capability is None
            else f"{capability[0]}.{capability[1]}",
            "memory_bytes": self.memory_bytes,
            "cpu_bf16": list(self.cpu_bf16),
            **({"unqueried": self.unqueried} if self.unqueried else {}),
        }

    @classmethod
    def from_dict(cls, facts: Mapping[str, Any]) -> DeviceFacts:
        return cls(
            accelerator=bool(facts.get("accelerator")),
            gpus=int(facts.get("gpus") or 0),
            compute_capability=parse_capability(facts.get("compute_capability")),
            memory_bytes=None if facts.get("memory_bytes") is None else int(facts["memory_bytes"]),
            cpu_bf16=tuple(facts.get("cpu_bf16") or ()),
            unqueried=facts.get("unqueried") or None,
        )


def parse_capability(text: Any) -> tuple[int, int] | None:
    """A compute capability as nvidia-smi writes it, "8.6", as (8, 6); anything else (None,
    "[N/A]") as None."""
    major, dot, minor = str(text).strip().partition(".")
    if not (dot and major.isdigit() and minor.isdigit()):
        return None
    return int(major), int(minor)


def parse_gpu_query(csv: str) -> dict[str, tuple[int | None, tuple[int, int] | None]]:
    """`--query-gpu=uuid,memory.total,compute_cap --format=csv,noheader,nounits` lines (memory in
    MiB) as {uuid: (memory in bytes, compute capability)}; a field a board leaves "[N/A]" is None."""
    gpus: dict[str, tuple[int | None, tuple[int, int] | None]] = {}
    for line in csv.splitlines():
        parts = [part.strip() for part in line.split(",")]
        if len(parts) != 3 or not parts[0]:
            continue
        uuid, memory, capability = parts
        size = int(memory) * 2**20 if memory.isdigit() else None
        gpus[uuid] = (size, parse_capability(capability))
    return gpus


def gpu_facts(query: str, listing: str, cuda_visible: str | None) -> DeviceFacts:
    """The facts of the GPUs a worker trains on: those CUDA shows it (`nvidia-smi -L` narrowed by
    CUDA_VISIBLE_DEVICES, as aiperf.config.host.visible_devices reads them), looked up in the query by
    UUID. A GPU the query does not describe (a MIG instance, a field "[N/A]") leaves the capability
    and the memory unknown: such a worker probes float32 only and keeps the listed batch sizes."""
    shown = visible_devices(listing, cuda_visible)
    described = parse_gpu_query(query)
    known = [described.get(uuid, (None, None)) for uuid in shown]
    memories = [memory for memory, _ in known]
    capabilities = [capability for _, capability in known]
    return DeviceFacts(
        accelerator=True,
        gpus=len(shown),
        compute_capability=(
            min(c for c in capabilities if c is not None)
            if shown and None not in capabilities
            else None
        ),
        memory_bytes=min(m for m in memories if m is not None)
        if shown and None not in memories
        else None,
    )


def cpu_bf16_flags(cpuinfo: str) -> tuple[str, ...]:
    """The bfloat16 instructions among the first processor's flags in /proc/cpuinfo's text."""
    for line in cpuinfo.splitlines():
        name, _, value = line.partition(":")
        if name.strip() == "flags":
            flags = set(value.split())
            return tuple(flag for flag in CPU_BF16_FLAGS if flag in flags)
    return ()


def device_facts(accelerated: bool) -> DeviceFacts:
    """This worker's facts. `accelerated`: its Keras backend computes on an accelerator
    (aiperf.train.peak.device); a node's GPUs that the framework does not use do not count. Where
    nvidia-smi cannot list or describe the NVIDIA GPUs the framework computes on (listed, or their
    device files or driver present: aiperf.config.host), the facts say which call failed
    (`unqueried`) rather than just leave the memory and capability unknown; another kind of
    accelerator (no NVIDIA driver) keeps float32 and the listed batch sizes."""
    if accelerated:
        listing, query = ask_nvidia_smi("-L"), ask_nvidia_smi(*GPU_QUERY)
        facts = gpu_facts(
            query.output or "", listing.output or "", os.environ.get("CUDA_VISIBLE_DEVICES")
        )
        failed = None
        if listing.output is None and (device_files() or driver_libraries()):
            failed = call_failed(("-L",), listing)  # an NVIDIA node whose nvidia-smi fails
        elif listing.output is not None and query.output is None:
            failed = call_failed(GPU_QUERY, query)
        return replace(facts, unqueried=failed) if failed else facts
    try:
        cpuinfo = CPUINFO.read_text()
    except OSError:  # not Linux
        cpuinfo = ""
    return DeviceFacts(accelerator=False, cpu_bf16=cpu_bf16_flags(cpuinfo))


def supported_precisions(facts: DeviceFacts) -> tuple[str, ...]:
    """The precisions a device with these facts may probe, in PREFERENCE order."""
    supported = {"float32"}
    capability = facts.compute_capability
    if facts.accelerator and capability is not None:
        if capability >= BF16_CAPABILITY:
            supported.add("mixed_bfloat16")
        if capability >= FP16_CAPABILITY:
            supported.add("mixed_float16")
    if not facts.accelerator and facts.cpu_bf16:
        supported.add("mixed_bfloat16")
    return tuple(p for p in PREFERENCE if p in supported)


def allowed_precisions(config: BenchmarkConfig) -> tuple[str, ...]:
    """The precisions auto chooses among: those the run's ruleset allows in the closed division
    (a profile file's run names no ruleset: the default one's), in PREFERENCE order."""
    allowed = load_ruleset(config.ruleset or DEFAULT_RULESET).precisions
    return tuple(p for p in PREFERENCE if p in allowed)


def trained_precisions(facts: DeviceFacts) -> set[str]:
    """The precisions `train.precision: auto` may resolve to on a device with these facts: what a
    GPU supports; on a CPU, bfloat16 only with AMX (its probe may still run with AVX-512 BF16)."""
    if facts.accelerator:
        return set(supported_precisions(facts))
    return {"float32", "mixed_bfloat16"} if CPU_AMX_BF16 in facts.cpu_bf16 else {"float32"}


def resolve_precision(
    probes: Sequence[Mapping[str, float]],
    allowed: Sequence[str],
    facts: Sequence[DeviceFacts],
) -> str:
    """The run's precision from each worker's device facts and probed rates ({precision: FLOP/s},
    one each, in the same order): the first of GPU_ORDER that the ruleset allows, every worker
    probed, and every worker's devices take (`trained_precisions`). The rates never decide, so
    probe noise cannot change the choice. No probes (none ran, or the probe failed), or facts that
    do not match them: float32."""
    if not probes or len(facts) != len(probes):
        return "float32"
    taken = set.intersection(*(trained_precisions(f) for f in facts))
    return next(
        (
            p
            for p in GPU_ORDER
            if p in allowed and p in taken and all(p in rates for rates in probes)
        ),
        "float32",
    )


def smallest_gib(facts: Sequence[DeviceFacts]) -> int | None:
    """The smallest GPU memory among the workers in whole GiB, or None unless every worker trains on
    GPUs whose memory nvidia-smi reported (CPU workers keep the profile's batch sizes)."""
    if not facts or any(not f.accelerator or f.memory_bytes is None for f in facts):
        return None
    gib = min(f.memory_bytes or 0 for f in facts) // GIB
    return gib if gib >= 1 else None


def capped_gib(per_gib: Sequence[int], gib: int, cap: int | None) -> int:
    """The GiB count the batch is sized by: the GPUs' `gib`, or fewer where the largest multiplier
    times it would pass the per-device `cap` (search.space.batch_cap). Capping the GiB rather than
    each size keeps the sizes distinct and each a multiplier times one whole GiB count, as
    aiperf.results.division.sized_by_memory judges them."""
    if cap is None:
        return gib
    return max(1, min(gib, cap // max(per_gib)))


def batch_sizes(per_gib: Sequence[int], gib: int, cap: int | None = None) -> list[int]:
    """The per-device batch sizes for GPUs of `gib` GiB: each multiplier times it (capped by
    `capped_gib`), ascending."""
    sized = capped_gib(per_gib, gib, cap)
    return sorted({multiplier * sized for multiplier in per_gib})


def resolved_settings(
    config: BenchmarkConfig, peaks: Sequence[Mapping[str, Any]] | None
) -> dict[str, Any]:
    """The dotted settings the run stores in place of auto: train.precision (when auto) and
    search.space.batch_size (when batch_per_gib is set and every worker has a GPU), from the
    workers' peak records (aiperf.train.worker.peak_on_worker: "probes" and "device_facts"), or
    from none (a simulated run, a failed probe: float32 and the listed batch sizes)."""
    peaks = list(peaks or ())
    settings: dict[str, Any] = {}
    facts = [DeviceFacts.from_dict(peak.get("device_facts") or {}) for peak in peaks]
    if config.train.precision == AUTO:
        probes = [
            {p: float(probe["flops"]) for p, probe in (peak.get("probes") or {}).items()}
            for peak in peaks
        ]
        settings["train.precision"] = resolve_precision(probes, allowed_precisions(config), facts)
    precision = settings.get("train.precision", config.train.precision)
    settings.update(attention_settings(config, peaks, precision))  # aiperf.train.attention
    per_gib = config.search.space.batch_per_gib
    if per_gib:
        gib = smallest_gib(facts)
        if gib is not None:
            cap = config.search.space.batch_cap
            settings["search.space.batch_size"] = batch_sizes(per_gib, gib, cap)
    return settings
