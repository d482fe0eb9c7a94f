"""An image folder in the ImageNet layout, checked for shape before any image is read:

    ROOT/train/<class>/<image>    ROOT/val/<class>/<image>    (JPEG or PNG; `validation/` also works)

Class names are the sub-folder names, labelled in sorted order. Every structural problem is found
in one pass (a missing folder, an empty class, a file outside a class folder, train and val with
different classes) and reported together; images are decoded later, shard by shard, on the workers.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from aiperf.data.images import MAX_IMAGE_BYTES
from aiperf.data.problems import DataError

LAYOUT = "ROOT/train/<class>/<image> and ROOT/val/<class>/<image>"
VAL_FOLDERS = ("val", "validation")


@dataclass(frozen=True)
class FolderLayout:
    root: Path
    class_names: list[str]
    files: dict[
        str, list[tuple[str, int]]
    ]  # split (train | validation) -> [(path under root, label)]

    def counts(self, split: str) -> dict[str, int]:
        counts = dict.fromkeys(self.class_names, 0)
        for _rel, label in self.files[split]:
            counts[self.class_names[label]] += 1
        return counts


def _visible(path: Path) -> bool:
    return not path.name.startswith(".")  # .DS_Store and friends are not data


def shown_name(rel: str) -> str:
    """A path as one printable line: a name that is not UTF-8 (Python keeps its bytes as
    surrogates) shows its bad bytes escaped, as \\xff."""
    return rel.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")


def _not_utf8(rel: str) -> bool:
    try:
        rel.encode("utf-8")
    except UnicodeEncodeError:
        return True
    return False


def _file_problem(item: Path, rel: str) -> str | None:
    """Why a class folder's entry cannot be an image file (None: it can be read)."""
    if _not_utf8(rel):
        return (
            f"{shown_name(rel)} has a name that is not UTF-8 (ImageNet-format shards store names "
            "as UTF-8); rename it"
        )
    if not item.is_file():  # follows links; False for FIFOs, sockets and devices
        return f"{rel} is not a regular file (a FIFO, socket, device or broken link); remove it"
    size = item.stat().st_size
    if size > MAX_IMAGE_BYTES:
        return (
            f"{rel} is {size >> 20} MiB, more than the {MAX_IMAGE_BYTES >> 20} MiB an image may "
            "be; shrink or remove it"
        )
    return None


def _split_classes(root: Path, split_dir: Path, problems: list[str]) -> dict[str, list[str]]:
    """class name -> sorted file paths under root; problems for everything out of place."""
    classes: dict[str, list[str]] = {}
    entries = sorted(p for p in split_dir.iterdir() if _visible(p))
    for entry in entries:
        rel = entry.relative_to(root).as_posix()
        if _not_utf8(rel):
            problems.append(f"{shown_name(rel)} has a name that is not UTF-8; rename it")
            continue
        if not entry.is_dir():
            problems.append(f"{rel} is not inside a class folder (the layout is {LAYOUT})")
            continue
        files = []
        for item in sorted(p for p in entry.iterdir() if _visible(p)):
            item_rel = item.relative_to(root).as_posix()
            if item.is_dir():
                problems.append(
                    f"{shown_name(item_rel)} is a folder inside a class folder (the layout is "
                    f"{LAYOUT})"
                )
                continue
            problem = _file_problem(item, item_rel)
            if problem:
                problems.append(problem)
            else:
                files.append(item_rel)
        if not files:
            problems.append(f"class folder {rel} is empty; add its images or remove the folder")
        classes[entry.name] = files
    if not entries:
        problems.append(
            f"{split_dir.relative_to(root).as_posix()}/ has no class folders (the layout is {LAYOUT})"
        )
    return classes


def scan_folder(source: str | Path) -> FolderLayout:
    """The folder's classes and files, or a DataError naming every structural problem."""
    root = Path(source).expanduser()
    if _not_utf8(str(root)):
        raise DataError(
            shown_name(str(source)),
            [f"the folder's path {shown_name(str(root))} is not UTF-8; rename it"],
        )
    if not root.exists():
        raise DataError(
            str(source), [f"folder {root} does not exist; give a folder laid out as {LAYOUT}"]
        )
    if not root.is_dir():
        raise DataError(str(source), [f"{root} is a file, not a folder laid out as {LAYOUT}"])
    root = root.resolve()
    problems: list[str] = []
    train_dir = root / "train"
    val_dir = next((root / name for name in VAL_FOLDERS if (root / name).is_dir()), None)
    if not train_dir.is_dir():
        problems.append(f"there is no train/ folder in {root} (the layout is {LAYOUT})")
    if val_dir is None:
        problems.append(f"there is no val/ folder in {root} (the layout is {LAYOUT})")
    if problems:
        raise DataError(str(source), problems)
    assert val_dir is not None
    train = _split_classes(root, train_dir, problems)
    val = _split_classes(root, val_dir, problems)
    only_train, only_val = sorted(set(train) - set(val)), sorted(set(val) - set(train))
    if only_train or only_val:
        parts = ([f"only in train: {', '.join(only_train)}"] if only_train else []) + (
            [f"only in val: {', '.join(only_val)}"] if only_val else []
        )
        problems.append(
            f"train and val have different classes ({'; '.join(parts)}); every class needs "
            "a folder with images in both"
        )
    if problems:
        raise DataError(str(source), problems)
    names = sorted(train)
    labels = {name: i for i, name in enumerate(names)}
    files = {
        "train": [(rel, labels[name]) for name in names for rel in train[name]],
        "validation": [(rel, labels[name]) for name in names for rel in val[name]],
    }
    return FolderLayout(root=root, class_names=names, files=files)
