"""The shipped profiles load, the imagenet one is AIPerf's workload, and imagenet-shaped is the same
workload on generated data of ImageNet's shape."""

import pytest

from aiperf.arch import build_model, seed_spec
from aiperf.config import available_profiles, load_config
from aiperf.errors import UserError
from aiperf.ops import count_model


@pytest.mark.parametrize("name", ["quick", "imagenet", "imagenet-shaped"])
def test_profile_is_listed(name):
    assert name in available_profiles()


def test_imagenet_needs_its_data_and_names_the_fix():
    with pytest.raises(UserError, match="data.source"):
        load_config("imagenet", workers=1)


def test_imagenet_is_resnet50_on_224px_with_aiperf_rounds(tmp_path):
    config = load_config("imagenet", workers=1, overrides={"data.source": str(tmp_path)})
    assert (config.data.image_size, config.data.classes) == (224, 1000)
    assert config.search.oracle == "morphism" and config.search.seed_architecture == "resnet50"
    assert config.train.epochs == [15, 30, 45, 60]
    seed = seed_spec(config.search.seed_architecture, (224, 224, 3), 1000)
    counted = count_model(build_model(seed))
    assert (counted.eval_per_sample, counted.train_per_sample) == (7_806_583_495, 23_053_458_315)


def test_imagenet_shaped_is_imagenets_workload_on_generated_jpeg_shards(tmp_path):
    from aiperf.results.division import CLOSED, classify

    imagenet = load_config("imagenet", workers=1, overrides={"data.source": str(tmp_path)})
    shaped = load_config("imagenet-shaped", workers=1)
    assert shaped.data.kind == "generated-imagenet" and shaped.data.source is None
    assert (shaped.data.image_size, shaped.data.channels, shaped.data.classes) == (224, 3, 1000)
    assert shaped.search == imagenet.search and shaped.train == imagenet.train
    assert shaped.cluster.devices_per_trial == imagenet.cluster.devices_per_trial == "node"
    assert shaped.ruleset == "aiperf-rules-1.6" and shaped.validity.min_budget_s == 300.0
    assert classify(shaped).name == CLOSED
    # Sized by flags: another workload, in the open division with the change named.
    sized = load_config(
        "imagenet-shaped", workers=1, overrides={"data.train_samples": 1280, "data.classes": 100}
    )
    assert (sized.data.train_samples, sized.data.classes) == (1280, 100)
    division = classify(sized)
    assert division.name == "open" and any("data.classes" in d for d in division.deviations)
    with pytest.raises(UserError, match="data.channels 4 cannot be a JPEG's"):
        load_config("imagenet-shaped", workers=1, overrides={"data.channels": 4})
    with pytest.raises(UserError, match="data.source is only for kinds folder and tfrecord"):
        load_config("imagenet-shaped", workers=1, overrides={"data.source": str(tmp_path)})
