"""The imagenet profile is a valid config on every current GPU node (issue 32, item 2).

Resolved for an 8-GPU node's peak records as its worker would report them (nvidia-smi's memory and
compute capability, a probe of each precision), through the real resolve_settings on a temporary
SQLite store and event log, the packaged imagenet profile must stay valid and closed: no check
against a sample count the config never read, one precision whichever of bfloat16 and float16 the
probe happened to measure faster, a per-device batch capped at 1,024 (aiperf-rules-1.4), and LARS
at the node's global batch (aiperf-rules-1.6). Nothing trains.
"""

from __future__ import annotations

import time

import pytest

from aiperf.config import BenchmarkConfig, load_config
from aiperf.data.manifest import Manifest
from aiperf.errors import UserError
from aiperf.results.division import CLOSED, batch_problem, classify
from aiperf.rules import load_ruleset
from aiperf.store import Store
from aiperf.train.auto import DeviceFacts, resolve_precision, resolved_settings
from aiperf.train.peak import compute_dtype
from aiperf.train.recipe import scaled_rate

F32, BF16, F16 = "float32", "mixed_bfloat16", "mixed_float16"
MIB = 2**20
IMAGENET_TRAIN = load_ruleset("aiperf-rules-1.4").for_profile("imagenet").data.train_samples  # type: ignore[union-attr]

# Each node as its one worker (cluster.devices_per_trial: node) reports it: 8 GPUs, the smallest's
# memory in bytes and compute capability; realistic dense per-GPU rates in FLOP/s (float32 without
# TF32; bfloat16 and float16 on the same tensor cores, within 1% of each other).
NODES = {
    "8 x H200": ({"memory_bytes": 143771336704, "compute_capability": "9.0"}, 60e12, 700e12),
    "8 x H100 80GB": ({"memory_bytes": 81559 * MIB, "compute_capability": "9.0"}, 55e12, 650e12),
    "8 x A100 40GB": ({"memory_bytes": 40960 * MIB, "compute_capability": "8.0"}, 19e12, 250e12),
}
# The GiB each node's batch is sized by: its GPUs' whole GiB (133, 79, 40), at most
# batch_cap // max(batch_per_gib) = 1024 // 14 = 73.
SIZED_GIB = {"8 x H200": 73, "8 x H100 80GB": 73, "8 x A100 40GB": 40}


def node_peak(node: str, faster: str) -> dict:
    """The node's worker's peak record (peak_on_worker with candidates): `faster` of bfloat16 and
    float16 measured 0.6% above the other, as probe noise leaves them on Hopper."""
    facts, f32, tensor = NODES[node]
    rates = {F32: 8 * f32, BF16: 8 * tensor, F16: 8 * tensor}
    rates[faster] *= 1.006
    return {
        "worker": "tcp://node-0:4000",
        "flops": rates[F32],
        "dtype": "float32",
        "device": "gpu",
        "seconds": 0.2,
        "probes": {
            p: {"flops": r, "dtype": compute_dtype(p), "seconds": 0.2} for p, r in rates.items()
        },
        "device_facts": {"accelerator": True, "gpus": 8, "cpu_bf16": [], **facts},
    }


def on_the_node(tmp_path, **overrides) -> BenchmarkConfig:
    """The packaged imagenet profile as `aiperf run --profile imagenet` loads it on an 8-GPU node."""
    return load_config(
        "imagenet",
        db=f"sqlite:///{tmp_path / 'a.db'}",
        out=str(tmp_path),
        cluster={"gpus": 8},
        overrides={"data.source": str(tmp_path / "shards"), **overrides},
    )


def manifest(train_samples: int) -> Manifest:
    """What staging ImageNet-format shards of `train_samples` train images records."""
    return Manifest(
        name="imagenet",
        kind="tfrecord",
        path="/data",
        sha256="0" * 64,
        size_bytes=0,
        image_shape=(224, 224, 3),
        classes=1000,
        train_samples=train_samples,
        val_samples=50000,
        images_per_class={},
        format="tfrecord",
    )


@pytest.mark.parametrize("faster", [BF16, F16])
@pytest.mark.parametrize("node", list(NODES))
def test_imagenet_resolved_for_a_gpu_node_is_valid_and_closed(tmp_path, node, faster):
    from aiperf.lifecycle import run
    from aiperf.lifecycle.prepare import record_peaks, resolve_settings
    from aiperf.lifecycle.staging import refuse_batch_beyond_data

    config = on_the_node(tmp_path)
    assert (config.workers, config.data.train_samples) == (1, 3000), "3000: a default never read"
    peaks = [node_peak(node, faster)]
    with Store.open(config.db) as store:
        recorder = run.record_run(store, config)
        run_id = recorder.run_id
        settled = resolve_settings(config, recorder, peaks)  # raised here before
        record_peaks(settled, recorder, peaks)
        record = store.get_run(run_id)
    gib = SIZED_GIB[node]
    assert settled.train.precision == BF16, "bfloat16 on compute capability 8.0 and later"
    assert settled.search.space.batch_size == [12 * gib, 13 * gib, 14 * gib]
    assert BenchmarkConfig.model_validate(record.config) == settled
    assert (record.precision, record.division, record.ruleset) == (
        BF16,
        CLOSED,
        "aiperf-rules-1.6",
    )
    assert classify(settled).deviations == ()
    assert batch_problem(settled, record.worker_peaks) is None, "verify's batch check passes"
    assert record.peak_flops == peaks[0]["probes"][BF16]["flops"], "MFU's divisor: bfloat16's"
    # The staged ImageNet holds the node's largest global batch; a handful of shards would not.
    global_batch = 8 * max(settled.search.space.batch_size)
    assert global_batch <= 8192, "the cap of aiperf-rules-1.4, kept by 1.6"
    refuse_batch_beyond_data(settled, manifest(IMAGENET_TRAIN))
    with pytest.raises(UserError, match="staged dataset's train images") as error:
        refuse_batch_beyond_data(settled, manifest(global_batch - 1))
    assert "\n" not in str(error.value)
    # The recipe at that global batch (aiperf-rules-1.6): LARS at the searched global rate, up to
    # the MLPerf reference's 10, not scaled with the batch, after a 5-epoch warm-up from 0.
    train = settled.train
    assert (train.optimizer, train.lr_schedule, train.warmup_epochs) == ("lars", "polynomial", 5.0)
    top = settled.search.space.learning_rate[1]
    assert scaled_rate(top, global_batch, train.lr_reference_batch) == top == 10.0


def test_the_precision_is_the_same_whichever_of_bf16_and_f16_probes_faster():
    facts = [DeviceFacts(accelerator=True, gpus=8, compute_capability=(9, 0))] * 2
    for f16_over_bf16 in (0.99, 0.999, 1.0, 1.001, 1.01, 1.5):
        probes = [{F32: 60e12, BF16: 700e12, F16: 700e12 * f16_over_bf16}] * 2
        assert resolve_precision(probes, (F32, BF16, F16), facts) == BF16, f16_over_bf16
    # Turing and Volta have no bfloat16: float16, however the probes came out; Pascal: float32.
    t4 = [DeviceFacts(accelerator=True, gpus=1, compute_capability=(7, 5))]
    assert resolve_precision([{F32: 8e12, F16: 7e12}], (F32, BF16, F16), t4) == F16
    p100 = [DeviceFacts(accelerator=True, gpus=1, compute_capability=(6, 0))]
    assert resolve_precision([{F32: 9e12}], (F32, BF16, F16), p100) == F32
    # An A100 beside a V100: what every worker's GPUs support.
    mixed = [t4[0], facts[0]]
    probes = [{F32: 14e12, F16: 110e12}, {F32: 60e12, BF16: 700e12, F16: 700e12}]
    assert resolve_precision(probes, (F32, BF16, F16), mixed) == F16
    # The ruleset still decides what is closed: 1.0 has no float16.
    assert (
        resolve_precision(probes[1:], load_ruleset("aiperf-rules-1.0").precisions, facts[:1])
        == BF16
    )


def test_the_stand_in_nodes_1_gib_gpus_keep_12_13_14():
    config = load_config(
        "imagenet", workers=1, cluster={"gpus": 8}, overrides={"data.source": "/d"}
    )
    small = node_peak("8 x H200", BF16)
    small["device_facts"]["memory_bytes"] = 2**30
    assert resolved_settings(config, [small]) == {
        "train.precision": BF16,
        "search.space.batch_size": [12, 13, 14],
    }


def test_a_tfrecord_dataset_is_not_checked_against_a_count_it_never_read():
    """Before the manifest is known only generated kinds are checked (their counts are set), and
    only a batch that trains: on GPUs with batch_per_gib the listed one is the CPUs' and the
    devices' memory replaces it (checked against the staged count once resolved)."""
    big = {"search.space.batch_size": [2048], "cluster.gpus": 8}
    config = load_config("imagenet", workers=1, overrides={"data.source": "/d", **big})
    assert config.data.train_samples < 8 * 2048
    load_config("imagenet-shaped", workers=1, overrides=big)
    on_cpus = {"search.space.batch_size": [20000]}
    with pytest.raises(UserError, match=r"larger than data.train_samples \(12800\)") as error:
        load_config("imagenet-shaped", workers=1, overrides=on_cpus)
    assert "\n" not in str(error.value)


def test_a_resolved_batch_the_generated_data_cannot_hold_is_one_line(tmp_path):
    from aiperf.lifecycle import run
    from aiperf.lifecycle.prepare import resolve_settings

    config = load_config(
        "imagenet-shaped",
        workers=1,
        db=f"sqlite:///{tmp_path / 'a.db'}",
        out=str(tmp_path),
        overrides={"data.train_samples": 1000},
    )
    huge = node_peak("8 x H200", BF16)  # 1022 a device > 1000 samples
    with Store.open(config.db) as store:
        recorder = run.record_run(store, config)
        with pytest.raises(UserError, match="search.space.batch_size") as error:
            resolve_settings(config, recorder, [huge])
    assert "\n" not in str(error.value) and "batch_per_gib" in str(error.value)


def test_the_rate_scales_with_the_global_batch_only_where_the_profile_says():
    assert scaled_rate(0.1, 8192, 256) == pytest.approx(3.2), "Goyal et al.'s 8k rate"
    assert scaled_rate(0.1, 256, 256) == 0.1 and scaled_rate(0.1, 8192, None) == 0.1
    quick = load_config("quick", workers=1)
    assert quick.train.lr_reference_batch is None and quick.search.space.batch_cap is None


def test_the_orchestrator_sends_each_trial_its_scaled_rate(tmp_path):
    from conftest import FinishedTrial
    from simulated_search import EndAfter, simulated_orchestrator

    from aiperf.train.messages import TrialRequest, TrialResult
    from aiperf.train.simulated import SimulatedModel, plan_trial

    sent: list[TrialRequest] = []

    def launch(request: TrialRequest) -> FinishedTrial:
        sent.append(request)
        model = SimulatedModel(ops_per_s=1e12, train_samples=384, val_samples=128)
        plan = plan_trial(request, time.time(), "w", model)
        return FinishedTrial(TrialResult(request.trial_key, plan.status, plan.built, plan.epochs))

    scaled = {"train.lr_reference_batch": 16, "cluster.devices_per_trial": 2}
    ending = EndAfter(launch, 2)
    orchestrator = simulated_orchestrator(tmp_path, ending, overrides=scaled)
    ending.orchestrator = orchestrator
    with orchestrator.recorder.store:
        started = time.time()
        orchestrator.run(started, started + 600.0)
        trials = {
            t.trial_key: t for t in orchestrator.recorder.store.get_run(orchestrator.run_id).trials
        }
    assert sent
    for request in sent:
        searched = trials[request.trial_key].hyperparameters["learning_rate"]
        assert request.devices == 2
        assert request.learning_rate == pytest.approx(searched * request.batch_size * 2 / 16)


def test_a_changed_large_batch_rule_is_open_and_verify_names_an_uncapped_batch(tmp_path):
    for key, value, shown in (
        ("train.lr_reference_batch", 512, "train.lr_reference_batch: None -> 512"),
        ("train.optimizer", "sgd", "train.optimizer: 'lars' -> 'sgd'"),
        ("search.space.batch_cap", 2048, "search.space.batch_cap: 1024 -> 2048"),
        ("train.warmup_epochs", 0, "train.warmup_epochs: 5.0 -> 0.0"),
    ):
        division = classify(on_the_node(tmp_path, **{key: value}))
        assert division.name == "open" and division.deviations == (shown,), key
    h200 = [node_peak("8 x H200", BF16)]
    uncapped = on_the_node(tmp_path, **{"search.space.batch_size": [1596, 1729, 1862]})
    assert classify(uncapped).name == CLOSED, "multipliers x a whole GiB: verify judges the GiB"
    assert batch_problem(uncapped, h200) == (
        "search.space.batch_size [1596, 1729, 1862] is not [876, 949, 1022] ([12, 13, 14] x "
        "133 GiB, its smallest GPU's, capped at 73 GiB by search.space.batch_cap 1024)"
    )
