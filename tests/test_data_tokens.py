"""Token data for the LM track (issue 35 item 3): `synthetic-text` and `text` staged as uint16
shards with a manifest, checked, pinned by their digest like generated images, and read back as
(inputs, targets) batches with exact counts. No test here trains more than a few steps.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from pydantic import ValidationError

from aiperf.config import BenchmarkConfig, DataConfig, SearchConfig
from aiperf.data import staging_tokens, text_synthetic
from aiperf.data.manifest import MANIFEST_FILE, dataset_digest, read_manifest, write_json_atomic
from aiperf.data.pins import closed_problems
from aiperf.data.problems import DataError
from aiperf.data.staging import preflight, stage
from aiperf.data.staging_tokens import check_tokens, sequences, validate_tokens
from aiperf.data.text_folder import read_text
from aiperf.data.tokens import load_tokens, ngram_nats, open_token_feed, token_batches, windows
from aiperf.results.data_checks import digest_on_disk
from aiperf.rules import DataPin

SMALL = {"kind": "synthetic-text", "train_tokens": 5000, "val_tokens": 900, "seq_len": 16}


def staged(tmp_path: Path, seed: int = 0, **settings):
    return stage(DataConfig(**{**SMALL, **settings}), seed, tmp_path / "data")


# --- the generated language ------------------------------------------------------------------


def test_synthetic_text_is_the_seeds_and_only_the_seeds():
    one = text_synthetic.stream(3, "train", 40_000)
    assert one.dtype == np.uint16 and len(one) == 40_000 and int(one.max()) < 256
    assert np.array_equal(one, text_synthetic.stream(3, "train", 40_000))
    assert np.array_equal(one[:10_000], text_synthetic.stream(3, "train", 10_000))  # a prefix
    other = text_synthetic.stream(4, "train", 40_000)
    assert np.mean(one != other) > 0.5
    assert not np.array_equal(one, text_synthetic.stream(3, "validation", 40_000))


def test_every_document_repeats_its_key_and_closes_its_brackets():
    text = text_synthetic.stream(0, "train", 60_000).astype(np.uint8).tobytes()
    documents = text.split(bytes([text_synthetic.DOC_END]))[:-1]  # the last may be cut short
    assert len(documents) > 20
    for doc in documents:
        header, body = doc.split(b"\n", 1)
        assert header.startswith(b"@") and len(header) == 5
        key = header[1:]
        trailers = [line.rsplit(b" #", 1)[1] for line in body.strip(b"\n").split(b"\n")]
        assert trailers and set(trailers) == {key}
        assert body.count(b"(") == body.count(b")")
        assert body.count(b'"') % 2 == 0
        depth = np.cumsum([{40: 1, 41: -1}.get(c, 0) for c in body])
        assert depth.min() >= 0 and depth.max() <= 1


def test_longer_contexts_predict_the_validation_split_better():
    """The structure is learnable: unigram > bigram > 4-gram nats per token on validation."""
    train = text_synthetic.stream(1, "train", 300_000)
    validation = text_synthetic.stream(1, "validation", 50_000)
    unigram, bigram, fourgram = ngram_nats(train, validation, (1, 2, 4))
    assert unigram > bigram + 0.5 > fourgram + 1.0


# --- staging, checks and pins ----------------------------------------------------------------


def test_the_manifest_counts_every_token_and_sequence_exactly(tmp_path, monkeypatch):
    monkeypatch.setattr(staging_tokens, "SHARD_TOKENS", 2048)
    manifest = staged(tmp_path)
    data = read_manifest(manifest.path)
    assert data["format"] == "tokens" and data["kind"] == "synthetic-text"
    assert (data["train_tokens"], data["val_tokens"]) == (5000, 900)
    assert data["train_samples"] == (5000 - 1) // 16 == 312
    assert data["val_samples"] == (900 - 1) // 16
    assert data["vocab_size"] == data["classes"] == 256 and data["seq_len"] == 16
    names = [s["name"] for s in data["shards"]]
    assert names == [
        "train-00000-of-00003.npy",
        "train-00001-of-00003.npy",
        "train-00002-of-00003.npy",
        "validation-00000-of-00001.npy",
    ]
    assert [s["tokens"] for s in data["shards"]] == [2048, 2048, 904, 900]
    assert data["sha256"] == dataset_digest(data["shards"]) == manifest.sha256
    assert data["overlap"]["overlaps"] == 0 and data["overlap"]["images_hashed"] > 0
    assert check_tokens(manifest.path) == []
    assert np.array_equal(
        load_tokens(manifest.path, "train"), text_synthetic.stream(0, "train", 5000)
    )


def test_staging_again_skips_the_work_and_follows_seq_len(tmp_path):
    first = staged(tmp_path)
    shard = Path(first.path) / first.shards[0]["file"]
    written = shard.stat().st_mtime_ns
    again = staged(tmp_path, seq_len=32)
    assert shard.stat().st_mtime_ns == written  # not generated or written again
    assert again.sha256 == first.sha256 and again.path == first.path
    assert again.train_samples == (5000 - 1) // 32
    assert read_manifest(first.path)["seq_len"] == 32
    more = staged(tmp_path, train_tokens=6000)  # other inputs: another folder
    assert more.path != first.path and more.sha256 != first.sha256


def test_the_digest_is_the_contents_in_another_process(tmp_path):
    code = (
        "import sys; from pathlib import Path; from aiperf.config import DataConfig; "
        "from aiperf.data.staging import stage; "
        "print(stage(DataConfig(kind='synthetic-text', train_tokens=5000, val_tokens=900, "
        "seq_len=16), 0, Path(sys.argv[1])).sha256)"
    )
    there = subprocess.run(
        [sys.executable, "-c", code, str(tmp_path / "there")],
        capture_output=True,
        text=True,
        timeout=300,
        check=True,
    ).stdout.split()[-1]
    assert staged(tmp_path).sha256 == there


def test_a_flipped_byte_is_refused_by_the_checks_and_the_pin(tmp_path):
    manifest = staged(tmp_path)
    pin = DataPin(
        kind="synthetic-text",
        classes=256,
        train_samples=manifest.train_samples,
        val_samples=manifest.val_samples,
        sha256=manifest.sha256,
    )
    assert closed_problems(manifest.to_dict(), pin) == []
    shard = Path(manifest.path) / "validation-00000-of-00001.npy"
    raw = bytearray(shard.read_bytes())
    raw[-8] ^= 0x01  # the low byte of a validation token: still a byte, another one
    shard.write_bytes(bytes(raw))
    problems = check_tokens(manifest.path)
    assert problems == [
        "validation-00000-of-00001.npy has changed (its sha256 is not the manifest's)"
    ]
    with pytest.raises(DataError, match="validation-00000-of-00001.npy has changed"):
        validate_tokens(manifest.path)
    assert digest_on_disk(manifest.to_dict()) != pin.sha256  # verify's re-digest sees it
    # The manifest rewritten to the changed shard's checksum: the content digest is not the pin's.
    data = read_manifest(manifest.path)
    for entry in data["shards"]:
        if entry["name"] == shard.name:
            entry["sha256"] = staging_tokens.sha256_file(shard)
    data["sha256"] = dataset_digest(data["shards"])
    write_json_atomic(Path(manifest.path) / MANIFEST_FILE, data)
    assert check_tokens(manifest.path) == []
    assert any("content sha256" in p for p in closed_problems(data, pin))
    # A run staging it again digests what is there: the closed run is refused before its search.
    again = staged(tmp_path)
    assert again.sha256 == data["sha256"] != pin.sha256
    assert any("content sha256" in p for p in closed_problems(again.to_dict(), pin))


def test_a_token_outside_the_vocabulary_is_named(tmp_path):
    manifest = staged(tmp_path)
    data = read_manifest(manifest.path)
    shard = Path(manifest.path) / data["shards"][0]["file"]
    tokens = np.load(shard)
    tokens[5] = 300
    np.save(shard, tokens)
    data["shards"][0]["sha256"] = staging_tokens.sha256_file(shard)
    data["sha256"] = dataset_digest(data["shards"])
    write_json_atomic(Path(manifest.path) / MANIFEST_FILE, data)
    assert check_tokens(manifest.path) == [f"{shard.name} holds token 300, >= vocab 256"]


# --- a folder of text ------------------------------------------------------------------------


def _write_texts(root: Path, count: int = 8) -> dict[str, bytes]:
    texts = {}
    for i in range(count):
        rel = f"part{i % 2}/doc{i}.txt"
        texts[rel] = f"document {i}: ünïcode ok, {'words ' * (i + 3)}\n".encode()
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_bytes(texts[rel])
    (root / ".hidden").write_bytes(b"\xff\xfe not read")
    (root / "empty.txt").write_bytes(b"")
    return texts


def test_text_files_are_split_whole_by_the_seed(tmp_path):
    texts = _write_texts(tmp_path / "corpus")
    one = read_text(tmp_path / "corpus", seed=0, val_fraction=0.25)
    assert sorted(one.files["train"] + one.files["validation"]) == sorted(texts)
    assert one.files["train"] and one.files["validation"]
    held_out = sum(len(texts[f]) for f in one.files["validation"])
    assert held_out <= 0.25 * sum(len(t) for t in texts.values())
    for split in ("train", "validation"):
        stream = one.train if split == "train" else one.validation
        expected = b"".join(texts[f] + b"\xff" for f in one.files[split])
        assert stream.dtype == np.uint16 and stream.astype(np.uint8).tobytes() == expected
    assert read_text(tmp_path / "corpus", 0, 0.25).files == one.files
    splits = {tuple(read_text(tmp_path / "corpus", s, 0.25).files["validation"]) for s in range(6)}
    assert len(splits) > 1  # the seed chooses the files


def test_a_text_folder_stages_and_validates(tmp_path):
    _write_texts(tmp_path / "corpus")
    config = DataConfig(kind="text", source=str(tmp_path / "corpus"), seq_len=8)
    preflight(config)
    manifest = stage(config, 0, tmp_path / "data")
    assert manifest.kind == "text" and manifest.overlap["overlaps"] == 0
    assert manifest.train_samples == sequences(len(load_tokens(manifest.path, "train")), 8)
    assert validate_tokens(manifest.path).sha256 == manifest.sha256
    (tmp_path / "corpus" / "part0" / "copy.txt").write_bytes(
        (tmp_path / "corpus" / "part0" / "doc0.txt").read_bytes()
    )
    pair = {"part0/doc0.txt", "part0/copy.txt"}
    found = set()
    for seed in range(12):  # a file in both splits (the same text twice) is an overlap
        held_out = pair & set(read_text(config.source or "", seed, 0.1).files["validation"])
        overlaps = stage(config, seed, tmp_path / "data").overlap["overlaps"]
        assert overlaps == (1 if len(held_out) == 1 else 0)
        found.add(overlaps)
    assert found == {0, 1}


def test_a_file_that_is_not_utf8_is_one_line_naming_it(tmp_path):
    _write_texts(tmp_path / "corpus")
    (tmp_path / "corpus" / "part1" / "latin1.txt").write_bytes("caf\xe9 au lait".encode("latin-1"))
    config = DataConfig(kind="text", source=str(tmp_path / "corpus"))
    with pytest.raises(DataError) as err:
        stage(config, 0, tmp_path / "data")
    message = str(err.value)
    assert "\n" not in message
    assert "part1/latin1.txt is not UTF-8 (byte 0xe9 at offset 3)" in message


@pytest.mark.parametrize(
    ("files", "says"),
    [
        ({}, "holds no files"),
        ({"only.txt": b"one file"}, "holds 1 non-empty text file"),
        ({"a.txt": b"", "b.txt": b""}, "holds 0 non-empty text files"),
        ({"a.txt": b"x" * 200, "b.txt": b"short"}, "not one sequence of data.seq_len 16"),
    ],
)
def test_a_folder_without_text_for_both_splits_is_one_line(tmp_path, files, says):
    (tmp_path / "corpus").mkdir()
    for name, data in files.items():
        (tmp_path / "corpus" / name).write_bytes(data)
    config = DataConfig(kind="text", source=str(tmp_path / "corpus"), seq_len=16)
    with pytest.raises(DataError, match=says) as err:
        stage(config, 0, tmp_path / "data")
    assert "\n" not in str(err.value) and str(tmp_path / "corpus") in str(err.value)


# --- batches ---------------------------------------------------------------------------------


def test_windows_are_targets_one_token_on_and_counted_exactly():
    stream = np.arange(50, dtype=np.uint16)
    x, y = windows(stream, 8)
    assert x.shape == y.shape == (6, 8) and x.dtype == np.int32  # (50 - 1) // 8
    assert np.array_equal(y, x + 1) and x[0, 0] == 0 and y[-1, -1] == 48


def test_training_batches_cover_every_window_once_per_pass_in_a_seeded_order(tmp_path):
    manifest = staged(tmp_path)
    x_all, y_all = windows(load_tokens(manifest.path, "train"), 16)
    steps = len(x_all) // 10  # whole batches: 312 windows, 31 batches of 10
    window = {row.tobytes(): i for i, row in enumerate(x_all)}
    assert len(window) == len(x_all)  # every window tells itself apart
    passes = token_batches(manifest.path, "train", 10, 16, seed=7, passes=True)
    batches = [(x.numpy(), y.numpy()) for x, y in passes.take(2 * steps)]
    order = []
    for x, y in batches:
        assert x.shape == y.shape == (10, 16) and x.dtype == y.dtype == np.int32
        assert np.array_equal(x[:, 1:], y[:, :-1])  # targets: the inputs one token on
        picked = [window[row.tobytes()] for row in x]
        assert np.array_equal(y, y_all[picked])
        order.extend(picked)
    first, second = order[: steps * 10], order[steps * 10 :]
    assert len(set(first)) == len(set(second)) == steps * 10  # no window twice in a pass
    assert first != second  # a new order each pass
    again = token_batches(manifest.path, "train", 10, 16, seed=7)
    assert [window[r.tobytes()] for r in next(iter(again))[0].numpy()] == first[:10]


def test_evaluation_covers_the_validation_split_once_with_a_short_last_batch(tmp_path):
    manifest = staged(tmp_path)
    x_all, y_all = windows(load_tokens(manifest.path, "validation"), 16)
    got = list(token_batches(manifest.path, "validation", 10, 16))
    assert [len(x) for x, _y in got] == [10] * 5 + [len(x_all) - 50]
    assert np.array_equal(np.concatenate([x.numpy() for x, _ in got]), x_all)
    assert np.array_equal(np.concatenate([y.numpy() for _, y in got]), y_all)


def test_a_tiny_model_fits_and_evaluates_on_the_feed(tmp_path):
    import keras

    manifest = staged(tmp_path)
    feed = open_token_feed(manifest.path, batch_size=8, seq_len=16, seed=0)
    assert feed.train_samples == 312 // 8 * 8 and feed.val_samples == (900 - 1) // 16
    model = keras.Sequential(
        [
            keras.Input((16,), dtype="int32"),
            keras.layers.Embedding(256, 16),
            keras.layers.Dense(256),
        ]
    )
    model.compile("adam", keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    history = model.fit(**feed.epochs, epochs=2, verbose=0)
    assert len(history.history["loss"]) == 2
    loss = model.evaluate(**feed.val, verbose=0)
    assert 0 < loss < np.log(256)


# --- the config ------------------------------------------------------------------------------


def test_token_settings_are_checked_with_the_config():
    with pytest.raises(ValidationError, match="needs data.source"):
        DataConfig(kind="text")
    with pytest.raises(ValidationError, match="not synthetic-text"):
        DataConfig(kind="synthetic-text", source="/somewhere")
    with pytest.raises(ValidationError, match="holds no sequence"):
        DataConfig(kind="synthetic-text", train_tokens=100, seq_len=128)
    with pytest.raises(ValidationError, match="seq_len"):
        DataConfig(kind="synthetic-text", seq_len=1)
    data = DataConfig(kind="synthetic-text", train_tokens=1000, val_tokens=500, seq_len=32)
    base = {"profile": "t", "budget_s": 60, "workers": 1, "data": data}
    base["validity"] = {"loss_ceiling": 3.0}  # token data is judged by its loss
    lm = {"objective": "val_loss"}  # token data is the LM track's: judged by loss
    BenchmarkConfig(**base, search=SearchConfig(**lm, space={"batch_size": [31]}))
    with pytest.raises(ValidationError, match="larger than data.train_tokens' sequences \\(31\\)"):
        BenchmarkConfig(**base, search=SearchConfig(**lm, space={"batch_size": [32]}))
    # ... and the LM track's batch in tokens is counted in windows of seq_len.
    BenchmarkConfig(**base, search=SearchConfig(**lm, space={"batch_tokens": [31 * 32]}))
    with pytest.raises(ValidationError, match="search.space.batch_tokens: a batch is larger"):
        BenchmarkConfig(**base, search=SearchConfig(**lm, space={"batch_tokens": [32 * 32]}))
    with pytest.raises(ValidationError, match="set search.objective=val_loss"):
        BenchmarkConfig(**base, search=SearchConfig(space={"batch_size": [31]}))
    with pytest.raises(ValidationError, match="validity.loss_ceiling is not set"):
        BenchmarkConfig(
            **{**base, "validity": {}}, search=SearchConfig(**lm, space={"batch_size": [8]})
        )


def test_stage_to_copies_the_token_shards(tmp_path):
    manifest = staged(tmp_path, stage_to=str(tmp_path / "local"))
    copy = tmp_path / "local" / manifest.name
    assert manifest.stage_to == str(tmp_path / "local")
    assert check_tokens(copy) == [] and read_manifest(copy)["sha256"] == manifest.sha256
    assert os.path.samefile(read_manifest(copy)["path"], copy)


JAX_FEED = """
import sys
from pathlib import Path
import keras, numpy as np
from aiperf.config import DataConfig
from aiperf.data.staging import stage
from aiperf.data.tokens import open_token_feed
config = DataConfig(kind="synthetic-text", train_tokens=5000, val_tokens=900, seq_len=16)
manifest = stage(config, 0, Path(sys.argv[1]))
feed = open_token_feed(manifest.path, batch_size=8, seq_len=16, seed=0)
assert keras.backend.backend() == "jax" and feed.kind == "arrays", feed.kind
x, y = feed.epochs["x"], feed.epochs["y"]
assert x.dtype == y.dtype == np.int32 and x.shape == (feed.train_samples, 16)
assert np.array_equal(x[:, 1:], y[:, :-1])
model = keras.Sequential(
    [keras.Input((16,), dtype="int32"), keras.layers.Embedding(256, 16), keras.layers.Dense(256)]
)
model.compile("adam", keras.losses.SparseCategoricalCrossentropy(from_logits=True))
model.fit(**feed.epochs, epochs=1, verbose=0)
print("loss", model.evaluate(**feed.val, verbose=0), feed.train_samples, feed.val_samples)
"""


def test_on_jax_the_feed_is_int32_arrays_keras_slices(tmp_path):
    env = {**os.environ, "KERAS_BACKEND": "jax", "TF_CPP_MIN_LOG_LEVEL": "2"}
    done = subprocess.run(
        [sys.executable, "-c", JAX_FEED, str(tmp_path / "data")],
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    _word, loss, trained, evaluated = done.stdout.split()[-4:]
    assert 0 < float(loss) < np.log(256)
    assert (int(trained), int(evaluated)) == (312 // 8 * 8, (900 - 1) // 16)


def test_image_workloads_keep_their_hash_at_the_token_settings_defaults():
    """The token settings joined the config after image runs were recorded: at their defaults they
    stay out of the workload hash (aiperf.results.division.ADDED_LATER), so the defaults there
    must be the config's."""
    from aiperf.results.division import ADDED_LATER

    defaults = DataConfig()
    for name in ("seq_len", "train_tokens", "val_tokens", "val_fraction"):
        assert ADDED_LATER[f"data.{name}"] == getattr(defaults, name), name


def test_the_lm_profiles_pinned_bytes_survive_the_generators_split_into_draws_and_render(tmp_path):
    """text_synthetic draws a chunk's choices (_draw) and renders them (_render) apart, so that
    text_entropy can sum the choices' probabilities: not a byte may change. lm-quick's data, staged
    as its profile stages it, still has the content sha256 every ruleset since 1.5 pins."""
    from aiperf.config import load_config
    from aiperf.rules import load_ruleset

    config = load_config("lm-quick", workers=1, runs_here=False)
    manifest = stage(config.data, config.seed, tmp_path / "data")
    for version in ("1.5", "1.7"):
        pin = load_ruleset(f"aiperf-rules-{version}").for_profile("lm-quick").data
        assert pin is not None and manifest.sha256 == pin.sha256, version
