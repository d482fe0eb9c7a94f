"""Feed rate against device rate (aiperf.train.feedrate): measured on a worker through the real
pipeline and the real seed model, and the verdict `show`, the report and the package print. The
run that records them end to end is tests/test_benchmark_flow.py's."""

from __future__ import annotations

import pytest

from aiperf.train.feedrate import rates_on_worker, verdict


def test_a_worker_measures_its_tf_data_feed_and_its_devices_on_pixels(folder_data):
    rates = rates_on_worker(
        folder_data.path,
        input_shape=folder_data.image_shape,
        classes=folder_data.classes,
        seed_architecture="resnet-mini",
        batch=8,
        devices=1,
        precision="float32",
        jit_compile=False,
        seconds=0.2,
    )
    assert rates["feed"] == "tf.data" and rates["batch"] == 8 and rates["devices"] == 1
    assert rates["accelerated"] is False and rates["device_batch"] == 8  # CPU: at most 8 a device
    assert rates["feed_images_per_s"] > 0 and rates["device_images_per_s"] > 0
    judged = verdict(rates["feed"], [rates])
    assert judged is not None and judged.workers == 1
    assert judged.bound == (rates["feed_images_per_s"] < rates["device_images_per_s"])


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
    assert verdict(None, []) is None and verdict("tf.data", [{"worker": "w0"}]) is None
    # An edited event log's odd records are left out, never a traceback in show or the report.
    assert verdict("tf.data", [1, {"device_images_per_s": "fast"}]) is None
