"""Every AIPERF_* variable is declared once, in aiperf.settings, and read through it."""

from __future__ import annotations

import ast
import re
import subprocess
from pathlib import Path

import pytest

from aiperf import settings
from aiperf.errors import UserError

ROOT = Path(__file__).resolve().parents[1]
NAME = re.compile(r"\bAIPERF_[A-Z0-9_]*[A-Z0-9]\b")


def _tracked(*patterns: str) -> list[Path]:
    listed = subprocess.run(
        ["git", "ls-files", *patterns], cwd=ROOT, capture_output=True, text=True, check=True
    )
    return [ROOT / line for line in listed.stdout.splitlines() if (ROOT / line).is_file()]


def test_every_variable_the_project_names_is_declared() -> None:
    declared = {v.name for v in settings.VARIABLES}
    named: dict[str, str] = {}
    for path in _tracked("aiperf", "flows", "infra", "tests", "benchmarks", "Makefile", "*.yaml"):
        for name in NAME.findall(path.read_text(errors="replace")):
            named.setdefault(name, str(path.relative_to(ROOT)))
    undeclared = {name: where for name, where in named.items() if name not in declared}
    assert not undeclared, f"declare these in aiperf/settings.py: {undeclared}"


def test_no_module_spells_a_variable_name_of_its_own() -> None:
    """A name as a whole string literal anywhere but settings.py is a second home for it."""
    spelt = []
    for path in _tracked("aiperf/*.py", "aiperf/**/*.py", "flows/*.py"):
        if path.name == "settings.py" and path.parent.name == "aiperf":
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Constant) and isinstance(node.value, str):
                if NAME.fullmatch(node.value):
                    spelt.append(f"{path.relative_to(ROOT)}:{node.lineno} {node.value}")
    assert not spelt, spelt


def test_the_readme_lists_every_variable_a_user_sets() -> None:
    readme = (ROOT / "README.md").read_text()
    missing = [v.name for v in settings.VARIABLES if v.kind == "user" and v.name not in readme]
    assert not missing, f"README.md's table of variables lacks {missing}"


def test_docs_list_every_variable_aiperf_or_infra_sets() -> None:
    documented = (ROOT / "docs" / "settings.md").read_text()
    missing = [v.name for v in settings.VARIABLES if v.kind != "user" and v.name not in documented]
    assert not missing, f"docs/settings.md's table of variables lacks {missing}"


def test_a_bad_value_is_one_line_naming_the_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(settings.DB_RETRY_S.name, "soon")
    with pytest.raises(UserError, match=r"^AIPERF_DB_RETRY_S='soon' is not a number 0 or more"):
        settings.number(settings.DB_RETRY_S)
    monkeypatch.setenv(settings.HEARTBEAT_TIMEOUT.name, "0")
    with pytest.raises(UserError, match="more than 0"):
        settings.number(settings.HEARTBEAT_TIMEOUT, positive=True)
    monkeypatch.setenv(settings.MAX_CONSECUTIVE_FAILURES.name, "-2")
    with pytest.raises(UserError, match="whole number of at least 1"):
        settings.count(settings.MAX_CONSECUTIVE_FAILURES)


def test_defaults_apply_when_unset(monkeypatch: pytest.MonkeyPatch) -> None:
    for variable in (settings.DB_RETRY_S, settings.MAX_CONSECUTIVE_FAILURES, settings.DB_URL):
        monkeypatch.delenv(variable.name, raising=False)
    assert settings.number(settings.DB_RETRY_S) == 120.0
    assert settings.count(settings.MAX_CONSECUTIVE_FAILURES) is None
    assert settings.text(settings.DB_URL) is None
