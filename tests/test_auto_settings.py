"""What a profile leaves to the devices: train.precision auto and search.space.batch_per_gib.

The deciding functions are pure (device facts and probed rates in, a setting out) and are tested on
nvidia-smi's sample outputs for GPUs no test machine has; the probe itself runs for real on this
machine's CPU, once alone and once through a real Dask worker, store and event log, as a run
resolves its settings before its first trial. Nothing trains.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest
from nvidia_smi_samples import H100_NODE, L40S_NODE, put_first_on_path

from aiperf.config import BenchmarkConfig, load_config
from aiperf.errors import UserError
from aiperf.lifecycle.recorder import RunRecorder
from aiperf.results import record_checks, verify
from aiperf.results.division import (
    ADDED_LATER,
    CLOSED,
    IMPLEMENTATION,
    OPEN,
    batch_problem,
    classify,
    config_hash,
    flatten,
)
from aiperf.results.mllog import read_run
from aiperf.results.score import EpochWork, compute_score
from aiperf.rules import load_ruleset
from aiperf.store import RunWork, Store
from aiperf.train.auto import (
    DeviceFacts,
    batch_sizes,
    cpu_bf16_flags,
    device_facts,
    gpu_facts,
    resolve_precision,
    resolved_settings,
    smallest_gib,
    supported_precisions,
)
from aiperf.train.peak import compute_dtype

F32, BF16, F16 = "float32", "mixed_bfloat16", "mixed_float16"
MIB = 2**20


def _uuids(listing: str) -> list[str]:
    return [line.rsplit("(UUID: ", 1)[1].rstrip(")") for line in listing.splitlines()]


# What `nvidia-smi --query-gpu=uuid,memory.total,compute_cap --format=csv,noheader,nounits` prints
# on the two sample nodes (the memory as their name,memory.total,driver_version query has it).
H100_FACTS = "\n".join(f"{uuid}, 81559, 9.0" for uuid in _uuids(H100_NODE["list"]))
L40S_FACTS = "\n".join(f"{uuid}, 46068, 8.9" for uuid in _uuids(L40S_NODE["list"]))


def gpu(capability: tuple[int, int] | None, memory_mib: int | None = 16160) -> DeviceFacts:
    return DeviceFacts(
        accelerator=True,
        gpus=1,
        compute_capability=capability,
        memory_bytes=None if memory_mib is None else memory_mib * MIB,
    )


def imagenet(**overrides) -> BenchmarkConfig:
    return load_config(
        "imagenet",
        workers=1,
        overrides={"data.source": "/data", **overrides},
        runs_here=False,
    )


def peak(worker: str, rates: dict[str, float], facts: DeviceFacts) -> dict:
    """A worker's peak record as peak_on_worker returns it with candidates."""
    return {
        "worker": worker,
        "flops": rates[F32],
        "dtype": "float32",
        "device": "GPU test" if facts.accelerator else "CPU test",
        "seconds": 0.2,
        "probes": {
            p: {"flops": r, "dtype": compute_dtype(p), "seconds": 0.2} for p, r in rates.items()
        },
        "device_facts": facts.to_dict(),
    }


# --- which precisions a device may probe --------------------------------------------------------


@pytest.mark.parametrize(
    ("capability", "expected"),
    [
        ((9, 0), (F32, BF16, F16)),  # H100
        ((8, 0), (F32, BF16, F16)),  # A100
        ((7, 5), (F32, F16)),  # T4
        ((7, 0), (F32, F16)),  # V100
        ((6, 0), (F32,)),  # P100
        (None, (F32,)),  # a driver that does not say, a MIG instance
    ],
)
def test_a_gpus_candidates_follow_its_compute_capability(capability, expected):
    assert supported_precisions(gpu(capability)) == expected
    assert DeviceFacts.from_dict(gpu(capability).to_dict()) == gpu(capability)


def test_a_cpus_candidates_follow_its_bf16_flags():
    sapphire = "processor\t: 0\nflags\t\t: fpu sse2 avx512f avx512_bf16 amx_bf16 amx_tile\n"
    skylake = "processor\t: 0\nflags\t\t: fpu sse2 avx2 avx512f avx512bw\n"
    assert cpu_bf16_flags(sapphire) == ("amx_bf16", "avx512_bf16")
    assert cpu_bf16_flags(skylake) == () and cpu_bf16_flags("") == ()
    with_bf16 = DeviceFacts(accelerator=False, cpu_bf16=cpu_bf16_flags(sapphire))
    assert supported_precisions(with_bf16) == (F32, BF16)
    assert supported_precisions(DeviceFacts(accelerator=False)) == (F32,)


def test_this_machines_cpu_is_read_from_its_cpuinfo():
    flags = next(
        line.split(":", 1)[1].split()
        for line in Path("/proc/cpuinfo").read_text().splitlines()
        if line.startswith("flags")
    )
    facts = device_facts(accelerated=False)
    assert not facts.accelerator and facts.memory_bytes is None
    assert set(facts.cpu_bf16) == {"amx_bf16", "avx512_bf16"} & set(flags)
    assert (BF16 in supported_precisions(facts)) == bool(facts.cpu_bf16)


# --- the GPUs a worker trains on, from nvidia-smi -------------------------------------------------


def test_gpu_facts_are_the_smallest_of_the_gpus_cuda_shows():
    every = gpu_facts(H100_FACTS, H100_NODE["list"], None)
    assert (every.gpus, every.compute_capability, every.memory_bytes) == (8, (9, 0), 81559 * MIB)
    pinned = gpu_facts(H100_FACTS, H100_NODE["list"], "3")
    assert pinned.gpus == 1 and pinned.memory_bytes == 81559 * MIB
    l40s = gpu_facts(L40S_FACTS, L40S_NODE["list"], "1")
    assert (l40s.compute_capability, l40s.memory_bytes) == ((8, 9), 46068 * MIB)
    # A V100 beside the L40S: the worker that sees both probes what both support.
    mixed = L40S_FACTS.replace("46068, 8.9", "16160, 7.0", 1)
    both = gpu_facts(mixed, L40S_NODE["list"], None)
    assert (both.compute_capability, both.memory_bytes) == ((7, 0), 16160 * MIB)
    assert supported_precisions(both) == (F32, F16)


def test_a_gpu_nvidia_smi_does_not_describe_leaves_float32_and_the_listed_batch():
    mig = "GPU 0: NVIDIA A100 (UUID: GPU-aaaa)\n  MIG 1g.10gb Device 0: (UUID: MIG-bbbb)"
    unknown = gpu_facts("GPU-aaaa, 40960, 8.0", mig, "MIG-bbbb")
    assert unknown.gpus == 1 and unknown.compute_capability is None
    assert unknown.memory_bytes is None and supported_precisions(unknown) == (F32,)
    assert smallest_gib([unknown]) is None
    na = gpu_facts("GPU-aaaa, [N/A], [N/A]", "GPU 0: NVIDIA X (UUID: GPU-aaaa)", None)
    assert (na.gpus, na.compute_capability, na.memory_bytes) == (1, None, None)


_STAND_IN = """#!/bin/bash
here="${0%/*}"
if [[ -e "$here/fail" ]]; then echo "NVIDIA-SMI has failed"; exit 1; fi
case "$*" in
  -L) f=list ;;
  "--query-gpu=uuid,memory.total,compute_cap --format=csv,noheader,nounits") f=facts ;;
  *) echo "Invalid combination of input arguments."; exit 2 ;;
esac
printf '%s\\n' "$(<"$here/$f.txt")"
"""


def test_a_worker_reads_its_gpus_from_nvidia_smi_on_its_path(tmp_path, monkeypatch):
    (tmp_path / "list.txt").write_text(L40S_NODE["list"])
    (tmp_path / "facts.txt").write_text(L40S_FACTS)
    script = tmp_path / "nvidia-smi"
    script.write_text(_STAND_IN)
    script.chmod(0o755)
    put_first_on_path(monkeypatch, tmp_path)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0")
    facts = device_facts(accelerated=True)
    assert (facts.gpus, facts.compute_capability, facts.memory_bytes) == (1, (8, 9), 46068 * MIB)
    (tmp_path / "fail").touch()  # no driver loaded
    failed = device_facts(accelerated=True)
    assert failed.accelerator and supported_precisions(failed) == (F32,)


# --- one precision for the run -------------------------------------------------------------------


def test_on_gpus_the_precision_is_what_every_workers_devices_support():
    h100 = gpu((9, 0), 81559)
    probes = [{F32: 60e12, BF16: 690e12, F16: 700e12}, {F32: 58e12, BF16: 700e12, F16: 710e12}]
    assert resolve_precision(probes, (F32, BF16, F16), [h100, h100]) == BF16, "not the faster f16"
    t4 = gpu((7, 5), 15360)
    assert resolve_precision(probes[:1], (F32, BF16, F16), [t4]) == F16
    assert resolve_precision(probes[:1], (F32,), [h100]) == F32, "what the ruleset allows"


def test_on_cpus_bfloat16_needs_amx_whatever_the_probe_measured():
    amx = DeviceFacts(accelerator=False, cpu_bf16=("amx_bf16", "avx512_bf16"))
    avx512 = DeviceFacts(accelerator=False, cpu_bf16=("avx512_bf16",))
    twice = [{F32: 1e11, BF16: 2e11}]
    assert resolve_precision(twice, (F32, BF16), [amx]) == BF16
    assert resolve_precision(twice, (F32, BF16), [avx512]) == F32, "a gain probe noise can undo"
    assert resolve_precision(twice * 2, (F32, BF16), [amx, avx512]) == F32, "every worker's"


def test_only_closed_precisions_every_worker_probed_can_win():
    h100 = gpu((9, 0), 81559)
    fast_f16 = [{F32: 1e12, BF16: 2e12, F16: 9e12}]
    assert resolve_precision(fast_f16, load_ruleset("aiperf-rules-1.0").precisions, [h100]) == BF16
    assert resolve_precision(fast_f16, (F32, F16), [h100]) == F16
    v100_and_a100 = [{F32: 14e12, F16: 110e12}, {F32: 19e12, BF16: 300e12, F16: 300e12}]
    both = [gpu((7, 0)), gpu((8, 0))]
    assert resolve_precision(v100_and_a100, (F32, BF16, F16), both) == F16, "the V100: no bf16"
    failed = [{F32: 19e12, F16: 300e12}]  # its bfloat16 probe failed
    assert resolve_precision(failed, (F32, BF16, F16), [h100]) == F16
    assert resolve_precision([], (F32, BF16), []) == F32, "no probe: float32"


# --- the per-device batch ------------------------------------------------------------------------


def test_the_batch_is_12_to_14_times_the_smallest_gpus_whole_gib():
    t4, h100, l40s = gpu((7, 5), 15360), gpu((9, 0), 81559), gpu((8, 9), 46068)
    assert batch_sizes([12, 13, 14], smallest_gib([t4])) == [180, 195, 210]
    assert smallest_gib([h100]) == 79 and smallest_gib([h100, l40s]) == 44
    assert smallest_gib([h100, DeviceFacts(accelerator=False)]) is None, "a CPU worker: listed"
    assert smallest_gib([]) is None


def test_imagenet_resolves_for_gpus_and_keeps_its_list_on_cpus():
    config = imagenet()
    assert (config.train.precision, config.search.space.batch_per_gib) == ("auto", [12, 13, 14])
    v100 = [peak(f"w{i}", {F32: 14e12, F16: 110e12}, gpu((7, 0), 16160)) for i in range(2)]
    assert resolved_settings(config, v100) == {
        "train.precision": F16,
        "search.space.batch_size": [180, 195, 210],
    }
    amx = DeviceFacts(accelerator=False, cpu_bf16=("amx_bf16",))
    cpu = [peak("w0", {F32: 1e11, BF16: 2e11}, amx)]
    assert resolved_settings(config, cpu) == {"train.precision": BF16}
    avx512 = DeviceFacts(accelerator=False, cpu_bf16=("avx512_bf16",))
    cpu = [peak("w0", {F32: 1e11, BF16: 2e11}, avx512)]
    assert resolved_settings(config, cpu) == {"train.precision": F32}
    assert resolved_settings(config, None) == {"train.precision": F32}, "simulated, or no probe"
    given = imagenet(**{"train.precision": "float32", "search.space.batch_per_gib": None})
    assert resolved_settings(given, v100) == {}


# --- the division and verify ---------------------------------------------------------------------


def settle(config: BenchmarkConfig, precision: str, batch: list[int]) -> BenchmarkConfig:
    raw = config.model_dump()
    raw["train"]["precision"], raw["search"]["space"]["batch_size"] = precision, batch
    return BenchmarkConfig.model_validate(raw)


def test_auto_and_the_resolved_batch_are_closed():
    packaged = classify(imagenet())
    assert (packaged.name, packaged.deviations) == (CLOSED, ())
    on_t4 = classify(settle(imagenet(), F16, [180, 195, 210]))
    on_cpu = classify(settle(imagenet(), BF16, [192, 208, 224]))
    assert (on_t4.name, on_t4.deviations, on_cpu.name) == (CLOSED, (), CLOSED)
    assert on_t4.config_hash != on_cpu.config_hash, "another batch and precision: another workload"
    chosen = classify(settle(imagenet(), F16, [181, 195, 210]))
    assert chosen.name == OPEN
    assert chosen.deviations == ("search.space.batch_size: [192, 208, 224] -> [181, 195, 210]",)
    unruled = classify(
        settle(imagenet(**{"search.space.batch_per_gib": None}), F32, [180, 195, 210])
    )
    assert unruled.name == OPEN and len(unruled.deviations) == 2


def test_a_profile_without_batch_per_gib_keeps_its_workload_hash():
    """Runs recorded before the setting existed must keep their hash (verify recomputes it)."""
    config = load_config("quick", workers=1)
    ruleset = load_ruleset(config.ruleset)
    assert ADDED_LATER["search.space.batch_per_gib"] is None
    before = {
        k: v
        for k, v in flatten(config.model_dump(mode="json")).items()
        if k != "search.space.batch_per_gib"
        and not ruleset.is_settable(k)
        and k not in IMPLEMENTATION
        and not k.startswith("system.")  # the machine's name and notes joined later, never hashed
        and not (k in ADDED_LATER and v == ADDED_LATER[k])
    }
    digest = hashlib.sha256(json.dumps(before, sort_keys=True).encode()).hexdigest()
    assert config_hash(config, ruleset) == digest


def test_verify_reads_the_gib_from_the_devices_the_workers_recorded():
    t4 = [peak("w0", {F32: 8e12, F16: 65e12}, gpu((7, 5), 15360))]
    cpu = [peak("w0", {F32: 1e11}, DeviceFacts(accelerator=False))]
    right = settle(imagenet(), F16, [180, 195, 210])
    assert batch_problem(right, t4) is None
    assert batch_problem(right, []) is None, "no probe ran: nothing to judge it by"
    assert "(the profile's own list" in (batch_problem(right, cpu) or "")
    claimed = settle(imagenet(), F16, [192, 208, 224])  # 16 GiB claimed on a 15 GiB T4
    assert batch_problem(claimed, t4) == (
        "search.space.batch_size [192, 208, 224] is not [180, 195, 210] "
        "([12, 13, 14] x 15 GiB, its smallest GPU's)"
    )
    assert batch_problem(settle(imagenet(), BF16, [192, 208, 224]), cpu) is None


# --- a run resolves, records and is verified -----------------------------------------------------


def recorded(store: Store, config: BenchmarkConfig) -> RunRecorder:
    """The run recorded as `aiperf run` records it: in the database and its event log."""
    from aiperf.lifecycle import run

    return run.record_run(store, config)


def test_a_run_stores_what_it_resolved_and_verifies(tmp_path):
    from aiperf.lifecycle.prepare import record_peaks, resolve_settings

    config = imagenet(**{"out": str(tmp_path)}).model_copy(
        update={"db": f"sqlite:///{tmp_path / 'a.db'}"}
    )
    peaks = [peak(f"w{i}", {F32: 8e12, F16: 60e12 + i}, gpu((7, 5), 15360)) for i in range(2)]
    with Store.open(config.db) as store:
        recorder = recorded(store, config)
        run_id = recorder.run_id
        assert store.get_run(run_id).precision == "auto"
        settled = resolve_settings(config, recorder, peaks)
        record_peaks(settled, recorder, peaks)
        record = store.get_run(run_id)
        stored = BenchmarkConfig.model_validate(record.config)
        score = compute_score(
            RunWork(
                epochs=[EpochWork(1000, 100, 10**9, 3 * 10**8, 10**9, 3 * 10**8)],
                elapsed_s=config.budget_s,
                best_val_accuracy=0.75,
                val_samples=50000,
                best_val_loss=None,
                vocab_size=0,
                trials_completed=1,
                budget_s=config.budget_s,
            ),
            rules=stored.validity,
        )
        store.save_score(recorder.claim, score, ruleset=record.ruleset)
        record = store.get_run(run_id)
    assert stored == settled
    assert (stored.train.precision, stored.search.space.batch_size) == (F16, [180, 195, 210])
    assert record.precision == F16 and record.division == CLOSED
    assert [p["flops"] for p in record.worker_peaks] == [60e12, 60e12 + 1]
    assert {p["dtype"] for p in record.worker_peaks} == {"float16"}
    evidence = verify.Evidence(record, stored, None, {}, config.budget_s, score)
    assert record_checks.check_division(evidence).passed
    assert record_checks.check_validity_rules(evidence).passed
    log = next(Path(tmp_path).rglob("events.log"))
    logged = read_run(log).run
    assert logged.config == record.config and logged.config_hash == record.config_hash
    # A 16 GiB batch on the 15 GiB T4s the workers recorded: verify names it.
    claimed = settle(stored, F16, [192, 208, 224])
    failed = record_checks.check_validity_rules(
        verify.Evidence(record, claimed, None, {}, config.budget_s, score)
    )
    assert not failed.passed and "15 GiB" in failed.detail


def test_a_resolved_batch_the_data_cannot_hold_is_one_line(tmp_path):
    from aiperf.lifecycle.prepare import resolve_settings

    # nightly's 3000 generated samples are set in its config, so they are checked as it resolves.
    config = load_config(
        "nightly",
        workers=1,
        db=f"sqlite:///{tmp_path / 'a.db'}",
        out=str(tmp_path),
        overrides={"search.space.batch_per_gib": [12, 13, 14]},
    )
    huge = [peak("w0", {F32: 1e12}, gpu((9, 0), 300 * 1024))]  # 14 x 300 GiB > 3000 samples
    with Store.open(config.db) as store:
        recorder = recorded(store, config)
        with pytest.raises(UserError, match="search.space.batch_size") as error:
            resolve_settings(config, recorder, huge)
    assert "\n" not in str(error.value) and "batch_per_gib" in str(error.value)


def test_a_real_probe_on_this_cpu_chooses_by_the_cpu_rule():
    from aiperf.train.peak import in_precision
    from aiperf.train.worker import peak_on_worker

    found = peak_on_worker(seconds=0.2, candidates=[F32, BF16, F16])
    facts = DeviceFacts.from_dict(found["device_facts"])
    assert set(found["probes"]) == set(supported_precisions(facts)), "float16: not on a CPU"
    assert all(probe["flops"] > 0 for probe in found["probes"].values())
    rates = {p: probe["flops"] for p, probe in found["probes"].items()}
    chosen = resolve_precision([rates], (F32, BF16, F16), [facts])
    # bfloat16 where this CPU has AMX, whatever the rates (docs/rules.md, "Precision").
    assert chosen == (BF16 if "amx_bf16" in facts.cpu_bf16 else F32), rates
    assert in_precision(found, chosen)["flops"] == rates[chosen]
    if facts.cpu_bf16:  # this machine's AVX-512 BF16
        assert found["probes"][BF16]["dtype"] == "bfloat16"


def test_a_run_on_real_workers_probes_resolves_and_records(tmp_path):
    """prepare_workers as a run calls it: warm-up and probes on a real Dask worker, the settings
    resolved and stored, the peaks recorded in the resolved precision."""
    from distributed import Client, LocalCluster

    from aiperf.lifecycle.prepare import prepare_workers

    config = load_config(
        "quick",
        workers=1,
        db=f"sqlite:///{tmp_path / 'a.db'}",
        out=str(tmp_path),
        overrides={"train.precision": "auto"},
    )
    with (
        LocalCluster(
            n_workers=1, threads_per_worker=1, processes=False, dashboard_address=":0"
        ) as cluster,
        Client(cluster) as client,
        Store.open(config.db) as store,
    ):
        recorder = recorded(store, config)
        run_id = recorder.run_id
        settled = prepare_workers(config, recorder, client)
        record = store.get_run(run_id)
    assert settled.train.precision in (F32, BF16) and record.precision == settled.train.precision
    assert record.division == CLOSED == classify(settled).name
    (measured,) = record.worker_peaks
    facts = DeviceFacts.from_dict(measured["device_facts"])
    assert settled.train.precision == (BF16 if "amx_bf16" in facts.cpu_bf16 else F32)
    assert set(measured["probes"]) <= {F32, BF16}
    assert measured["flops"] == measured["probes"][settled.train.precision]["flops"], "the chosen"
    assert record.peak_flops == measured["flops"]
