"""Every skip of the tests names the command that installs what is missing.

A skip goes through ``tests/system_packages.py``: :func:`~system_packages.require` (the
``requires`` marker) for a system package, :func:`~system_packages.skip_missing` or
:func:`~system_packages.skip_unless` for anything else, which refuse a command that is no
``apt-get install`` or ``pip install``.  This test finds any other way to skip in
tests/*.py (``pytest.skip``, ``pytest.mark.skip``/``skipif``, ``pytest.importorskip``).
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
import system_packages

TESTS = Path(__file__).resolve().parent
# only the helpers may call pytest's skips themselves
HELPERS = {TESTS / "system_packages.py"}
SKIPS = {"pytest.skip", "pytest.importorskip", "pytest.mark.skip", "pytest.mark.skipif"}


def dotted(node: ast.AST) -> str:
    """``a.b.c`` for a chain of attributes on a name, else ""."""
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if not isinstance(node, ast.Name):
        return ""
    return ".".join([node.id, *reversed(parts)])


def direct_skips(source: str, filename: str) -> list[str]:
    """file:line of each skip in ``source`` that does not go through the helpers.
    ``pytest.skip.Exception`` (what a test of a skip catches) skips nothing."""
    found: list[tuple[int, str]] = []
    tree = ast.parse(source, filename)
    exceptions = {
        id(node.value)
        for node in ast.walk(tree)
        if isinstance(node, ast.Attribute) and node.attr == "Exception"
    }
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and id(node) not in exceptions:
            if dotted(node) in SKIPS:
                found.append((node.lineno, dotted(node)))
        elif isinstance(node, ast.ImportFrom) and node.module in ("pytest", "_pytest.outcomes"):
            for alias in node.names:
                if alias.name in ("skip", "importorskip"):
                    found.append((node.lineno, f"from pytest import {alias.name}"))
    return [f"{filename}:{line}: {what}" for line, what in sorted(found)]


def test_no_test_skips_but_through_the_helpers() -> None:
    files = sorted(set(TESTS.glob("*.py")) - HELPERS)
    assert len(files) > 50  # the suite's files, not an empty folder
    found = [
        hit for path in files for hit in direct_skips(path.read_text(encoding="utf-8"), path.name)
    ]
    assert found == [], (
        "skip through system_packages.require / skip_missing / skip_unless, which name "
        "the apt-get or pip command that installs what is missing:\n" + "\n".join(found)
    )


def test_the_scan_finds_each_way_to_skip() -> None:
    source = "\n".join(
        [
            "import pytest",
            "from pytest import importorskip",
            "pytest.skip('no reason')",
            "@pytest.mark.skipif(True, reason='needs fork')",
            "def f(): pass",
            "pytest.importorskip('x')",
            "mark = pytest.mark.skip",
            "with pytest.raises(pytest.skip.Exception): pass",  # catches one: no skip
        ]
    )
    assert [hit.split(": ")[0] for hit in direct_skips(source, "t.py")] == [
        "t.py:2",
        "t.py:3",
        "t.py:4",
        "t.py:6",
        "t.py:7",
    ]


def test_a_skip_without_an_install_command_is_refused() -> None:
    with pytest.raises(ValueError, match="apt-get or pip command"):
        system_packages.skip_message("x is missing", "get it somewhere")
    with pytest.raises(ValueError):
        system_packages.skip_unless(False, "needs fork", "a POSIX system")
    assert system_packages.skip_message("x is missing", "pip install x") == (
        "x is missing: pip install x"
    )


def test_a_missing_need_skips_with_its_command_and_fails_under_ci(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("CI", raising=False)
    with pytest.raises(pytest.skip.Exception, match="y is missing: apt-get install y"):
        system_packages.skip_missing("y is missing", "apt-get install y")
    monkeypatch.setenv("CI", "true")
    with pytest.raises(pytest.fail.Exception, match="CI must run every test"):
        system_packages.skip_missing("y is missing", "apt-get install y")
