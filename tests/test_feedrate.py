"""Feed rate against device rate (aiperf.train.feedrate): measured on a worker through the real
pipeline and the real seed model, and the verdict `show`, the report and the package print. The
run that records them end to end is tests/test_benchmark_flow.py's."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from aiperf import settings
from aiperf.data import dali
from aiperf.train.feedrate import SHARED, verdict

# Run with 8 JAX host devices standing for a node's 8 GPUs (the stand-in's seam: docs/performance.md
# "The GPU node stand-in"). Every DALI pipeline built (aiperf.data.dali._pipeline, the real one,
# called through) is noted: its device, shard and batch. First the worker's measurement before the
# window (rates_on_worker), then a trial's own feed opened as aiperf.train.trial opens it, then the
# tf.data feed through trial_feed_rates. One JSON line out.
EIGHT_DEVICES = """
import json, sys
import keras
from aiperf.data import dali
from aiperf.data.feed import open_feed
from aiperf.train.devices import data_parallel
from aiperf.train import feedrate
from aiperf.train.seed import SeedModel

opened, real = [], dali._pipeline
def noted(files, indexes, decoding, **kw):
    opened.append([kw["device_id"], kw.get("shard", 0), kw.get("shards", 1), kw["batch"]])
    return real(files, indexes, decoding, **kw)
dali._pipeline = noted

path, shape, classes = sys.argv[1], tuple(json.loads(sys.argv[2])), int(sys.argv[3])
found = {}
seed = SeedModel(input_shape=shape, classes=classes, seed_architecture="resnet-mini",
    devices=8, precision="float32", jit_compile=False, feed="dali")
found["worker"] = feedrate.rates_on_worker(path, seed, batch=16, seconds=0.2)
found["measured"], opened[:] = list(opened), []
with data_parallel("jax", 8):  # a trial's feed, as aiperf.train.trial opens it
    trial = open_feed(path, batch_size=16, input_shape=shape, seed=1, feed="dali", devices=8)
    next(iter(trial.epochs["x"]))
found["trial"] = list(opened)
found["tf.data"] = feedrate.trial_feed_rates(
    path, batch=16, input_shape=shape, devices=8, seconds=0.2, feed="tf.data")
found["one"] = feedrate.trial_feed_rates(
    path, batch=2, input_shape=shape, devices=1, seconds=0.1, feed="dali")
print(json.dumps(found))
"""


@pytest.mark.slow
@pytest.mark.skipif(not dali.installed(), reason="NVIDIA DALI is not installed")
def test_the_feed_is_measured_on_the_trials_devices_as_the_trial_gets_it(folder_data):
    """On the 8-device stand-in the worker's feed measurement opens what a trial on the 8 devices
    opens: one DALI pipeline per device, each its own shard of the files at the per-device batch
    (16 / 8), not one pipeline at the global batch; its rates are recorded per device and for the
    node. The tf.data feed is one host pipeline, its per-device rate the node's share, said so."""
    env = {
        **os.environ,
        "KERAS_BACKEND": "jax",
        "JAX_PLATFORMS": "cpu",
        "XLA_FLAGS": "--xla_force_host_platform_device_count=8",
        settings.ACCELERATOR_PLATFORMS.name: "cpu",
        settings.WORKER_DEVICES.name: "8",
    }
    arguments = [folder_data.path, json.dumps(list(folder_data.image_shape))]
    done = subprocess.run(
        [sys.executable, "-c", EIGHT_DEVICES, *arguments, str(folder_data.classes)],
        capture_output=True,
        text=True,
        env=env,
        cwd=Path(__file__).resolve().parents[1],
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    found = json.loads(done.stdout.strip().splitlines()[-1])
    each_shard = [[None, shard, 8, 2] for shard in range(8)]  # CPU operators, shard, of 8, batch
    assert sorted(found["measured"], key=lambda p: p[1]) == each_shard, found["measured"]
    assert sorted(found["trial"], key=lambda p: p[1]) == each_shard, found["trial"]
    rates = found["worker"]
    devices = [f"cpu:{i}" for i in range(8)]
    assert (rates["feed"], rates["feed_pipelines"], rates["feed_devices"]) == ("dali", 8, devices)
    assert rates["feed_per_device"] == "measured" and rates["accelerated"] is True
    per_device = rates["feed_per_device_images_per_s"]
    assert len(per_device) == 8 and all(rate > 0 for rate in per_device)
    assert rates["feed_images_per_s"] == pytest.approx(sum(per_device))
    assert rates["device_images_per_s"] > 0 and rates["device_batch"] == 16
    judged = verdict(rates["feed"], [rates])
    assert judged is not None and judged.pipelines == 8 and judged.per_device_measured
    assert judged.bound == (rates["feed_images_per_s"] < rates["device_images_per_s"])
    line = judged.devices_line()
    assert line is not None and line.startswith("dali: 8 pipelines on 8 devices, ")
    host = found["tf.data"]
    assert (host["feed"], host["pipelines"], host["devices"]) == ("tf.data", 1, devices)
    assert host["per_device"] == SHARED and host["node_images_per_s"] > 0
    assert host["per_device_images_per_s"] == pytest.approx([host["node_images_per_s"] / 8] * 8)
    # One device, one DALI pipeline decoding for it: measured on that device, not a host's share.
    one = found["one"]
    assert (one["feed"], one["pipelines"], one["devices"]) == ("dali", 1, ["cpu:0"]), one
    assert one["per_device"] == "measured" and one["node_images_per_s"] > 0
    assert one["per_device_images_per_s"] == [one["node_images_per_s"]]


def test_the_verdict_says_feed_bound_and_by_how_much():
    rates = [
        {
            "worker": "w0",
            "feed": "tf.data",
            "feed_images_per_s": 300.0,
            "device_images_per_s": 950.0,
        },
        {
            "worker": "w1",
            "feed": "tf.data",
            "feed_images_per_s": 340.0,
            "device_images_per_s": 950.0,
        },
    ]
    judged = verdict("tf.data", rates)
    assert judged is not None and judged.bound and judged.idle == pytest.approx(1 - 640 / 1900)
    assert judged.line() == (
        "tf.data 640 img/s < devices 1,900 img/s: feed-bound, devices idle ~66%"
    )
    fast = verdict("tf.data", [{**r, "feed_images_per_s": 3800.0} for r in rates])
    assert fast is not None and not fast.bound and fast.idle == 0.0
    assert fast.line().endswith("not feed-bound (feed 4.0x the devices)")
    arrays = verdict("arrays", [{**rates[0], "feed": "arrays", "feed_images_per_s": None}])
    assert arrays is not None and not arrays.bound and "not measured" in arrays.line()
    assert fast.devices_line() is None  # recorded before the feed was measured per device
    # Per device, as trial_feed_rates records it: measured (a pipeline a device) or the share of
    # one host pipeline, said so.
    dali_rates = [
        {
            **r,
            "feed": "dali",
            "feed_pipelines": 8,
            "feed_per_device": "measured",
            "feed_per_device_images_per_s": [r["feed_images_per_s"] / 8 + i for i in range(8)],
        }
        for r in rates
    ]
    per_device = verdict("dali", dali_rates)
    assert per_device is not None and per_device.pipelines == 16
    assert per_device.devices_line() == (
        "dali: 16 pipelines on 16 devices, 44 img/s a device (38-50), node 640 img/s"
    )
    shared = verdict(
        "tf.data",
        [
            {
                **rates[0],
                "feed_pipelines": 1,
                "feed_per_device": SHARED,
                "feed_per_device_images_per_s": [75.0] * 4,
            }
        ],
    )
    assert shared is not None and not shared.per_device_measured
    assert shared.devices_line() == (
        "tf.data: 1 host pipeline for 4 devices, node 300 img/s, 75 img/s a device (node / devices)"
    )
    assert shared.to_dict()["per_device_images_per_s"] == [75.0] * 4
    assert verdict(None, []) is None and verdict("tf.data", [{"worker": "w0"}]) is None
    # An edited event log's odd records are left out, never a traceback in show or the report.
    assert verdict("tf.data", [1, {"device_images_per_s": "fast"}]) is None


def test_one_device_and_a_starved_device_keep_their_feed_per_device_line():
    """One DALI pipeline on one GPU reads as measured on it (not "1 host pipeline ... node /
    devices"), and a device the feed starved (0 img/s) keeps the line rather than hiding it; a
    list of rates that is not one per device is left out."""
    one = {
        "feed_images_per_s": 900.0,
        "device_images_per_s": 1000.0,
        "devices": 1,
        "feed_pipelines": 1,
        "feed_per_device": "measured",
        "feed_per_device_images_per_s": [900.0],
    }
    judged = verdict("dali", [one])
    assert judged is not None and judged.per_device_measured
    assert judged.devices_line() == (
        "dali: 1 pipeline on 1 device, 900 img/s a device, node 900 img/s"
    )
    starved = {**one, "devices": 2, "feed_pipelines": 2, "feed_per_device_images_per_s": [900, 0]}
    judged = verdict("dali", [starved])
    assert judged is not None and judged.per_device_images_per_s == (900.0, 0.0)
    line = judged.devices_line()
    assert line is not None and line.startswith(
        "dali: 2 pipelines on 2 devices, 450 img/s a device (0-900)"
    )
    short = verdict("dali", [{**starved, "feed_per_device_images_per_s": [900.0]}])
    assert short is not None and short.per_device_images_per_s is None
    as_json = judged.to_dict()
    assert as_json["feed_images_per_s"] == 900.0 and "node_images_per_s" not in as_json
