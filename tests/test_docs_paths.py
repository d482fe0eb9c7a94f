"""Every repository path README.md and docs/*.md name exists in the checkout.

Files move (issue 50 found docs/rules.md still pointing to a module that had moved); a reader
following a stale path finds nothing, and no other test reads the docs. Checked: paths under the
repository's top folders, in backticks or as a link's target, and a file with an extension
anywhere in the text; a link's relative target (`[x](scaling.md)`), from the page's folder. Not
checked: paths a run makes (`~/.cache/aiperf/...`: another folder comes before them), URLs.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
TOP = r"(?:aiperf|tests|benchmarks|infra|flows|docs|migrations)"
# A path under a top folder that nothing path-like comes before (not `~/.cache/aiperf/x`).
PATH = re.compile(rf"(?<![\w./~$-]){TOP}/[\w./*-]*")
CODE = re.compile(r"`([^`\n]+)`")
LINK = re.compile(r"\]\(([^)\s]+)\)")
FILE = re.compile(r"\.(?:py|md|sh|ya?ml|toml|ini|json|txt)$")


def _named(text: str) -> set[str]:
    """The repository paths a page names: those in code spans and link targets, and elsewhere
    those that name a file (prose says `aiperf/` loosely, as a word)."""
    quoted = " ".join(CODE.findall(text) + LINK.findall(text))
    paths = set(PATH.findall(quoted))
    paths |= {p for p in PATH.findall(text) if FILE.search(p.rstrip("."))}
    return {p.rstrip(".") for p in paths}


def _relative_links(page: Path, text: str) -> set[str]:
    """Link targets relative to the page (no scheme, not an anchor), as repository paths."""
    targets = set()
    for target in LINK.findall(text):
        target = target.split("#")[0]
        if target and "://" not in target and not target.startswith("mailto:"):
            resolved = (page.parent / target).resolve()
            if resolved.is_relative_to(ROOT):
                targets.add(str(resolved.relative_to(ROOT)))
            else:  # a page links out of the checkout: reported as missing, as it is in a clone
                targets.add(f"{target} (outside the checkout)")
    return targets


def _exists(path: str) -> bool:
    """A file or folder, a glob that matches one, or a name's beginning that one has (the docs
    write `aiperf/rules/aiperf-rules-` for the family of rule files)."""
    if any(c in path for c in "*?["):
        return any(ROOT.glob(path))
    target = ROOT / path
    if target.exists():
        return True
    return not path.endswith("/") and any(target.parent.glob(target.name + "*"))


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_path_the_docs_name_exists(page: Path) -> None:
    text = page.read_text()
    missing = sorted(p for p in _named(text) | _relative_links(page, text) if not _exists(p))
    assert not missing, f"{page.relative_to(ROOT)} names paths the checkout lacks: {missing}"


def test_the_check_finds_the_paths_it_should() -> None:
    text = (
        "See `aiperf/search/growth.py`, [the rules](docs/rules.md), and tests/test_x.py. "
        "The lock `~/.cache/aiperf/local-run.lock` and the word aiperf/ are no paths here."
    )
    assert _named(text) == {"aiperf/search/growth.py", "docs/rules.md", "tests/test_x.py"}
    assert not _exists("aiperf/no_such_module.py")
    assert _exists("aiperf/search/") and _exists("aiperf/search/*.py")
