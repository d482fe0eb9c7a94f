"""`aiperf stage` on real Dask workers: converts, copies node-local with checksums, and prints the
manifest; a second call does no conversion again."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from sqlalchemy import text
from typer.testing import CliRunner

from aiperf.cli.main import app
from aiperf.store import Store

pytestmark = pytest.mark.slow


def test_stage_command_converts_and_copies(make_image_folder, tmp_path):
    images = make_image_folder(tmp_path / "images", train_per_class=6, val_per_class=2)
    db = f"sqlite:///{tmp_path / 'aiperf.db'}"
    args = [
        "stage",
        str(images),
        "--to",
        str(tmp_path / "out"),
        "--workers",
        "2",
        "--shard-images",
        "5",
        "--stage-to",
        str(tmp_path / "local"),
        "--db",
        db,
        "--json",
    ]
    result = CliRunner().invoke(app, args, env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.output
    manifest = json.loads(result.stdout[result.stdout.index("{") :])
    assert (manifest["kind"], manifest["train_samples"], manifest["val_samples"]) == (
        "folder",
        18,
        6,
    )
    assert len([s for s in manifest["shards"] if s["split"] == "train"]) == 4
    # Two workers on one machine are one node: one copy, shared by both.
    assert len(manifest["copies"]) == 1 and manifest["stage_to"] == str(tmp_path / "local")
    assert Path(tmp_path / "local" / manifest["name"] / "manifest.json").is_file()
    staged = Path(manifest["path"])
    stamps = {
        p.name: p.stat().st_mtime_ns for p in staged.iterdir() if not p.name.endswith(".json")
    }
    again = CliRunner().invoke(app, args[:-1], env={"COLUMNS": "200"})
    assert again.exit_code == 0, again.output
    assert "train images" in again.stdout and manifest["sha256"][:20] in again.stdout
    assert stamps == {
        p.name: p.stat().st_mtime_ns for p in staged.iterdir() if not p.name.endswith(".json")
    }
    with Store.open_existing(db) as store, store.engine.connect() as connection:
        recorded = connection.execute(
            text("SELECT run_id, sha256, manifest FROM datasets ORDER BY id")
        ).all()
    assert [(r.run_id, r.sha256) for r in recorded] == [(None, manifest["sha256"])] * 2, (
        "each staging is recorded"
    )
    assert json.loads(recorded[0].manifest)["shards"] == manifest["shards"]


def test_stage_digits(tmp_path):
    result = CliRunner().invoke(
        app,
        [
            "stage",
            "digits",
            "--to",
            str(tmp_path),
            "--json",
            "--db",
            f"sqlite:///{tmp_path / 'aiperf.db'}",
        ],
    )
    assert result.exit_code == 0, result.output
    manifest = json.loads(result.stdout[result.stdout.index("{") :])
    assert (manifest["kind"], manifest["classes"], manifest["train_samples"]) == (
        "digits",
        10,
        1437,
    )
    assert Path(manifest["path"], "manifest.json").is_file()


def test_stage_token_data_from_text_files_and_synthetic_text(tmp_path):
    """`aiperf stage` takes the LM track's two kinds: a folder of UTF-8 files (--kind text) and
    synthetic-text; each is recorded, and a file that is not UTF-8 is one line naming it."""
    folder = tmp_path / "text"
    folder.mkdir()
    for i in range(4):
        (folder / f"part{i}.txt").write_text(f"document {i}: " + "the quick brown fox " * 60)
    db = f"sqlite:///{tmp_path / 'aiperf.db'}"
    for source, extra in ((str(folder), ["--kind", "text"]), ("synthetic-text", [])):
        args = ["stage", source, *extra, "--seq-len", "32", "--to", str(tmp_path / "out")]
        result = CliRunner().invoke(app, [*args, "--db", db, "--json"])
        assert result.exit_code == 0, result.output
        manifest = json.loads(result.stdout[result.stdout.index("{") :])
        assert manifest["seq_len"] == 32 and manifest["vocab_size"] == 256
        assert manifest["train_samples"] == (manifest["train_tokens"] - 1) // 32
    with Store.open_existing(db) as store, store.engine.connect() as conn:
        manifests = conn.execute(text("SELECT manifest FROM datasets ORDER BY id")).scalars()
        kinds = [json.loads(m)["kind"] for m in manifests]
    assert kinds == ["text", "synthetic-text"]
    (folder / "latin1.txt").write_bytes("caf\xe9".encode("latin-1"))
    result = CliRunner().invoke(
        app, ["stage", str(folder), "--kind", "text", "--to", str(tmp_path / "o2"), "--db", db]
    )
    assert result.exit_code == 2 and "latin1.txt is not UTF-8" in result.output
    assert "Traceback" not in result.output
