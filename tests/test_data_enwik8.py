"""`data.kind: enwik8` (aiperf/data/enwik8.py): the stand-in in enwik8's format stages into token
shards split 90/5/5 by bytes, zipped or not; a corpus whose bytes are not the published enwik8's
is named in one line (a closed run refused, an open one told); a missing or foreign file is one
line through `aiperf stage`, exit 2, no traceback. Each test stages kilobytes, in well under 5 s.
"""

from __future__ import annotations

import json

import numpy as np
import pytest
from typer.testing import CliRunner

from aiperf.cli.main import app
from aiperf.config import DataConfig, load_config
from aiperf.data.enwik8 import ENWIK8_SHA256, split_bounds, standin_bytes, write_standin
from aiperf.data.pins import closed_problems
from aiperf.data.problems import DataError
from aiperf.data.staging import stage
from aiperf.data.staging_tokens import validate_tokens
from aiperf.data.tokens import load_tokens
from aiperf.results.data_checks import open_data_note, refuse_unpinned
from aiperf.rules import load_ruleset

SIZE = 20_480  # the stand-in node's (benchmarks/gpu_node_standin.sh)


def _config(source, seq_len: int = 32) -> DataConfig:
    return DataConfig(kind="enwik8", source=str(source), seq_len=seq_len)


def test_the_standard_split_is_enwik8s_byte_counts():
    assert split_bounds(100_000_000) == (90_000_000, 95_000_000)
    pin = load_ruleset("aiperf-rules-1.8").for_profile("enwik8").data
    assert pin is not None and pin.tokens and pin.source_sha256 == ENWIK8_SHA256
    assert (pin.train_samples, pin.val_samples) == ((90_000_000 - 1) // 1024, 4_999_999 // 1024)


def test_the_standin_stages_into_shards_of_the_standard_split(tmp_path):
    zipped = write_standin(tmp_path / "enwik8.zip", SIZE)
    bare = write_standin(tmp_path / "bare" / "enwik8", SIZE, zipped=False)
    assert bare.read_bytes() == standin_bytes(SIZE) and bare.read_bytes().startswith(b"<mediawiki")
    manifest = stage(_config(zipped), 0, tmp_path / "data")
    train_end, valid_end = split_bounds(SIZE)
    assert (manifest.kind, manifest.train_tokens, manifest.val_tokens) == (
        "enwik8",
        train_end,
        valid_end - train_end,
    )
    assert (manifest.train_samples, manifest.val_samples) == (
        (train_end - 1) // 32,
        (valid_end - train_end - 1) // 32,
    )
    staged = validate_tokens(manifest.path)  # every shard checks out
    assert len(load_tokens(manifest.path, "train")) == train_end
    first = np.load(f"{manifest.path}/{staged.shards[0]['file']}")
    assert bytes(first[:10].astype(np.uint8)) == standin_bytes(SIZE)[:10]  # bytes are tokens
    assert manifest.overlap is not None and manifest.overlap["overlaps"] == 0
    assert manifest.source_sha256 != ENWIK8_SHA256 and len(manifest.source_md5) == 32
    # The zip and the bare file hold the same bytes: the same shards, the same digests.
    again = stage(_config(bare), 0, tmp_path / "data")
    assert (again.sha256, again.source_sha256) == (manifest.sha256, manifest.source_sha256)


def test_a_corpus_that_is_not_the_published_one_is_named_in_one_line(tmp_path):
    source = write_standin(tmp_path / "enwik8.zip", 300_000)
    manifest = stage(_config(source, seq_len=1024), 0, tmp_path / "data").to_dict()
    pin = load_ruleset("aiperf-rules-1.8").for_profile("enwik8").data
    assert pin is not None
    [digest] = [p for p in closed_problems(manifest, pin) if "sha256" in p]
    assert ENWIK8_SHA256[:12] in digest and manifest["source_sha256"][:12] in digest
    closed = load_config(
        "enwik8", workers=1, runs_here=False, overrides={"data.source": str(source)}
    )
    with pytest.raises(DataError) as refused:
        refuse_unpinned(closed, manifest)
    assert "\n" not in str(refused.value) and ENWIK8_SHA256[:12] in str(refused.value)
    assert open_data_note(closed, manifest) is None  # closed: refused, not noted
    tried = load_config(
        "enwik8",
        workers=1,
        runs_here=False,
        overrides={"data.source": str(source), "search.seed_architecture": "lm-tiny"},
    )
    note = open_data_note(tried, manifest)
    assert note is not None and "\n" not in note and ENWIK8_SHA256[:12] in note


@pytest.mark.parametrize("what", ["missing", "foreign", "zip without enwik8", "too small"])
def test_a_bad_source_is_one_line_through_aiperf_stage(tmp_path, what):
    source = tmp_path / "enwik8.zip"
    if what == "foreign":
        source.write_bytes(b"\x00\x01 not a wiki dump")
    elif what == "zip without enwik8":
        import zipfile

        with zipfile.ZipFile(source, "w") as archive:
            archive.writestr("other.txt", "hello")
    elif what == "too small":
        write_standin(source, 600)
    args = ["stage", str(source), "--seq-len", "64", "--to", str(tmp_path / "out")]
    result = CliRunner().invoke(app, [*args, "--db", f"sqlite:///{tmp_path / 'a.db'}"])
    assert result.exit_code == 2, result.output
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: dataset"), result.output
    assert "Traceback" not in result.output


def test_aiperf_stage_guesses_enwik8_from_a_file(tmp_path):
    source = write_standin(tmp_path / "enwik8.zip", SIZE)
    args = ["stage", str(source), "--seq-len", "32", "--to", str(tmp_path / "out"), "--json"]
    result = CliRunner().invoke(app, [*args, "--db", f"sqlite:///{tmp_path / 'a.db'}"])
    assert result.exit_code == 0, result.output
    manifest = json.loads(result.stdout[result.stdout.index("{") :])
    assert (manifest["kind"], manifest["source"]) == ("enwik8", str(source))
    db = f"sqlite:///{tmp_path / 'a.db'}"
    shown = CliRunner().invoke(app, [*args[:-1], "--db", db], env={"COLUMNS": "200"})
    assert shown.exit_code == 0 and "not enwik8's: only an open run takes it" in shown.stdout
