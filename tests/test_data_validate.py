"""Every kind of bad input gets its own message naming the file, a non-zero exit from the CLI, and
leaves no shard that looks complete (nor a manifest.json) behind."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from typer.testing import CliRunner

from aiperf.cli.main import app
from aiperf.config import DataConfig
from aiperf.data.folder import scan_folder
from aiperf.data.manifest import MANIFEST_FILE
from aiperf.data.problems import DataError
from aiperf.data.staging import stage


@pytest.fixture(scope="module")
def pristine(make_image_folder, tmp_path_factory) -> Path:
    return make_image_folder(
        tmp_path_factory.mktemp("pristine") / "images", train_per_class=3, val_per_class=2
    )


@pytest.fixture
def images(pristine, tmp_path) -> Path:
    """A fresh, valid copy to break."""
    return Path(shutil.copytree(pristine, tmp_path / "images"))


def _problems(root: Path) -> list[str]:
    with pytest.raises(DataError) as caught:
        scan_folder(root)
    return caught.value.problems


def _stage_problems(root: Path, out: Path) -> list[str]:
    config = DataConfig(kind="folder", source=str(root), image_size=16, shard_images=4)
    with pytest.raises(DataError) as caught:
        stage(config, 0, out)
    return caught.value.problems


def test_a_valid_folder_scans(images):
    layout = scan_folder(images)
    assert layout.class_names == ["cat", "dog", "fish"]
    assert layout.counts("train") == {"cat": 3, "dog": 3, "fish": 3}
    assert len(layout.files["validation"]) == 6


def test_missing_folder(tmp_path):
    [problem] = _problems(tmp_path / "nowhere")
    assert "nowhere does not exist" in problem and "ROOT/train/<class>" in problem


def test_missing_train_and_val_folders(images):
    shutil.rmtree(images / "val")
    [problem] = _problems(images)
    assert "no val/ folder" in problem
    shutil.rmtree(images / "train")
    assert any("no train/ folder" in p for p in _problems(images))


def test_empty_class(images):
    for f in (images / "train" / "dog").iterdir():
        f.unlink()
    [problem] = _problems(images)
    assert problem.startswith("class folder train/dog is empty")


def test_train_and_val_class_mismatch(images):
    shutil.rmtree(images / "val" / "fish")
    (images / "val" / "bird").mkdir()
    shutil.copy(images / "val" / "cat" / "cat_0000.jpg", images / "val" / "bird" / "bird.jpg")
    [problem] = _problems(images)
    assert "train and val have different classes" in problem
    assert "only in train: fish" in problem and "only in val: bird" in problem


def test_file_outside_a_class_folder(images):
    (images / "train" / "stray.jpg").write_bytes(
        (images / "train" / "cat" / "cat_0000.jpg").read_bytes()
    )
    [problem] = _problems(images)
    assert "train/stray.jpg is not inside a class folder" in problem


def test_corrupt_jpeg(images, tmp_path):
    bad = images / "train" / "cat" / "cat_0001.jpg"
    data = bytearray(bad.read_bytes())
    data[200:-2] = bytes(len(data) - 202)  # keep the header and the end marker, zero the scan
    data[200:260] = b"\xff\x01" * 30
    bad.write_bytes(bytes(data))
    [problem] = _stage_problems(images, tmp_path / "out")
    assert problem.startswith("train/cat/cat_0001.jpg is a corrupt JPEG (cannot decode")


def test_truncated_jpeg(images, tmp_path):
    bad = images / "val" / "dog" / "dog_0001.jpg"
    bad.write_bytes(bad.read_bytes()[:300])
    [problem] = _stage_problems(images, tmp_path / "out")
    assert problem.startswith("val/dog/dog_0001.jpg is a truncated JPEG")


def test_non_image_file(images, tmp_path):
    (images / "train" / "fish" / "notes.txt").write_text("not a picture\n")
    [problem] = _stage_problems(images, tmp_path / "out")
    assert (
        problem == "train/fish/notes.txt is not a JPEG or PNG image (it is a text file); remove it"
    )


def test_every_bad_file_is_named_and_no_shard_looks_complete(images, tmp_path):
    out = tmp_path / "out"
    config = DataConfig(kind="folder", source=str(images), image_size=16, shard_images=4)
    staged = stage(config, 0, out)  # a good staging first: its shards and manifest exist
    assert (Path(staged.path) / MANIFEST_FILE).is_file()
    (images / "train" / "fish" / "notes.txt").write_text("hello")
    truncated = images / "train" / "cat" / "cat_0002.jpg"
    truncated.write_bytes(truncated.read_bytes()[:250])
    problems = _stage_problems(images, out)
    assert len(problems) == 2
    assert {p.split(" ")[0] for p in problems} == {
        "train/fish/notes.txt",
        "train/cat/cat_0002.jpg",
    }
    folder = Path(staged.path)
    assert not (folder / MANIFEST_FILE).exists(), "a staging that failed must not look complete"
    assert not list(folder.glob("*.partial")) and not list(folder.glob(".*partial"))


def test_cli_prints_one_line_and_exits_2(images):
    for f in (images / "train" / "dog").iterdir():
        f.unlink()
    db = f"sqlite:///{images.parent / 'aiperf.db'}"
    result = CliRunner().invoke(
        app,
        ["stage", str(images), "--to", str(images.parent / "out"), "--db", db],
        env={"COLUMNS": "300"},
    )
    assert result.exit_code == 2
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert len(lines) == 1 and "class folder train/dog is empty" in lines[0]
    assert "Traceback" not in result.output


def test_config_errors_name_the_setting():
    from aiperf.config import load_config
    from aiperf.errors import UserError

    with pytest.raises(UserError, match="data.kind folder needs data.source"):
        load_config("quick", overrides={"data.kind": "folder"})
    with pytest.raises(UserError, match="at most 1797 for digits"):
        load_config("quick", overrides={"data.kind": "digits"})
