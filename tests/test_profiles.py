"""The shipped profiles load, and the imagenet one is AIPerf's workload."""

import pytest

from aiperf.arch import build_model, seed_spec
from aiperf.config import available_profiles, load_config
from aiperf.errors import UserError
from aiperf.ops import count_model


@pytest.mark.parametrize("name", ["quick", "imagenet"])
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
